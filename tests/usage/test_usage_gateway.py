"""Usage billed by the gateway, end to end: a real gateway, nats-server, redis and shell submitter; the counters as
a platform team scrapes them from ``/metrics``; an ended pod billed once across redelivery and a restart; a
hostile pool's figures clamped to the pod's request."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import events_subject
from interlink_nats.submitters.runtime import Submitter
from prometheus_client.parser import text_string_to_metric_families
from stack import Stack, create_body, eventually, gateway_only, new_pool, pod, submitter_settings, terminated

CPU = "interlink_gateway_usage_cpu_seconds_total"
MEMORY = "interlink_gateway_usage_memory_byte_seconds_total"
GPU = "interlink_gateway_usage_gpu_seconds_total"
PODS = "interlink_gateway_usage_pods_total"
CLAMPED = "interlink_gateway_usage_clamped_total"


def sized_pod(namespace: str, command: list[str], cpu: str, memory: str) -> dict[str, Any]:
    p = pod(containers={"main": command})
    p["metadata"]["namespace"] = namespace
    p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu, "memory": memory}}
    return p


async def samples(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` over HTTP, by name and labels."""
    text = (await stack.http.get("/metrics")).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


@contextlib.asynccontextmanager
async def gateway(nats_url: str, pool: str, redis_url: str, durable: str) -> AsyncIterator[Stack]:
    async with gateway_only(nats_url, default_pool=pool, redis_url=redis_url, durable=durable) as stack:
        yield stack


async def test_ended_pods_are_billed_once_per_namespace_and_pool_across_replays_and_a_restart(
    nats_url: str, redis_url: str, tmp_path: Path
) -> None:
    pool, durable = new_pool(), f"gw-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    try:
        async with Submitter(submitter_settings(nats_url, pool, tmp_path / "state")):
            async with gateway(nats_url, pool, redis_url, durable) as stack:
                short = sized_pod("team-a", ["sleep", "1.5"], "500m", "64Mi")
                other = sized_pod("team-b", ["sleep", "1"], "2", "32Mi")
                created = time.monotonic()
                for p in (short, other):
                    assert (await stack.post("/create", create_body(p))).status_code == 200

                async def both_ended() -> bool:
                    return [terminated(await stack.status_of(p)) for p in (short, other)] == [True, True]

                await eventually(both_ended, within=60, what="both pods to end")
                seen_ended = time.monotonic() - created

                async def both_billed() -> bool:
                    got = await samples(stack)
                    return all(got.get((PODS, labels(namespace=n, pool=pool))) == 1 for n in ("team-a", "team-b"))

                await eventually(both_billed, within=30, what="both pods billed")
                got = await samples(stack)
                record = stack.gateway.store.get(short["metadata"]["uid"])
                assert record is not None and record.status is not None
                status = record.status
                usage = status.usage
                assert usage is not None
                # The shell backend keeps no accounting: the request (0.5 CPU, 64 MiB) times the run time.
                assert usage.source == pb.UsageSource.ALLOCATION
                wall = usage.wall_millis / 1000
                # It slept 1.5 s and had ended when seen. Start and end are read from the job's files, whose times
                # come from the kernel's coarse clock (one tick, up to 10 ms, early): a 1.5 s run may read 1.499 s.
                assert 1.49 <= wall <= seen_ended, (wall, seen_ended)
                # Each figure is rounded from the exact run time, wall_millis from the same time to the ms: a figure
                # may differ by one from what the rounded wall gives (64 MiB x 1.5075 s is 96, x 1.508 s is 97).
                assert abs(usage.millicpu_seconds - 500 * wall) <= 1, (usage, wall)
                assert abs(usage.memory_mib_seconds - 64 * wall) <= 1, (usage, wall)
                team_a = labels(namespace="team-a", pool=pool)
                assert got[(CPU, team_a)] == usage.millicpu_seconds / 1000
                assert got[(MEMORY, team_a)] == usage.memory_mib_seconds * 2**20
                assert got[(GPU, team_a)] == 0
                team_b = labels(namespace="team-b", pool=pool)
                assert 2 * 0.9 <= got[(CPU, team_b)] <= 2 * 1.1 + 2 * 0.6  # 2 CPUs for a 1 s job (and its start-up)
                assert not any(name == CLAMPED for name, _ in got), "an honest pool's figures pass unclamped"
                billed = got[(CPU, team_a)]

                # The final event delivered again, as JetStream redelivers it, then newer (a restarted submitter
                # resending): applied, never billed again.
                final = pb.JobEvent(status=status, revision=record.revision, instance_id="replay")
                newer = pb.JobEvent(status=status, revision=record.revision + 1, instance_id="replay")
                js = nc.jetstream()
                applied = stack.gateway.events.applied
                await js.publish(events_subject(pool), bytes(final))
                await js.publish(events_subject(pool), bytes(newer))

                async def newer_applied() -> bool:
                    return stack.gateway.events.applied > applied

                await eventually(newer_applied, what="the replayed event applied")
                again = await samples(stack)
                assert again[(CPU, team_a)] == billed
                assert again[(PODS, team_a)] == 1

            # A restarted gateway (same redis, same durable consumer) hears the final event once more.
            async with gateway(nats_url, pool, redis_url, durable) as restarted:
                assert restarted.gateway.store.get(short["metadata"]["uid"]) is not None
                applied = restarted.gateway.events.applied
                newest = pb.JobEvent(status=status, revision=record.revision + 2, instance_id="replay")
                await js.publish(events_subject(pool), bytes(final))
                await js.publish(events_subject(pool), bytes(newest))

                async def newest_applied() -> bool:
                    return restarted.gateway.events.applied > applied

                await eventually(newest_applied, what="the events heard again after the restart")
                after = await samples(restarted)
                assert (CPU, team_a) not in after or after[(CPU, team_a)] == 0
                assert (PODS, team_a) not in after
    finally:
        await nc.close()


