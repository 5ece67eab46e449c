"""A pod's storage volumes (persistentVolumeClaim, hostPath, nfs) as the pool's site maps them: resolved with
the pool's announced :class:`pb.StoragePolicy` (:func:`kernel.storage.resolve`), or refused at ``/create``
naming the pod field; and the shell lines that check, at job start, what the mounts point at.

A subPath is checked twice. At the door: relative, no ``..``, no empty component (``fields.relative_path``).
At job start, on the site: the directory a mount binds, after every symlink (``realpath``), must still be
below the site's directory for the volume (the claim's directory, the allowed hostPath prefix, the NFS
mount); else the pod's set-up fails (exit 125) before any container runs. A symlink planted inside a claim
that points out of it is so **refused**, not neutralised: following it inside the claim instead (as
``openat2``'s ``RESOLVE_IN_ROOT`` would) would mount some other file than the one the pod named, silently.
The check and the mount are two steps: a tenant racing to swap a directory for a symlink in between reaches
only what its own account may read (the job runs as the namespace's account, docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.storage import Resolved, StorageRefused, StorageRequest, mount_of, resolve

from . import pod_model as pm
from .context import RenderContext
from .errors import PodRejected
from .quoting import quote_field


@dataclass(frozen=True, slots=True)
class SiteVolume:
    """Where a storage volume is on the site, and the job's ``storage`` entry that says so."""

    resolved: Resolved
    mount: pb.StorageMount
    read_only: bool
    """Every mount of it is read-only: the site's rule forces it, or the volume's own ``readOnly``."""


def storage_request(spec: pm.VolumeSpec, data: pm.PodData) -> StorageRequest | None:
    """What a claim, hostPath or nfs volume asks of the site; None for any other volume."""
    src = spec.source
    if isinstance(src, pm.ClaimVolume):
        obj = data.claims.get(src.claim, pm.NO_CLAIM_OBJECT)
        return StorageRequest(
            "claim", spec.where, src.claim, obj.storage_class, obj.nfs_server, obj.nfs_path, obj.volume
        )
    if isinstance(src, pm.HostPath):
        return StorageRequest("hostPath", spec.where, host_path=src.path)
    if isinstance(src, pm.NfsVolume):
        return StorageRequest("nfs", spec.where, nfs_server=src.server, nfs_path=src.path)
    return None


def site_volume(ctx: RenderContext, spec: pm.VolumeSpec, request: StorageRequest) -> SiteVolume:
    """``request`` resolved with the pool's policy; PodRejected naming the field when the site maps no such
    volume (a pool that announced no policy maps none)."""
    try:
        resolved = resolve(ctx.bc.storage, ctx.pod.metadata.namespace, request)
    except StorageRefused as exc:
        raise PodRejected(exc.field, exc.reason) from None
    asked = spec.source.read_only if isinstance(spec.source, pm.ClaimVolume | pm.NfsVolume) else False
    return SiteVolume(resolved, mount_of(request, resolved), resolved.read_only or asked)


def claim_lines(spec: pm.VolumeSpec, resolved: Resolved) -> list[str]:
    """A claim's directory: refused when it is a symlink (its name is the site's, its target would be the
    tenant's choice), made with the site's mode when the rule lets the job create it (as the namespace's
    account: the job runs as it)."""
    kw, root = spec.where, resolved.root
    qroot = quote_field(root, kw)
    lines = [f"[ ! -L {qroot} ] || __setup_failed {quote_field(f'{kw}: {root} is a symlink: refused', kw)}"]
    if resolved.create:
        failed = quote_field(f"{kw}: cannot create the claim directory {root}", kw)
        lines.append(f"[ -d {qroot} ] || mkdir -p -m {resolved.create_mode:04o} -- {qroot} || __setup_failed {failed}")
    return lines


def in_site_dir(root: str, path: str, where: str, create: bool) -> str:
    """The start-time check that ``path`` (what a mount binds) is below ``root`` after every symlink; a missing
    ``path`` is made when ``create`` (a subPath Kubernetes would make), else refused."""
    words = (quote_field(root, where), quote_field(path, where), quote_field(where, where))
    return f"__in_site_dir {' '.join(words)} {1 if create else 0}"
