"""kueue-nats at scale: 500 pools across 3 MasterQueues, real nats-server, Kubernetes API emulator.

Measures
- report → applied quota latency (p50/p99): a pool publishes a new capacity; the clock stops when the
  server-side apply of the ClusterQueue holding the new quota returns;
- API writes per tick while every pool keeps announcing the same capacity (goal: 0);
- the cost of one reconcile pass over all MasterQueues (pure reconcile + diff, no writes);
- live capacity (``capacity: Free``): every pool's free capacity changes every few seconds (a random
  walk, now and then a jump); API writes per minute (Kueue objects + MasterQueue status) without smoothing
  (the baseline, same run) and with it (``minChangeFraction`` 0.1, ``minIntervalSeconds`` 10), medians over
  windows, and report → applied quota (p50/p99) for big changes of pools kept out of the churn.

Kueue caps a ClusterQueue at 64 flavors per resource group, so each MasterQueue lists 64 of its
~167 pools (the rest are reported as Excluded in its status); all 500 reports are still received
and evaluated every pass. Every Kueue object left in the emulator (tests/harness/kube_emulator.py)
is validated against the real Kueue CRDs at the end (not during timing: it shares our CPU).

Usage: python bench/reconcile.py [--pools 500] [--masterqueues 3] [--rounds 40]
Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "harness"))

from interlink_nats.controller import kube, runner
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import resources_subject
from interlink_nats.services.ops.nats_server import NatsServerProcess
from kube_emulator import KubeEmulator
from kueue_validation import validation_errors


class TimedApi(kube.LightkubeApi):
    """Records when each ClusterQueue apply returned and which cpu quotas it carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiters: dict[tuple[str, str, str], asyncio.Future[float]] = {}

    async def apply(self, obj: Any) -> dict[str, Any]:
        result = await super().apply(obj)
        if obj["kind"] == "ClusterQueue" and self.waiters:
            done = time.perf_counter()
            for group in obj["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    key = (obj["metadata"]["name"], flavor["name"], flavor["resources"][0]["nominalQuota"])
                    future = self.waiters.pop(key, None)
                    if future is not None and not future.done():
                        future.set_result(done)
        return result


def masterqueue(index: int, nats_url: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "vk.io/v1",
        "kind": "MasterQueue",
        "metadata": {"name": f"mq{index}"},
        "spec": {
            "template": {"cohort": f"cohort{index}"},
            "flavors": [
                {
                    "name": "hpc",
                    "natsFlavor": {
                        "natsConnector": nats_url,
                        "natsSubject": "interlink.resources",
                        "virtualNode": "vk",
                        "poolRegExp": f"^m{index}-",
                        "poolTimeout": 600,
                    },
                    "nominalQuota": {"cpu": "100000"},
                    "canLendTo": [{"queue": f"mq{index}-shared", "lendingLimit": {"cpu": "8"}}],
                }
            ],
        },
    }
    if policy is not None:
        body["spec"]["flavors"][0]["natsFlavor"].update(capacity="Free", capacityPolicy=policy)
    return body


def report(pool: str, cpu: int, free_cpu: int | None = None) -> bytes:
    return bytes(
        pb.ResourceReport(
            pool=pool,
            capacity={"cpu": str(cpu), "memory": "512Gi", "pods": "1000", "nvidia.com/gpu": "4"},
            free={"cpu": str(free_cpu), "memory": "256Gi", "pods": "1000", "nvidia.com/gpu": "2"}
            if free_cpu is not None
            else {},
            backend="slurm",
            interval_seconds=30,
        )
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@contextlib.asynccontextmanager
async def controller_stack(
    tick: float,
) -> AsyncIterator[tuple[NatsServerProcess, KubeEmulator, NATS, TimedApi, runner.Controller]]:
    """A nats-server, the Kubernetes API emulator and the controller against them; all stopped after."""
    server = await NatsServerProcess(jetstream=False).start()
    emu = await KubeEmulator(validate=False).start()  # validated once at the end: it shares our CPU
    nc = await nats.connect(server.url)
    api = TimedApi.from_server(emu.url)
    settings = runner.Settings(tick_s=tick, describe_timeout_s=0.5, status_refresh_s=30.0)
    try:
        yield server, emu, nc, api, runner.Controller(api, settings=settings)
    finally:
        await nc.close()
        await api.close()
        await emu.stop()
        await server.stop()


async def bench(pools_total: int, mq_count: int, rounds: int, tick: float) -> dict[str, Any]:
    pools = [f"m{i % mq_count}-pool-{i:04}" for i in range(pools_total)]
    cpu = dict.fromkeys(pools, 64)
    async with controller_stack(tick) as (server, emu, nc, api, controller):
        for i in range(mq_count):
            emu.put_object("vk.io", "masterqueues", masterqueue(i, server.url))
        task = asyncio.ensure_future(controller.run())
        await asyncio.sleep(1.5)  # subscribed and past the start-up Describe window

        start = time.perf_counter()
        for pool in pools:
            await nc.publish(resources_subject(pool), report(pool, cpu[pool]))
        await nc.flush()
        listed: dict[str, list[str]] = {}
        while time.perf_counter() - start < 60:
            listed = {}
            for i in range(mq_count):
                cq = emu.get("ClusterQueue", f"mq{i}") or {}
                groups = (cq.get("spec") or {}).get("resourceGroups") or []
                listed[f"mq{i}"] = [f["name"] for g in groups for f in g["flavors"]]
            if all(len(v) == min(64, sum(p.startswith(f"m{k[2:]}-") for p in pools)) for k, v in listed.items()):
                break
            await asyncio.sleep(0.02)
        converge = time.perf_counter() - start
        listed_pools = [(mq, name.removeprefix(f"{mq}-hpc-")) for mq, names in listed.items() for name in names]

        # report → applied quota, one pool at a time
        latencies: list[float] = []
        rng = random.Random(7)
        for _ in range(rounds):
            mq, pool = rng.choice(listed_pools)
            cpu[pool] += 1
            future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            api.waiters[(mq, f"{mq}-hpc-{pool}", str(cpu[pool]))] = future
            sent = time.perf_counter()
            await nc.publish(resources_subject(pool), report(pool, cpu[pool]))
            await nc.flush()
            latencies.append(await asyncio.wait_for(future, 30) - sent)
            await asyncio.sleep(rng.uniform(0, tick))

        # a burst: 50 pools change at once
        burst: list[asyncio.Future[float]] = []
        sent = time.perf_counter()
        for mq, pool in rng.sample(listed_pools, min(50, len(listed_pools))):
            cpu[pool] += 1
            future = asyncio.get_running_loop().create_future()
            api.waiters[(mq, f"{mq}-hpc-{pool}", str(cpu[pool]))] = future
            burst.append(future)
            await nc.publish(resources_subject(pool), report(pool, cpu[pool]))
        await nc.flush()
        burst_latencies = [t - sent for t in await asyncio.wait_for(asyncio.gather(*burst), 30)]

        # nothing changed: every pool re-announces the same capacity for several ticks
        await asyncio.sleep(2 * tick)
        writes_before = len(emu.writes)
        kueue_before = emu.writes_of(("ResourceFlavor", "ClusterQueue"))
        idle_ticks = 6
        for _ in range(idle_ticks):
            for pool in pools:
                await nc.publish(resources_subject(pool), report(pool, cpu[pool]))
            await nc.flush()
            await asyncio.sleep(tick)
        idle_writes = len(emu.writes) - writes_before
        idle_kueue_writes = emu.writes_of(("ResourceFlavor", "ClusterQueue")) - kueue_before

        # cost of one pass with nothing to write
        pass_times = []
        for _ in range(10):
            t0 = time.perf_counter()
            writes = await controller.step()
            pass_times.append(time.perf_counter() - t0)
            assert writes == 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        invalid = sum(
            1 for (group, _, _, _), obj in emu.objects.items() if group == "kueue.x-k8s.io" and validation_errors(obj)
        )
    return {
        "pools": pools_total,
        "masterqueues": mq_count,
        "pools_in_queues": len(listed_pools),
        "tick_s": tick,
        "converge_s": round(converge, 3),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "burst50_p50_ms": round(statistics.median(burst_latencies) * 1000, 1),
        "burst50_p99_ms": round(percentile(burst_latencies, 0.99) * 1000, 1),
        "idle_writes_per_tick": idle_writes / idle_ticks,
        "idle_kueue_writes_per_tick": idle_kueue_writes / idle_ticks,
        "reconcile_pass_ms": round(statistics.median(pass_times) * 1000, 2),
        "invalid_objects": invalid,
    }


SMOOTHED = {"minChangeFraction": 0.1, "minIntervalSeconds": 10}
UNSMOOTHED = {"minChangeFraction": 0, "minIntervalSeconds": 0}


async def churn(
    pools_total: int, mq_count: int, tick: float, policy: dict[str, Any], windows: int, window_s: float
) -> dict[str, Any]:
    """``capacity: Free`` pools whose free CPUs change every ~3 s: writes per minute, report → quota latency."""
    pools = [f"m{i % mq_count}-pool-{i:04}" for i in range(pools_total)]
    rng = random.Random(11)
    free = {pool: rng.randint(0, 64) for pool in pools}
    stop = asyncio.Event()

    async def walk(members: list[str]) -> None:
        """Each pool re-reports every 3 s ± 1 s: mostly a step of a few CPUs, sometimes a jump."""
        due = {pool: time.perf_counter() + rng.uniform(0, 3) for pool in members}
        while not stop.is_set():
            now = time.perf_counter()
            for pool, at in due.items():
                if at <= now:
                    step = rng.randint(-3, 3) if rng.random() < 0.8 else rng.randint(-64, 64)
                    free[pool] = min(64, max(0, free[pool] + step))
                    await nc.publish(resources_subject(pool), report(pool, 64, free[pool]))
                    due[pool] = now + rng.uniform(2, 4)
            await asyncio.sleep(0.05)

    async with controller_stack(tick) as (server, emu, nc, api, controller):
        for i in range(mq_count):
            emu.put_object("vk.io", "masterqueues", masterqueue(i, server.url, policy))
        task = asyncio.ensure_future(controller.run())
        await asyncio.sleep(1.5)
        for pool in pools:
            await nc.publish(resources_subject(pool), report(pool, 64, free[pool]))
        await nc.flush()
        deadline = time.perf_counter() + 60
        listed: list[tuple[str, str]] = []
        while time.perf_counter() < deadline and len(listed) < min(pools_total, 64 * mq_count):
            listed = []
            for i in range(mq_count):
                groups = ((emu.get("ClusterQueue", f"mq{i}") or {}).get("spec") or {}).get("resourceGroups") or []
                listed += [(f"mq{i}", f["name"].removeprefix(f"mq{i}-hpc-")) for g in groups for f in g["flavors"]]
            await asyncio.sleep(0.05)
        probes = rng.sample(listed, min(30, len(listed)))
        probed = {pool for _, pool in probes}
        walker = asyncio.ensure_future(walk([p for p in pools if p not in probed]))
        await asyncio.sleep(5.0)  # the walk under way, smoothing intervals started

        per_minute: list[float] = []  # the churn alone: what the API server sees
        for _ in range(windows):
            before, start = len(emu.writes), time.perf_counter()
            await asyncio.sleep(window_s)
            per_minute.append((len(emu.writes) - before) / (time.perf_counter() - start) * 60)

        latencies: list[float] = []  # then big changes of probe pools at random moments, the churn going on
        interval = float(policy.get("minIntervalSeconds", 0))
        phase_end = time.perf_counter() + window_s * windows / 2

        async def probe(mq: str, pool: str) -> None:
            await asyncio.sleep(rng.uniform(0, interval + 1))  # their first quota was applied at listing
            while time.perf_counter() < phase_end:
                free[pool] = 8 if free[pool] > 32 else 56
                future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
                api.waiters[(mq, f"{mq}-hpc-{pool}", str(free[pool]))] = future
                sent = time.perf_counter()
                await nc.publish(resources_subject(pool), report(pool, 64, free[pool]))
                latencies.append(await asyncio.wait_for(future, 30) - sent)
                await asyncio.sleep(rng.uniform(interval, 2 * interval + 1))  # a later window, at a random moment in it

        await asyncio.gather(*(probe(mq, pool) for mq, pool in probes))
        stop.set()
        await walker
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return {
        "writes_per_min": round(statistics.median(per_minute), 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "probes": len(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=500)
    parser.add_argument("--masterqueues", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--tick", type=float, default=0.5)
    parser.add_argument("--windows", type=int, default=3, help="live-capacity phase: windows per variant")
    parser.add_argument("--window-s", type=float, default=20.0)
    args = parser.parse_args()
    result = asyncio.run(bench(args.pools, args.masterqueues, args.rounds, args.tick))
    base = asyncio.run(churn(args.pools, args.masterqueues, args.tick, UNSMOOTHED, args.windows, args.window_s))
    smooth = asyncio.run(churn(args.pools, args.masterqueues, args.tick, SMOOTHED, args.windows, args.window_s))
    result.update(
        {
            "free_churn_writes_per_min_unsmoothed": base["writes_per_min"],
            "free_churn_writes_per_min_smoothed": smooth["writes_per_min"],
            "free_churn_writes_ratio_smoothed_vs_unsmoothed": round(
                smooth["writes_per_min"] / base["writes_per_min"], 3
            )
            if base["writes_per_min"]
            else None,
            "free_report_to_quota_p50_ms_unsmoothed": base["latency_p50_ms"],
            "free_report_to_quota_p99_ms_unsmoothed": base["latency_p99_ms"],
            "free_report_to_quota_p50_ms_smoothed": smooth["latency_p50_ms"],
            "free_report_to_quota_p99_ms_smoothed": smooth["latency_p99_ms"],
            "free_latency_probes": base["probes"] + smooth["probes"],
        }
    )
    width = max(map(len, result))
    print(f"{'figure':<{width}}  value")
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
