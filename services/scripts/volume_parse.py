"""``spec.volumes`` -> :class:`.pod_model.VolumeSpec`: each volume's one source, checked (the part of
:mod:`.pod_parse` for volumes). A volume's ``items`` and a projected volume's ``sources`` are read only when
rendering needs them (interLink sent the object; it sent no projectedvolumemaps), so they keep their rejection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from interlink_nats.kernel.names import is_dns_label

from . import kubernetes_fields
from .allowed_fields import STORAGE_KEYS, VOLUME_KINDS
from .errors import PodRejected, on_demand
from .fields import absolute_path, as_obj, as_str, child, get_bool, get_list, get_obj, get_str, relative_path
from .pod_model import (
    ClaimVolume,
    DownwardItem,
    DownwardProjection,
    DownwardVolume,
    EmptyDir,
    HostPath,
    KeyToPath,
    NfsVolume,
    ObjectProjection,
    ObjectVolume,
    PodData,
    ProjectedVolume,
    ProjectionSource,
    VolumeSource,
    VolumeSpec,
)

HOSTPATH_TYPES = frozenset(
    {"DirectoryOrCreate", "FileOrCreate", "Directory", "File", "Socket", "CharDevice", "BlockDevice"}
)


def _mode(raw: Any, where: str) -> int | None:
    """A file mode, ``None`` when absent (the caller's default applies)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 0o777:
        raise PodRejected(where, "mode must be an integer between 0 and 0777")
    return raw


def _default_mode(src: dict[str, Any], kw: str, default: int) -> int:
    mode = _mode(src.get("defaultMode"), kw + ".defaultMode")
    return default if mode is None else mode


def parse_volume(index: int, raw: dict[str, Any], data: PodData) -> VolumeSpec:
    """``spec.volumes[index]``: its name and its one source."""
    where = f"spec.volumes[{index}]"
    name: Any = raw.get("name")
    if not is_dns_label(name):
        raise PodRejected(where + ".name", f"volume names must be DNS labels: {name!r}")
    kinds = [k for k in raw if k != "name"]
    if len(kinds) != 1:
        raise PodRejected(where, "a volume needs exactly one source")
    kind = kinds[0]
    if kind not in VOLUME_KINDS:
        if kind in kubernetes_fields.VOLUME_SOURCES:
            raise PodRejected(child(where, kind), f"volume type {kind!r} is not supported off-cluster")
        raise kubernetes_fields.unhonoured(where, kind, kubernetes_fields.VOLUME_SOURCES, "volume type")
    kw = f"{where}.{kind}"
    src = as_obj(raw[kind], kw)
    return VolumeSpec(index, name, kind, kw, _volume_source(kind, src, kw, name, data))


def _volume_source(kind: str, src: dict[str, Any], kw: str, name: str, data: PodData) -> VolumeSource:
    """The volume's source; a part rendering does not read with this interLink data (a ConfigMap's ``items`` when
    interLink sent no such ConfigMap, the ``sources`` of a projected volume interLink resolved) is left empty."""
    if kind == "emptyDir":
        return EmptyDir()
    if kind == "hostPath":
        path = absolute_path(src.get("path"), kw + ".path")
        path_type = get_str(src, "type", kw)
        if path_type and path_type not in HOSTPATH_TYPES:
            raise PodRejected(kw + ".type", f"unknown hostPath type {path_type!r}")
        return HostPath(path, path_type)
    if kind in STORAGE_KEYS:
        for key in src:
            if key not in STORAGE_KEYS[kind]:
                raise PodRejected(child(kw, key), f"unknown field of a {kind} volume")
        read_only = get_bool(src, "readOnly", kw)
        if kind == "nfs":
            server = as_str(src.get("server"), kw + ".server")
            return NfsVolume(server, absolute_path(src.get("path"), kw + ".path"), read_only)
        return ClaimVolume(as_str(src.get("claimName"), kw + ".claimName"), read_only)
    if kind in ("configMap", "secret"):
        secret = kind == "secret"
        name_key = "secretName" if secret else "name"
        obj_name = as_str(src.get(name_key), f"{kw}.{name_key}")
        optional = get_bool(src, "optional", kw)
        mode = _default_mode(src, kw, 0o600 if secret else 0o644)
        sent = obj_name in (data.secrets if secret else data.config_maps)
        return ObjectVolume(secret, name_key, obj_name, optional, mode, on_demand(_key_items, src, kw) if sent else ())
    mode = _default_mode(src, kw, 0o600)
    if name in data.projected:
        return DownwardVolume(mode, ()) if kind == "downwardAPI" else ProjectedVolume(mode, ())
    if kind == "downwardAPI":
        return DownwardVolume(mode, on_demand(_downward_items, src, kw))
    return ProjectedVolume(mode, on_demand(_projection_sources, src, kw, data))


def _items(src: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, object) of each of ``src.items``."""
    for j, raw in enumerate(get_list(src, "items", where)):
        iw = f"{where}.items[{j}]"
        yield iw, as_obj(raw, iw)


def _key_items(src: dict[str, Any], where: str) -> tuple[KeyToPath, ...]:
    """A ConfigMap/Secret's ``items`` (key -> path, with a mode per item)."""
    items: list[KeyToPath] = []
    for iw, item in _items(src, where):
        key = as_str(item.get("key"), iw + ".key")
        path = on_demand(relative_path, item.get("path"), iw + ".path")  # read only if the object has the key
        items.append(KeyToPath(iw, key, path, on_demand(_mode, item.get("mode"), iw + ".mode")))
    return tuple(items)


def _downward_items(src: dict[str, Any], where: str) -> tuple[DownwardItem, ...]:
    """The ``items`` of a downwardAPI volume or projection (``src``, at ``where``)."""
    items: list[DownwardItem] = []
    for iw, item in _items(src, where):
        path = relative_path(item.get("path"), iw + ".path")
        if "fieldRef" not in item:
            raise PodRejected(iw, "only fieldRef items are supported (resourceFieldRef is not)")
        fp = as_str(get_obj(item, "fieldRef", iw).get("fieldPath"), iw + ".fieldRef.fieldPath")
        items.append(DownwardItem(iw, path, fp, _mode(item.get("mode"), iw + ".mode")))
    return tuple(items)


def _projection_sources(src: dict[str, Any], kw: str, data: PodData) -> tuple[ProjectionSource, ...]:
    """A projected volume's sources, for when interLink sent no projectedvolumemaps (e.g. the VK disables
    projected volumes); service account tokens are left out."""
    sources: list[ProjectionSource] = []
    for j, raw in enumerate(get_list(src, "sources", kw)):
        where = f"{kw}.sources[{j}]"
        source = as_obj(raw, where)
        if "serviceAccountToken" in source:
            continue
        if "downwardAPI" in source:
            dw = where + ".downwardAPI"
            sources.append(DownwardProjection(_downward_items(get_obj(source, "downwardAPI", where), dw)))
            continue
        for kind in ("configMap", "secret"):
            if kind in source:
                ow = f"{where}.{kind}"
                projection = get_obj(source, kind, where)
                obj_name = as_str(projection.get("name"), ow + ".name")
                optional = get_bool(projection, "optional", ow)
                sent = obj_name in (data.secrets if kind == "secret" else data.config_maps)
                items = on_demand(_key_items, projection, ow) if sent else ()
                sources.append(ObjectProjection(ow, kind, obj_name, optional, items))
                break
        else:
            if not source:
                raise PodRejected(where, "empty projected volume source")
            raise PodRejected(child(where, next(iter(source))), "unsupported projected volume source")
    return tuple(sources)
