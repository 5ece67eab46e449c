"""Where volume files and env values come from: interLink's ConfigMaps, Secrets and projected volumes,
and the downward API resolved from the pod itself."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import pod_annotations
from .errors import PodRejected
from .fields import as_list, as_obj, as_str, get_list, get_obj, get_opt_str, get_str, member, str_map

_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


@dataclass(slots=True)
class PodView:
    """The pod's parts every step reads, each already checked to be an object."""

    pod: dict[str, Any]
    meta: dict[str, Any]
    spec: dict[str, Any]
    annotations: dict[str, Any]


@dataclass(slots=True)
class Source:
    """One ConfigMap/Secret-shaped object interLink sent, with its path in the data (for rejections)."""

    obj: dict[str, Any]
    where: str  # e.g. container[1].configMaps[0]
    secret: bool  # Secret: ``data`` is base64
    files: dict[str, bytes] | None = None  # decoded on first use, then shared by every reference

    def key_where(self, key: str) -> str:
        """Path of one key of the object (in ``data``, else ``binaryData``)."""
        part = "data" if key in get_obj(self.obj, "data", self.where) else "binaryData"
        return member(f"{self.where}.{part}", key)


@dataclass(slots=True)
class PodData:
    """The objects interLink attached to the pod, merged over its containers, by name."""

    config_maps: dict[str, Source] = field(default_factory=dict)
    secrets: dict[str, Source] = field(default_factory=dict)
    projected: dict[str, Source] = field(default_factory=dict)


def interlink_data(entries: Any) -> PodData:
    """Index interLink's per-container data (``RetrievedPodData.container``) by object name."""
    data = PodData()
    for k, entry in enumerate(as_list(entries, "container")):
        ew = f"container[{k}]"
        entry = as_obj(entry, ew)
        for key, target, secret in (
            ("configMaps", data.config_maps, False),
            ("secrets", data.secrets, True),
            ("projectedvolumemaps", data.projected, False),
        ):
            lw = f"{ew}.{key}"
            for j, obj in enumerate(get_list(entry, key, ew)):
                ow = f"{lw}[{j}]"
                obj = as_obj(obj, ow)
                name = get_opt_str(get_obj(obj, "metadata", ow), "name", ow + ".metadata")
                if name is not None:
                    target[name] = Source(obj, ow, secret)
    return data


def object_files(src: Source) -> dict[str, bytes]:
    """Key -> bytes of a ConfigMap/Secret-shaped object (secret ``data`` and any ``binaryData`` are base64)."""
    if src.files is not None:
        return src.files
    files: dict[str, bytes] = {}
    where, secret = src.where, src.secret
    for key, value in get_obj(src.obj, "data", where).items():
        if value is None:
            value = ""
        elif not isinstance(value, str):
            as_str(value, member(where + ".data", key))
        if secret:
            try:
                files[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise PodRejected(member(where + ".data", key), "secret data is not valid base64") from None
        else:
            files[key] = value.encode("utf-8", "surrogatepass")
    for key, value in get_obj(src.obj, "binaryData", where).items():
        kw = member(where + ".binaryData", key)
        try:
            files[key] = base64.b64decode(as_str(value, kw), validate=True)
        except (binascii.Error, ValueError):
            raise PodRejected(kw, "not valid base64") from None
    src.files = files
    return files


def downward_value(view: PodView, field_path: str, where: str) -> str:
    """Resolve a downward-API fieldRef from the pod itself."""
    name = field_path.partition(".")[2]
    if field_path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return get_str(view.meta, name, "metadata")
    if field_path in ("spec.nodeName", "spec.serviceAccountName"):
        return get_str(view.spec, name, "spec")
    if field_path in ("status.podIP", "status.hostIP"):
        value = get_str(as_obj(view.pod.get("status"), "status"), name, "status")
        if not value and name == "podIP":
            value = pod_annotations.value(view.annotations, pod_annotations.POD_IP) or ""
        return value
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = str_map(view.meta.get(name), field_path)
        return "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items()))
    m = _FIELD_PATH.match(field_path)
    if m:
        return str_map(view.meta.get(m.group(1)), "metadata." + m.group(1)).get(m.group(2), "")
    raise PodRejected(where, f"unsupported fieldPath {field_path!r}")
