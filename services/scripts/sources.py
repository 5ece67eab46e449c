"""The downward API: values a container reads about its own pod (env ``fieldRef``, downwardAPI volumes)."""

from __future__ import annotations

import json
import re

from . import pod_annotations
from .errors import PodRejected, checked
from .pod_model import Pod

_FIELD_PATH = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]")


def downward_value(pod: Pod, field_path: str, where: str) -> str:
    """Resolve a downward-API fieldRef from the pod itself."""
    meta = pod.metadata
    if field_path == "metadata.name":
        return meta.name
    if field_path == "metadata.namespace":
        return meta.namespace
    if field_path == "metadata.uid":
        return meta.uid
    if field_path == "spec.nodeName":
        return checked(pod.spec.node_name)
    if field_path == "spec.serviceAccountName":
        return checked(pod.spec.service_account_name)
    if field_path == "status.hostIP":
        return checked(pod.status.host_ip)
    if field_path == "status.podIP":
        return checked(pod.status.pod_ip) or meta.annotation(pod_annotations.POD_IP) or ""
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = meta.labels if field_path == "metadata.labels" else meta.annotations
        return "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items()))
    m = _FIELD_PATH.fullmatch(field_path)  # not match(): '$' would let "...['x']\n" through
    if m:
        return (meta.labels if m.group(1) == "labels" else meta.annotations).get(m.group(2), "")
    raise PodRejected(where, f"unsupported fieldPath {field_path!r}")
