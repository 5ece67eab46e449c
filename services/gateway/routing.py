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
    """The pod's pool, or ``default_pool``; a 4xx naming the problem when there is neither or several."""
    spec = pod.get("spec") or {}
    candidates: list[tuple[str, str]] = []
    for i, toleration in enumerate(spec.get("tolerations") or []):
        if isinstance(toleration, dict) and toleration.get("key") == POOL_KEY and toleration.get("value"):
            candidates.append((f"spec.tolerations[{i}]", str(toleration["value"])))
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, dict) and selector.get(POOL_KEY):
        candidates.append((f"spec.nodeSelector.{POOL_KEY}", str(selector[POOL_KEY])))
    pools = {value for _, value in candidates}
    if len(pools) > 1:
        where = ", ".join(f"{field}={value!r}" for field, value in candidates)
        raise BadRequest("spec.tolerations", f"the pod names more than one pool ({where})", 422)
    if not pools:
        if default_pool:
            return default_pool
        raise BadRequest(
            "spec.tolerations",
            f"the pod names no pool: expected a toleration {POOL_KEY}=<pool> (Kueue injects it) "
            f"or a nodeSelector {POOL_KEY}: <pool>, and the gateway has no default pool",
            422,
        )
    field, pool = candidates[0]
    try:
        return validate_pool(pool)
    except InvalidPoolNameError as exc:
        raise BadRequest(field, str(exc), 422) from None
