"""The downward API: values a container reads about its own pod (env ``fieldRef``, downwardAPI volumes)."""

from __future__ import annotations

import json
import re

from . import pod_annotations
from .errors import PodRejected, checked
from .fields import member
from .pod_model import Pod

_FIELD_PATH = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]")


def downward_value(pod: Pod, field_path: str, where: str) -> str:
    """Resolve a downward-API fieldRef from the pod itself; a value holding NUL (no environment or shell word
    can) is refused naming the pod's field it comes from, not the reference."""
    value, source = _downward(pod, field_path, where)
    if "\x00" in value:
        raise PodRejected(source, "contains a NUL character")
    return value


def _downward(pod: Pod, field_path: str, where: str) -> tuple[str, str]:
    """(the value, the path of the pod's field it comes from)."""
    meta = pod.metadata
    if field_path == "metadata.name":
        return meta.name, field_path
    if field_path == "metadata.namespace":
        return meta.namespace, field_path
    if field_path == "metadata.uid":
        return meta.uid, field_path
    if field_path == "spec.nodeName":
        return checked(pod.spec.node_name), field_path
    if field_path == "spec.serviceAccountName":
        return checked(pod.spec.service_account_name), field_path
    if field_path == "status.hostIP":
        return checked(pod.status.host_ip), field_path
    if field_path == "status.podIP":
        ip = checked(pod.status.pod_ip)
        if ip:
            return ip, field_path
        return meta.annotation(pod_annotations.POD_IP) or "", pod_annotations.field(pod_annotations.POD_IP)
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = meta.labels if field_path == "metadata.labels" else meta.annotations
        for key in values:  # the values are JSON-quoted: only a key can bring a NUL
            if "\x00" in key:
                return "\x00", member(field_path, key)
        return "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items())), field_path
    m = _FIELD_PATH.fullmatch(field_path)  # not match(): '$' would let "...['x']\n" through
    if m:
        values = meta.labels if m.group(1) == "labels" else meta.annotations
        return values.get(m.group(2), ""), member(f"metadata.{m.group(1)}", m.group(2))
    raise PodRejected(where, f"unsupported fieldPath {field_path!r}")
