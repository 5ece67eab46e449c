"""Which account a pod asks to run as: ``securityContext.runAsUser``/``runAsGroup``, pod level or per container.

The gateway only reads and checks the request; it does not decide anything: the site's submitter holds the
policy (which namespace may run as which UIDs) and honours or rejects the request (docs/security.md,
"Whose account a pod runs as"). A job runs as one account, so every container must ask for the same one.
"""

from __future__ import annotations

from typing import Any

from .errors import PodRejected
from .fields import as_obj, get_int

NO_REQUEST: tuple[int | None, int | None] = (None, None)
_KEYS = ("runAsUser", "runAsGroup")
_INT64_MAX = 2**63 - 1


def _ids(raw: Any, where: str) -> tuple[int | None, int | None]:
    ctx = as_obj(raw, where)
    out: list[int | None] = []
    for key in _KEYS:
        value = get_int(ctx, key, where)
        if value is not None and not 0 <= value <= _INT64_MAX:
            raise PodRejected(f"{where}.{key}", f"must be a non-negative integer: {value}")
        out.append(value)
    return out[0], out[1]


def run_as_request(spec: dict[str, Any], containers: list[tuple[str, Any]]) -> tuple[int | None, int | None]:
    """(runAsUser, runAsGroup) the pod asks for: a container's value overrides the pod's, as on a node; all
    containers (init ones too) must end up with the same pair. ``containers``: (JSON path, raw container)."""
    raw_pod = spec.get("securityContext")
    pod = NO_REQUEST if raw_pod is None else _ids(raw_pod, "spec.securityContext")
    first: tuple[int | None, int | None] | None = None
    first_where = ""
    for where, c in containers:
        raw = c.get("securityContext") if isinstance(c, dict) else None
        if raw is None:
            ids = pod
        else:
            own = _ids(raw, where + ".securityContext")
            ids = (pod[0] if own[0] is None else own[0], pod[1] if own[1] is None else own[1])
        if first is None:
            first, first_where = ids, where
        elif ids != first:
            key = _KEYS[0] if ids[0] != first[0] else _KEYS[1]
            raise PodRejected(
                f"{where}.securityContext.{key}",
                f"differs from {first_where}'s: a pod's job runs as one account, so its containers must agree",
            )
    return first if first is not None else pod
