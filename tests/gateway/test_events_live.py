"""The gateway's live path for JobEvents (P9): while the events stream cannot store anything, statuses
still reach ``/status``; and whichever way an event comes, only its pod's own pool may change that pod."""

from __future__ import annotations

from pathlib import Path

import nats
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM, live_subject
from stack import create_body, eventually, full_stack, pod, terminated


async def test_statuses_reach_the_gateway_while_the_events_stream_is_gone(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().delete_stream(EVENTS_STREAM)  # every publish fails as a leaderless stream's do
            p = pod(containers={"main": ["sh", "-c", "exit 4"]})
            assert (await stack.post("/create", create_body(p))).status_code == 200

            async def ended() -> bool:
                return terminated(await stack.status_of(p))

            await eventually(ended, within=30, what="the pod's end reported with no events stream")
            [container] = (await stack.status_of(p))["containers"]
            assert container["state"]["terminated"]["exitCode"] == 4
            assert stack.submitter is not None and stack.submitter.outbox.pending, "kept until the stream acks"
        finally:
            await nc.close()


def ended(reason: str) -> pb.ContainerStatus:
    return pb.ContainerStatus(
        name="main", phase=pb.ContainerPhase.TERMINATED, exit_code=99, reason=reason, message=reason
    )


async def test_an_event_from_another_pool_does_not_change_a_pod(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["sleep", "30"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200
        uid = p["metadata"]["uid"]
        forged = pb.JobEvent(
            status=pb.JobStatus(
                pod=pb.PodRef(uid=uid, namespace="default", name=p["metadata"]["name"]),
                pool="intruder",
                state=pb.JobState.FAILED,
                containers=[ended("Forged")],
            ),
            revision=1_000_000,
        )
        own = pb.JobEvent(
            status=pb.JobStatus(
                pod=pb.PodRef(uid=uid, namespace="default", name=p["metadata"]["name"]),
                pool=stack.pool,
                state=pb.JobState.FAILED,
                containers=[ended("FromItsPool")],
            ),
            revision=2_000_000,
        )
        nc = await nats.connect(nats_url)
        try:
            await nc.publish(live_subject("intruder"), bytes(forged))
            await nc.flush()

            async def dropped() -> bool:
                return stack.gateway.events.foreign == 1

            await eventually(dropped, what="the forged event dropped")
            assert "Forged" not in str(await stack.status_of(p))
            await nc.publish(live_subject(stack.pool), bytes(own))
            await nc.flush()

            async def applied() -> bool:
                return "FromItsPool" in str(await stack.status_of(p))

            await eventually(applied, what="the pool's own live event applied")
        finally:
            await nc.close()
            await stack.post("/delete", p)
