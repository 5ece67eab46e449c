"""Metric labels never take unbounded values from pod content.

Before: the ``pool`` label of ``interlink_gateway_rpc_errors`` was whatever a pod's toleration said, so
pods naming random pools minted a new series each (a cardinality bomb from user input).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from interlink_nats.services.gateway.metrics import OTHER_POOL
from prometheus_client.parser import text_string_to_metric_families
from stack import create_body, full_stack, pod


def rpc_error_pools(text: str) -> set[str]:
    return {
        sample.labels["pool"]
        for family in text_string_to_metric_families(text)
        if family.name == "interlink_gateway_rpc_errors"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_unknown_pools_share_one_label_and_known_pools_keep_theirs(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path, pool_wait_s=0.2) as stack:
        known = pod(containers={"main": ["true"]})  # to the stack's own pool: it answers, so it is known
        assert (await stack.post("/create", create_body(known))).status_code == 200
        for _ in range(20):
            p = pod(containers={"main": ["true"]}, pool=f"nope-{uuid.uuid4().hex[:10]}")
            assert (await stack.post("/create", create_body(p))).status_code == 503
        label = stack.gateway.metrics.pool_label(stack.pool)
        pools = rpc_error_pools((await stack.http.get("/metrics")).text)
    assert pools == {OTHER_POOL}, pools
    assert label == stack.pool
