"""The PersistentVolumeClaims and PersistentVolumes interLink sends with a pod (its PVC branch adds
``persistentvolumes`` / ``persistentVolumeSources`` to the create request, and ``persistentVolumeClaims`` /
``persistentVolumes`` to each container's entry): read only for what a site storage rule may match on, the
claim's storage class and its volume's NFS source. Additive and optional: without them a claim is matched by
namespace and name alone. An object of another namespace, or one without a name, is not the pod's: ignored.
"""

from __future__ import annotations

import re
from typing import Any

from interlink_nats.kernel.names import is_dns_subdomain
from interlink_nats.kernel.storage import is_clean_absolute

from .errors import PodRejected
from .fields import as_list, as_obj, get_obj, get_opt_str
from .pod_model import ClaimObject

_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:\[\]-]{0,252}")
"""An NFS server as a PersistentVolume names it: a host name or an address."""

CLAIM_LISTS = ("persistentvolumes", "persistentVolumeClaims")
VOLUME_LISTS = ("persistentVolumeSources", "persistentVolumes")


def _objects(holders: list[tuple[dict[str, Any], str]], keys: tuple[str, ...]) -> list[tuple[dict[str, Any], str]]:
    found = []
    for holder, where in holders:
        for key in keys:
            lw = f"{where}.{key}" if where else key
            raw = holder.get(key)
            for j, obj in enumerate([] if raw is None else as_list(raw, lw)):
                found.append((as_obj(obj, f"{lw}[{j}]"), f"{lw}[{j}]"))
    return found


def _name(obj: dict[str, Any], key: str, where: str) -> str:
    """A Kubernetes object name (a claim, a volume, a storage class): a DNS subdomain, or absent ("")."""
    value = get_opt_str(obj, key, where) or ""
    if value and not is_dns_subdomain(value):
        raise PodRejected(f"{where}.{key}", f"{value[:80]!r} is not a Kubernetes name (a DNS subdomain)")
    return value


def _meta(obj: dict[str, Any], where: str) -> tuple[str, str | None]:
    meta = get_obj(obj, "metadata", where)
    return _name(meta, "name", where + ".metadata"), get_opt_str(meta, "namespace", where + ".metadata")


def claim_objects(holders: list[tuple[dict[str, Any], str]], namespace: str) -> dict[str, ClaimObject]:
    """Claim name -> what interLink sent of it and of its volume, from the request and its container entries
    (``holders``: each object with its JSON path, "" for the request itself)."""
    volumes: dict[str, tuple[dict[str, Any], str]] = {}
    bound: dict[str, str] = {}  # claim name -> volume name, from a volume's claimRef
    for obj, where in _objects(holders, VOLUME_LISTS):
        name, _ = _meta(obj, where)
        if not name:
            continue
        spec = get_obj(obj, "spec", where)
        volumes[name] = (spec, where + ".spec")
        ref = get_obj(spec, "claimRef", where + ".spec")
        ref_name = _name(ref, "name", where + ".spec.claimRef")
        if ref_name and get_opt_str(ref, "namespace", where + ".spec.claimRef") == namespace:
            bound[ref_name] = name
    claims: dict[str, ClaimObject] = {}
    for obj, where in _objects(holders, CLAIM_LISTS):
        name, ns = _meta(obj, where)
        if not name or ns not in (None, "", namespace):
            continue
        spec = get_obj(obj, "spec", where)
        volume = _name(spec, "volumeName", where + ".spec") or bound.get(name, "")
        storage_class = _name(spec, "storageClassName", where + ".spec")
        claims[name] = _with_volume(storage_class, volume, volumes.get(volume))
    for name, volume in bound.items():  # a volume bound to a claim interLink did not send
        claims.setdefault(name, _with_volume("", volume, volumes.get(volume)))
    return claims


def _with_volume(storage_class: str, volume: str, spec: tuple[dict[str, Any], str] | None) -> ClaimObject:
    if spec is None:
        return ClaimObject(storage_class, volume)
    body, where = spec
    nfs = get_obj(body, "nfs", where)
    server = get_opt_str(nfs, "server", where + ".nfs") or ""
    if server and not _SERVER.fullmatch(server):
        raise PodRejected(where + ".nfs.server", f"{server[:80]!r} is not a host name or address")
    path = get_opt_str(nfs, "path", where + ".nfs") or ""
    if path and not is_clean_absolute(path):
        raise PodRejected(where + ".nfs.path", f"{path[:80]!r} is not a clean absolute path")
    return ClaimObject(storage_class or _name(body, "storageClassName", where), volume, server, path)
