"""The PersistentVolumeClaims and PersistentVolumes interLink sends with a pod (its PVC branch adds
``persistentvolumes`` / ``persistentVolumeSources`` to the create request, and ``persistentVolumeClaims`` /
``persistentVolumes`` to each container's entry): read only for what a site storage rule may match on, the
claim's storage class and its volume's NFS source. Additive and optional: without them a claim is matched by
namespace and name alone. An object of another namespace, or one without a name, is not the pod's: ignored.
"""

from __future__ import annotations

from typing import Any

from .fields import as_list, as_obj, get_obj, get_opt_str
from .pod_model import ClaimObject

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


def _meta(obj: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    meta = get_obj(obj, "metadata", where)
    return get_opt_str(meta, "name", where + ".metadata"), get_opt_str(meta, "namespace", where + ".metadata")


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
        ref_name = get_opt_str(ref, "name", where + ".spec.claimRef")
        if ref_name and get_opt_str(ref, "namespace", where + ".spec.claimRef") == namespace:
            bound[ref_name] = name
    claims: dict[str, ClaimObject] = {}
    for obj, where in _objects(holders, CLAIM_LISTS):
        name, ns = _meta(obj, where)
        if not name or ns not in (None, "", namespace):
            continue
        spec = get_obj(obj, "spec", where)
        volume = get_opt_str(spec, "volumeName", where + ".spec") or bound.get(name, "")
        storage_class = get_opt_str(spec, "storageClassName", where + ".spec") or ""
        claims[name] = _with_volume(storage_class, volume, volumes.get(volume))
    for name, volume in bound.items():  # a volume bound to a claim interLink did not send
        claims.setdefault(name, _with_volume("", volume, volumes.get(volume)))
    return claims


def _with_volume(storage_class: str, volume: str, spec: tuple[dict[str, Any], str] | None) -> ClaimObject:
    if spec is None:
        return ClaimObject(storage_class, volume)
    body, where = spec
    nfs = get_obj(body, "nfs", where)
    return ClaimObject(
        storage_class or get_opt_str(body, "storageClassName", where) or "",
        volume,
        get_opt_str(nfs, "server", where + ".nfs") or "",
        get_opt_str(nfs, "path", where + ".nfs") or "",
    )
