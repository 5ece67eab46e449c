"""Which pool a pod goes to, with no I/O.

Kueue admits a pod onto a pool's ResourceFlavor and injects that flavor's toleration
``pool.vk.io=<pool>``; a ``pool.vk.io`` nodeSelector works too for pods placed by hand. Reads the parsed pod
(:class:`.pod_model.PodSpec`), whose tolerations and nodeSelector are typed and checked already (a value that is
not a string was a 400 there, as Kubernetes' own decoding refuses it).
"""

from __future__ import annotations

from interlink_nats.kernel.subjects import InvalidPoolNameError, validate_pool
from interlink_nats.services.gateway.wire import BadRequest
from interlink_nats.services.scripts.pod_model import PodSpec

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

POOL_KEY = "pool.vk.io"
SELECTOR_FIELD = f'spec.nodeSelector["{POOL_KEY}"]'


def pool_for_pod(spec: PodSpec, default_pool: str | None) -> str:
    """The pod's pool, or ``default_pool``; a 422 naming the problem when there is neither or several.

    An ``Exists`` toleration (no value) names no pool."""
    candidates = [(t.where, t.value) for t in spec.tolerations if t.key == POOL_KEY and t.value]
    selected = spec.node_selector.get(POOL_KEY)
    if selected:
        candidates.append((SELECTOR_FIELD, selected))
    if not candidates:
        if default_pool:
            return default_pool
        raise BadRequest(
            "spec.tolerations",
            f"the pod names no pool: expected a toleration {POOL_KEY}=<pool> (Kueue injects it) "
            f"or a nodeSelector {POOL_KEY}: <pool>, and the gateway has no default pool",
            422,
        )
    where, pool = candidates[0]
    if any(value != pool for _, value in candidates):
        named = ", ".join(f"{field}={value!r}" for field, value in candidates)
        raise BadRequest("spec.tolerations", f"the pod names more than one pool ({named})", 422)
    try:
        return validate_pool(pool)
    except InvalidPoolNameError as exc:
        raise BadRequest(where, str(exc), 422) from None
