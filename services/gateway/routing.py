"""Which pool a pod goes to, with no I/O.

Kueue admits a pod onto a pool's ResourceFlavor and injects that flavor's toleration
``pool.vk.io=<pool>``; a ``pool.vk.io`` nodeSelector works too for pods placed by hand.
"""

from __future__ import annotations

from typing import Any

from interlink_nats.kernel.subjects import InvalidPoolNameError, validate_pool
from interlink_nats.services.gateway.wire import BadRequest

POOL_KEY = "pool.vk.io"


def pool_for_pod(pod: dict[str, Any], default_pool: str | None) -> str:
    """The pod's pool, or ``default_pool``; a 4xx naming the problem when there is neither or several.

    Runs for every create: the fields' paths are only built for an error."""
    spec = pod.get("spec") or {}
    candidates: list[tuple[int | None, str]] = []  # (toleration index, or None for the nodeSelector; pool)
    for i, toleration in enumerate(spec.get("tolerations") or ()):
        if isinstance(toleration, dict) and toleration.get("key") == POOL_KEY:
            value = toleration.get("value")
            if value not in (None, ""):  # an ``Exists`` toleration names no pool
                candidates.append((i, _named(value, i)))
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, dict) and selector.get(POOL_KEY) not in (None, ""):
        candidates.append((None, _named(selector[POOL_KEY], None)))
    if not candidates:
        if default_pool:
            return default_pool
        raise BadRequest(
            "spec.tolerations",
            f"the pod names no pool: expected a toleration {POOL_KEY}=<pool> (Kueue injects it) "
            f"or a nodeSelector {POOL_KEY}: <pool>, and the gateway has no default pool",
            422,
        )
    index, pool = candidates[0]
    if any(value != pool for _, value in candidates):
        where = ", ".join(f"{_field(i)}={value!r}" for i, value in candidates)
        raise BadRequest("spec.tolerations", f"the pod names more than one pool ({where})", 422)
    try:
        return validate_pool(pool)
    except InvalidPoolNameError as exc:
        raise BadRequest(_field(index), str(exc), 422) from None


def _named(value: object, toleration: int | None) -> str:
    """A pool named as Kubernetes types it (a string): ``str()`` of a number would name another pool, one
    that may not exist (a 503 after the pool wait instead of this 400)."""
    if not isinstance(value, str):
        where = f"spec.tolerations[{toleration}].value" if toleration is not None else _field(None)
        raise BadRequest(where, f"expected a string, got {type(value).__name__}")
    return value


def _field(toleration: int | None) -> str:
    """The path of the field that named a pool: a toleration by its index, else the nodeSelector."""
    return f"spec.tolerations[{toleration}]" if toleration is not None else f"spec.nodeSelector.{POOL_KEY}"