async def test_a_hostile_pools_usage_is_clamped_to_the_pods_request_and_billed_once(
    nats_url: str, redis_url: str, tmp_path: Path
) -> None:
    pool, durable = new_pool(), f"gw-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    try:
        async with (
            Submitter(submitter_settings(nats_url, pool, tmp_path / "state")),
            gateway(nats_url, pool, redis_url, durable) as stack,
        ):
            p = sized_pod("team-h", ["sleep", "60"], "1500m", "100Mi")
            assert (await stack.post("/create", create_body(p))).status_code == 200
            uid = p["metadata"]["uid"]

            async def running() -> bool:
                record = stack.gateway.store.get(uid)
                return record is not None and record.state == pb.JobState.RUNNING

            await eventually(running, within=30, what="the pod to run")
            # Anyone with the pool's credential may publish on its subject: an ended status claiming absurd usage.
            hostile = pb.JobStatus(
                pod=pb.PodRef(uid=uid, namespace="team-h", name=p["metadata"]["name"]),
                pool=pool,
                state=pb.JobState.SUCCEEDED,
                containers=[pb.ContainerStatus(name="main", phase=pb.ContainerPhase.TERMINATED, exit_code=0)],
                usage=pb.JobUsage(
                    millicpu_seconds=-5_000,
                    memory_mib_seconds=2**62,
                    milligpu_seconds=2**63 - 1,
                    wall_millis=2**62,
                    source=pb.UsageSource.ACCOUNTING,
                ),
            )
            js = nc.jetstream()
            await js.publish(events_subject(pool), bytes(pb.JobEvent(status=hostile, revision=10_000)))

            async def billed() -> bool:
                return (await samples(stack)).get((PODS, labels(namespace="team-h", pool=pool))) == 1

            await eventually(billed, what="the hostile report billed")
            got = await samples(stack)
            record = stack.gateway.store.get(uid)
            assert record is not None and record.allowance is not None
            team = labels(namespace="team-h", pool=pool)
            assert got[(CPU, team)] == 0  # negative: nothing
            assert got[(GPU, team)] == 0  # the pod asked for no GPU
            # Memory: at most 100 MiB for as long as the pod can have run (since its creation minute, plus slack).
            since = record.allowance.since
            assert 0 < got[(MEMORY, team)] <= 100 * 2**20 * (time.time() - since + 120) * 1.1
            for figure in ("cpu", "memory", "gpu", "wall"):
                assert got[(CLAMPED, labels(pool=pool, figure=figure))] == 1

            # The pool's own later final status is applied, and billed no more.
            applied = stack.gateway.events.applied
            honest = pb.JobStatus().parse(bytes(hostile))
            honest.usage = pb.JobUsage(millicpu_seconds=1_500, wall_millis=1_000, source=pb.UsageSource.ALLOCATION)
            await js.publish(events_subject(pool), bytes(pb.JobEvent(status=honest, revision=10_001)))

            async def applied_again() -> bool:
                return stack.gateway.events.applied > applied

            await eventually(applied_again, what="the later status applied")
            assert (await samples(stack))[(PODS, team)] == 1
            assert (await stack.post("/delete", p)).status_code == 200
    finally:
        await nc.close()


async def test_a_pod_deleted_while_it_runs_is_billed_its_request_until_the_delete(
    nats_url: str, redis_url: str, tmp_path: Path
) -> None:
    pool, durable = new_pool(), f"gw-{uuid.uuid4().hex[:8]}"
    async with (
        Submitter(submitter_settings(nats_url, pool, tmp_path / "state")),
        gateway(nats_url, pool, redis_url, durable) as stack,
    ):
        p = sized_pod("team-d", ["sleep", "60"], "1", "10Mi")
        created = time.monotonic()
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def running() -> bool:
            status = await stack.status_of(p)
            return "running" in status["containers"][0]["state"]

        await eventually(running, within=30, what="the pod to run")
        assert (await stack.post("/delete", p)).status_code == 200
        lived = time.monotonic() - created
        got = await samples(stack)  # billed by the delete itself: the pod's record is gone after it
        team = labels(namespace="team-d", pool=pool)
        assert got[(PODS, team)] == 1
        assert 0 < got[(CPU, team)] <= lived  # 1 CPU from its container's start to the delete
        # 10 MiB for as long, in whole MiB-seconds (the wire's unit: half a MiB-second off at most)
        assert abs(got[(MEMORY, team)] - got[(CPU, team)] * 10 * 2**20) <= 2**19
