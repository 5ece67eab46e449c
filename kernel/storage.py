"""Where a pod's storage volume is on the site: a PersistentVolumeClaim, a hostPath or an nfs volume, resolved
with the site's :class:`pb.StoragePolicy`, or refused naming the pod field.

Shared by the gateway (it renders the script with the pool's announced policy, and refuses at ``/create``) and
the submitter (it resolves again with its own policy: any NATS client with the pool's credential may send a job).
Both say the same words, since both call :func:`resolve`. Pure (no I/O).

A resolved volume is a ``root`` the site owns (a claim's directory, an allowed hostPath prefix, the mount point
of an NFS export) and a ``rel`` path below it that the pod named (empty for a claim). The job checks at start
that the directory it mounts, after every symlink, is still below ``root`` (``__in_site_dir`` in the script);
here every path is checked lexically, before anything runs.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_dns_label, is_dns_subdomain
from interlink_nats.kernel.namespace_keys import is_pattern, key_matches

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

PLACEHOLDERS = ("namespace", "claim", "volume")
"""What a claim rule's path template may name; each is replaced by a DNS name (no ``/``, never ``..``)."""
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_SHOWN = 80

Kind = Literal["claim", "hostPath", "nfs"]


class StorageRefused(ValueError):
    """The site maps no such volume: ``field`` names the pod field (``spec.volumes[0].persistentVolumeClaim
    .claimName``), the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


@dataclass(frozen=True, slots=True)
class StorageRequest:
    """One storage volume as the pod (and interLink's PVC/PV objects) name it. ``field``: the volume's source
    (``spec.volumes[2].persistentVolumeClaim``)."""

    kind: Kind
    field: str
    claim: str = ""
    storage_class: str = ""
    nfs_server: str = ""
    nfs_path: str = ""
    volume: str = ""
    host_path: str = ""


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where the volume is on the site: ``root`` (the site's directory) and ``rel`` (below it, may be empty)."""

    root: str
    rel: str
    read_only: bool
    create: bool = False
    create_mode: int = 0

    @property
    def path(self) -> str:
        return f"{self.root.rstrip('/')}/{self.rel}" if self.rel else self.root


def shown(value: str) -> str:
    return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + f"... ({len(value)} characters)"


def is_clean_absolute(path: str) -> bool:
    """An absolute path with no ``.``/``..``/empty component, no trailing ``/`` (but ``/``), no NUL or newline."""
    if not path.startswith("/") or "\x00" in path or "\n" in path:
        return False
    return path == "/" or (posixpath.normpath(path) == path and not path.startswith("//"))


def check_template(template: str) -> str:
    """A claim rule's path: absolute and clean, naming only :data:`PLACEHOLDERS`; a clear error otherwise."""
    names = _PLACEHOLDER.findall(template)
    for name in names:
        if name not in PLACEHOLDERS:
            raise ValueError(f"unknown placeholder {{{name}}} in {template!r} (known: {', '.join(PLACEHOLDERS)})")
    bare = _PLACEHOLDER.sub("x", template)
    if "{" in bare or "}" in bare:
        raise ValueError(f"unbalanced braces in {template!r}")
    if not is_clean_absolute(bare) or bare == "/":
        raise ValueError(f"{template!r} is not a clean absolute path below '/' (no '.', '..' or '//')")
    return template


def _fill(template: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values[m[1]], template)


def _valid_template(template: str) -> bool:
    """A rule as announced is input too (any client with the pool's credential announces): one the site file
    could not have held is no rule at all."""
    try:
        check_template(template)
    except ValueError:
        return False
    return True


def _fixed_prefix(template: str) -> str:
    """The directory a template's paths all lie below: its whole components before the first placeholder."""
    head = template.split("{", 1)[0]
    return head if "{" not in template else head.rsplit("/", 1)[0] or "/"


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _name_matches(pattern: str, value: str) -> bool:
    """A rule's claim or storage-class field: empty takes anything; else exact, or a shell-style pattern."""
    return not pattern or pattern == value or (is_pattern(pattern) and fnmatch.fnmatchcase(value, pattern))


class _Rule(Protocol):
    namespace: str


R = TypeVar("R", bound=_Rule)


def _ordered(rules: Sequence[R], namespace: str) -> list[R]:
    """The rules that apply to ``namespace``: those naming it exactly first, then the patterns, each in order."""
    exact = [r for r in rules if r.namespace == namespace]
    return exact + [r for r in rules if r.namespace != namespace and key_matches(r.namespace, namespace)]


def resolve(policy: pb.StoragePolicy | None, namespace: str, request: StorageRequest) -> Resolved:
    """Where ``request`` is on the site for a pod in ``namespace``; :class:`StorageRefused` when the site maps
    no such volume (or the pod's names could not be those of a real object)."""
    if not is_dns_label(namespace):
        raise StorageRefused(request.field, f"namespace {shown(namespace)} is not a DNS label: no site rule applies")
    policy = policy if policy is not None else pb.StoragePolicy()
    if request.kind == "claim":
        return _claim(policy, namespace, request)
    if request.kind == "hostPath":
        return _host_path(policy, namespace, request)
    return _nfs(policy, namespace, request)


def _claim(policy: pb.StoragePolicy, namespace: str, req: StorageRequest) -> Resolved:
    field = req.field + ".claimName"
    if not is_dns_subdomain(req.claim):
        raise StorageRefused(
            field, f"{shown(req.claim)} is not a claim name (a DNS subdomain): the site maps no such claim"
        )
    for optional, value in (("storage class", req.storage_class), ("PersistentVolume", req.volume)):
        if value and not is_dns_subdomain(value):
            raise StorageRefused(field, f"the {optional} interLink sent, {shown(value)}, is not a DNS subdomain")
    for rule in _ordered(policy.claims, namespace):
        if not _valid_template(rule.path):
            continue
        if not _name_matches(rule.claim, req.claim) or not _name_matches(rule.storage_class, req.storage_class):
            continue
        if rule.storage_class and not req.storage_class:
            continue  # a rule by storage class maps only claims interLink sent with theirs
        if rule.nfs_server and (rule.nfs_server != req.nfs_server or not _below(req.nfs_path, rule.nfs_path or "/")):
            continue
        if "{volume}" in rule.path and not req.volume:
            continue
        path = _fill(rule.path, {"namespace": namespace, "claim": req.claim, "volume": req.volume})
        if not is_clean_absolute(path) or not _below(path, _fixed_prefix(rule.path)):
            raise StorageRefused(field, f"claim {shown(req.claim)} would map outside {_fixed_prefix(rule.path)}")
        return Resolved(path, "", rule.read_only, rule.create, rule.create_mode)
    raise StorageRefused(
        field,
        f"the site maps no such claim: no storage rule of this pool maps claim {req.claim!r} of namespace "
        f"{namespace!r}",
    )


def _host_path(policy: pb.StoragePolicy, namespace: str, req: StorageRequest) -> Resolved:
    field = req.field + ".path"
    path = req.host_path.rstrip("/") or "/"
    if not is_clean_absolute(path):
        raise StorageRefused(field, f"{shown(req.host_path)} is not a clean absolute path (no '.', '..' or '//')")
    rules = _ordered(policy.host_paths, namespace)
    for rule in rules:
        if is_clean_absolute(rule.prefix) and _below(path, rule.prefix):
            return Resolved(rule.prefix, path[len(rule.prefix) :].lstrip("/"), rule.read_only)
    allowed = ", ".join(sorted({r.prefix for r in rules})) or "none"
    raise StorageRefused(
        field,
        f"hostPath {shown(path)} is not below a directory the site allows to namespace {namespace!r} "
        f"(the site's storage.host_paths allow: {allowed})",
    )


def _nfs(policy: pb.StoragePolicy, namespace: str, req: StorageRequest) -> Resolved:
    path = req.nfs_path.rstrip("/") or "/"
    if not is_clean_absolute(path):
        raise StorageRefused(req.field + ".path", f"{shown(req.nfs_path)} is not a clean absolute path")
    for rule in _ordered(policy.nfs_exports, namespace):
        valid = is_clean_absolute(rule.path) and is_clean_absolute(rule.site_path)
        if valid and rule.server == req.nfs_server and _below(path, rule.path):
            return Resolved(rule.site_path, path[len(rule.path) :].lstrip("/"), rule.read_only)
    raise StorageRefused(
        req.field + ".server",
        f"the site mounts no NFS export {shown(req.nfs_server)}:{shown(path)} for namespace {namespace!r}",
    )


def request_of(mount: pb.StorageMount) -> StorageRequest:
    """What a job's ``storage`` entry asks, as :func:`resolve` takes it (the submitter's re-check)."""
    kinds: dict[pb.StorageKind, Kind] = {
        pb.StorageKind.CLAIM: "claim",
        pb.StorageKind.HOST_PATH: "hostPath",
        pb.StorageKind.NFS: "nfs",
    }
    kind = kinds.get(mount.kind)
    if kind is None:
        raise StorageRefused(mount.field or "storage", "unknown storage kind")
    return StorageRequest(
        kind,
        mount.field,
        mount.claim,
        mount.storage_class,
        mount.nfs_server,
        mount.nfs_path,
        mount.volume,
        mount.host_path,
    )


def mount_of(request: StorageRequest, resolved: Resolved) -> pb.StorageMount:
    """The job's ``storage`` entry for a resolved volume (the gateway writes it, the submitter checks it)."""
    kind = {"claim": pb.StorageKind.CLAIM, "hostPath": pb.StorageKind.HOST_PATH, "nfs": pb.StorageKind.NFS}
    return pb.StorageMount(
        kind=kind[request.kind],
        field=request.field,
        claim=request.claim,
        storage_class=request.storage_class,
        nfs_server=request.nfs_server,
        nfs_path=request.nfs_path,
        volume=request.volume,
        host_path=request.host_path,
        site_path=resolved.path,
        read_only=resolved.read_only,
    )
