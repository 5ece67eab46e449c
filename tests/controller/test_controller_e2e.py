"""Opt-in: the controller against a real cluster with Kueue (``KUBECONFIG`` set, ``-m e2e``).

Installs the MasterQueue CRD, runs the controller in-process against the cluster with a local
nats-server for the reports, and checks that Kueue accepts the objects (the ClusterQueue turns
Active, which needs its flavors to exist) — the real webhook and SSA field ownership, which the
emulator cannot show. Everything it creates is deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from interlink_nats.controller import kube, runner
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import resources_subject

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs KUBECONFIG pointing at a cluster with Kueue"),
]

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "masterqueues.vk.io.yaml"


async def test_masterqueue_on_a_real_cluster_gives_active_kueue_queues(nats_url: str) -> None:
    from lightkube import codecs
    from lightkube.generic_resource import create_global_resource

    api = kube.LightkubeApi.from_environment(field_manager="kueue-nats-e2e")
    await api.client.apply(codecs.from_dict(yaml.safe_load(CRD.read_text())), field_manager="kueue-nats-e2e")
    await asyncio.sleep(2)  # CRD established
    suffix = uuid.uuid4().hex[:6]
    name, pool = f"e2e-{suffix}", f"e2e-pool-{suffix}"
    mq_res = create_global_resource("vk.io", "v1", "MasterQueue", "masterqueues")
    body: dict[str, Any] = {
        "apiVersion": "vk.io/v1",
        "kind": "MasterQueue",
        "metadata": {"name": name},
        "spec": {
            "template": {"cohort": name},
            "flavors": [
                {
                    "name": "hpc",
                    "natsFlavor": {"natsConnector": nats_url, "virtualNode": "vk", "pools": [pool], "poolTimeout": 60},
                    "canLendTo": [{"queue": f"{name}-shared", "lendingLimit": {"cpu": "1"}}],
                }
            ],
        },
    }
    await api.client.create(mq_res(body))
    controller = runner.Controller(api, settings=runner.Settings(tick_s=0.5))
    task = asyncio.ensure_future(controller.run())
    nc = await nats.connect(nats_url)
    try:
        await asyncio.sleep(3)
        report = pb.ResourceReport(pool=pool, capacity={"cpu": "8", "memory": "16Gi", "pods": "10"})
        await nc.publish(resources_subject(pool), bytes(report))
        deadline = time.monotonic() + 60
        while True:
            assert controller.version is not None
            queue = await api.get_object("ClusterQueue", controller.version, name)
            conditions = {c["type"]: c for c in ((queue or {}).get("status") or {}).get("conditions") or []}
            flavors = [f["name"] for g in (queue or {}).get("spec", {}).get("resourceGroups", []) for f in g["flavors"]]
            if conditions.get("Active", {}).get("status") == "True" and flavors:
                break
            assert time.monotonic() < deadline, f"ClusterQueue not active: {queue}"
            await asyncio.sleep(1)
        assert flavors == [f"{name}-hpc-{pool}"]
    finally:
        await nc.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await controller.on_masterqueue("DELETED", body)  # removes its queues and flavors
        with contextlib.suppress(Exception):
            await api.client.delete(mq_res, name)
        await api.close()
