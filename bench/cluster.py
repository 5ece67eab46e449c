"""Event latency on one nats-server vs a 3-node JetStream cluster (R3), and the gap a node's loss leaves.

Stack (in this process, so both ends read one clock): a gateway and a shell submitter, pods whose one
container runs ``true``, created through ``Gateway.create`` at a steady rate.

- **Event latency**: a job's state change as the submitter's poll sees it (the status's ``updated_at``)
  → the gateway has applied it (what ``/status`` answers). p50/p99 over every event of the run.
- **Node loss → first status update**: on the cluster, the events stream's leader is killed with
  ``kill -9`` while pods keep being created; the time until the gateway applies a state change seen after
  the kill. Repeated ``--losses`` times (the lost node is restarted and catches up in between); medians.
- **The loss's timeline** (``bench/_failover.py``): when the gateway's and the submitter's connections
  noticed the loss and were back (if they were on the lost node), when the survivors had elected the stream's
  and the gateway consumer's new leaders, when the submitter's first publish after the kill was sent and
  acked, when the gateway applied it.

What of the gap is nats-server's own: a follower of a raft group calls an election only when its election
timer fires, 4-9 s (uniform) after the last append or heartbeat it got from the leader
(nats-server ``server/raft.go``: ``minElectionTimeoutDefault``/``maxElectionTimeoutDefault`` at lines
302-303, ``randElectionTimeout`` at 2622, ``runAsFollower`` at 2816-2851, at commit 1787eee of 2.15.0-dev;
the same 4 s/9 s in v2.14.5), with no option to set them and no early election when a route to the leader
closes (only a group's preferred peer campaigns at once, at creation: ``server/jetstream_cluster.go``
3570-3573). The first of the two survivors to fire wins: median 4 + 5·(1 - 1/√2) ≈ 5.5 s after the kill.
Everything after the elections is ours (``apply_after_leaders``): the outbox asks again with one event
every 0.05-0.25 s while the stream has no leader (``leader_retry_delay``), the gateway's fetch likewise.
Measured on a 2-core machine, 20 losses each, interleaved: the elections the gateway needed (stream, and
the consumer's when it led from the lost node too) took 5.3 s median before and 5.5 s after, ours after them
0.17 s median / 4.96 s max before and 0.08 s / 0.20 s after (±0.05 s: the leaders are asked every 50 ms).
So while statuses wait for the stream, a median of 3 s is out of reach. They no longer wait for it: the live
path (P9; ``submitters/state/outbox.py``, docs/rpc.md "The live path") sends an event whose ack is late
once more on core NATS, which needs no leader, and the gateway applies it; the stream's copy follows after the
election. The losses alternate between the live path on and off (off: the baseline, events reach the gateway
only through the stream, as before), in the same run; ``loss_to_first_update_ratio`` is on ÷ off.

The single server is the baseline of the latency rows, measured in the same run. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import nats
from _failover import Loss, recorded_acks, watched_loss
from _harness import free_port, median, percentile, print_table
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.gateway.server import running_gateway
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.ops.nats_server import NatsCluster, NatsServerProcess
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from nats.js.api import StreamConfig


def create_body(run: str, i: int) -> bytes:
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{run}/{i}"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"b-{i}", "namespace": "bench", "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]},
        "status": {"phase": "Pending"},
    }
    container = {"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None, "emptyDirs": None}
    return json.dumps({"pod": pod, "container": [container]}).encode()


class Probe:
    """Collects (applied at, latency) of every event the gateway applies."""

    def __init__(self, gateway: Gateway) -> None:
        self.samples: list[tuple[float, float]] = []
        previous = gateway.events.on_applied

        def on_applied(record: object) -> None:
            status = getattr(record, "status", None)
            if status is not None and status.updated_at is not None:
                now = time.time()
                self.samples.append((time.monotonic(), now - status.updated_at.timestamp()))
            if previous is not None:
                previous(record)  # type: ignore[arg-type]

        gateway.events.on_applied = on_applied

    def first_after(self, moment: float) -> float | None:
        """When the gateway first applied a state change the submitter saw after ``moment`` (one seen before
        may have been stored before and still be on its way: it says nothing of the path being back)."""
        later = [at for at, latency in self.samples if at - latency > moment]
        return min(later) if later else None


@contextlib.asynccontextmanager
async def stack(url: str, state: Path) -> AsyncIterator[tuple[Gateway, Probe, Submitter]]:
    pool = f"b{uuid.uuid4().hex[:8]}"
    gw_settings = GatewaySettings(
        nats=GatewayNatsSettings(url=url), port=free_port(), default_pool=pool, events_durable=f"bench-{pool}"
    )
    sub_settings = SubmitterSettings.load(
        None,
        pool=pool,
        backend="shell",
        nats={"url": url},
        state_dir=state,
        build_config={"runtime": "CONTAINER_RUNTIME_NONE"},
        poll_interval_s=0.2,
    )
    async with running_gateway(gw_settings) as gateway, Submitter(sub_settings) as submitter:
        yield gateway, Probe(gateway), submitter


async def steady_creates(gateway: Gateway, run: str, count: int, rate: float, start: int = 0) -> None:
    """``count`` creates at ``rate`` per second (each retried like interLink does on a 5xx)."""
    interval = 1 / rate
    tasks = []
    for i in range(start, start + count):
        tasks.append(asyncio.create_task(create_retrying(gateway, create_body(run, i))))
        await asyncio.sleep(interval)
    await asyncio.gather(*tasks)


async def create_retrying(gateway: Gateway, body: bytes) -> None:
    """One /create, retried on a 5xx (a node lost: the pool unreachable for a moment) as interLink does;
    any other error is the bench's own fault and ends it, rather than leave the phase without pods."""
    for attempt in range(60):
        try:
            await gateway.calls.create(body)
            return
        except GatewayError as exc:
            if exc.status_code < 500 or attempt == 59:
                raise
            await asyncio.sleep(0.5)


async def settle(probe: Probe, quiet_s: float = 2.0, within: float = 60.0) -> None:
    """Until no event has arrived for ``quiet_s`` (every job of the phase is done and reported)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        last = probe.samples[-1][0] if probe.samples else 0.0
        if time.monotonic() - last > quiet_s:
            return
        await asyncio.sleep(0.2)


async def first_update_after(probe: Probe, moment: float, within: float = 60.0) -> float | None:
    """When the gateway applied its first event after ``moment`` (None: none within ``within`` s)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        first = probe.first_after(moment)
        if first is not None:
            return first
        await asyncio.sleep(0.1)
    return None


async def wait_cluster_ready(cluster: NatsCluster, peers: int) -> None:
    nc = await nats.connect(cluster.urls)
    js = nc.jetstream(timeout=1)
    try:
        for _ in range(300):
            try:
                await js.add_stream(StreamConfig(name="BENCH_PROBE", subjects=["bench.probe"], num_replicas=peers))
                await js.delete_stream("BENCH_PROBE")
                return
            except Exception:
                await asyncio.sleep(0.2)
        raise RuntimeError("cluster did not get ready")
    finally:
        await nc.close()


async def stream_current(cluster: NatsCluster) -> int:
    """Wait until every replica is current; return the leader's node index."""
    nc = await nats.connect(cluster.urls)
    js = nc.jetstream(timeout=2)
    try:
        for _ in range(300):
            with contextlib.suppress(Exception):
                info = await js.stream_info(EVENTS_STREAM)
                peers = (info.cluster.replicas or []) if info.cluster else []
                if info.cluster and info.cluster.leader and len(peers) == 2 and all(p.current for p in peers):
                    return int(info.cluster.leader.removeprefix("n"))
            await asyncio.sleep(0.2)
        raise RuntimeError("stream replicas did not become current")
    finally:
        await nc.close()


def live_path(submitter: Submitter, on: bool) -> None:
    """The submitter's live path on, or off (the baseline: events wait for the stream's new leader, as before
    the P9 change), by shadowing ``Outbox._send_live`` on this one instance."""
    outbox = submitter.outbox
    if on:
        outbox.__dict__.pop("_send_live", None)
        return

    async def off(uid: str, event: object) -> None:
        return None

    outbox._send_live = off  # type: ignore[method-assign]


async def lose_leaders(
    cluster: NatsCluster, gateway: Gateway, probe: Probe, submitter: Submitter, args: argparse.Namespace
) -> list[tuple[bool, Loss]]:
    """``args.losses`` times with the live path and as many without, alternating: kill -9 the events stream's
    leader under steady creates, and time how each part of the event path comes back; the node is restarted
    (and caught up) before the next."""
    assert submitter.nc is not None
    clients = {"gateway": gateway.nc, "submitter": submitter.nc}
    losses: list[tuple[bool, Loss]] = []
    start = args.pods
    with recorded_acks() as acks:
        for i in range(args.losses * 2):
            live = i % 2 == 0
            live_path(submitter, live)
            leader = await stream_current(cluster)
            survivors = [node.url for i, node in enumerate(cluster.nodes) if i != leader]
            count = int(args.rate * 6)
            load = asyncio.create_task(steady_creates(gateway, "cluster", count, args.rate, start))
            start += count
            await asyncio.sleep(2)
            async with watched_loss(survivors, f"n{leader}", gateway.events.durable, clients) as (loss, mark):
                await asyncio.to_thread(cluster.nodes[leader].kill_blocking)
                await mark()
                await load
                loss.applied = await first_update_after(probe, loss.killed)
                loss.ack = acks.first_after(loss.killed)
                await wait_leaders(loss)
                loss.errors = [(round(at - loss.killed, 2), kind) for at, kind in acks.failed if at > loss.killed]
            losses.append((live, loss))
            await settle(probe)
            await asyncio.to_thread(cluster.nodes[leader].restart_blocking)
    live_path(submitter, True)
    return losses


async def wait_leaders(loss: Loss, within: float = 10.0) -> None:
    """Until the watchers have seen both new leaders (they are elected by then: the gateway applied events)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if loss.stream_leader is not None and loss.consumer_leader is not None:
            return
        await asyncio.sleep(0.05)


def phase_median(timeline: list[dict[str, float | None]], name: str) -> float | None:
    values = [t[name] for t in timeline if t[name] is not None]
    return round(median(values), 3) if values else None  # type: ignore[arg-type]


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def latency_row(name: str, probe: Probe) -> tuple[list[object], dict[str, float]]:
    values = [lat * 1000 for _, lat in probe.samples]
    if not values:
        raise RuntimeError(f"{name}: no event reached the gateway; nothing to measure")
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return [name, len(values), f"{p50:.1f}", f"{p99:.1f}"], {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=150, help="pods per latency phase")
    parser.add_argument("--rate", type=float, default=30.0, help="creates per second")
    parser.add_argument(
        "--losses", type=int, default=3, help="node losses measured on the cluster, with the live path and without"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows: list[list[object]] = []
    losses: list[tuple[bool, Loss]] = []
    result: dict[str, object] = {"pods": args.pods, "rate_per_s": args.rate}

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        root = Path(tmp)
        async with NatsServerProcess() as server, stack(server.url, root / "single") as (gateway, probe, _):
            await steady_creates(gateway, "single", args.pods, args.rate)
            await settle(probe)
            row, figures = latency_row("1 server (R1)", probe)
            rows.append(row)
            result["single"] = figures

        cluster = await NatsCluster(size=3).start()
        try:
            await wait_cluster_ready(cluster, 3)
            async with stack(cluster.url, root / "cluster") as (gateway, probe, submitter):
                await steady_creates(gateway, "cluster", args.pods, args.rate)
                await settle(probe)
                row, figures = latency_row("3 nodes (R3)", probe)
                rows.append(row)
                result["cluster_r3"] = figures
                losses = await lose_leaders(cluster, gateway, probe, submitter, args)
        finally:
            await cluster.stop()

    print_table(
        "Event latency: submitter sees a state change → gateway has applied it (ms)",
        ["setup", "events", "p50", "p99"],
        rows,
    )
    for live in (True, False):
        runs = [loss for on, loss in losses if on == live]
        timeline = [loss.phases() for loss in runs]
        names = list(timeline[0]) if timeline else []
        what = "with the live path" if live else "without it (baseline, the stream's copy only)"
        print_table(
            f"kill -9 of the events stream's leader, {what} → each phase, seconds after the kill "
            "(-: not on the lost node, or not by the first apply)",
            ["phase", *(f"loss {i + 1}" for i in range(len(timeline))), "median"],
            [[name, *(_s(t[name]) for t in timeline), _s(phase_median(timeline, name))] for name in names],
        )
        for i, loss in enumerate(runs):
            print(f"loss {i + 1}: failed publishes after the kill: {loss.error_summary()}")
        gaps = [t["first_apply"] for t in timeline if t["first_apply"] is not None]
        figures = {
            "median": round(median(gaps), 2) if gaps else None,
            "all": [round(g, 2) for g in gaps],
            "no_update_within_60s": len(timeline) - len(gaps),
        }
        if live:
            result["loss_to_first_update_s"] = figures
            result["loss_phases_median_s"] = {name: phase_median(timeline, name) for name in names}
        else:
            result["baseline_loss_to_first_update_s"] = figures
    ours, base = result["loss_to_first_update_s"], result["baseline_loss_to_first_update_s"]
    if ours["median"] and base["median"]:  # type: ignore[index]
        result["loss_to_first_update_ratio"] = round(ours["median"] / base["median"], 3)  # type: ignore[index,operator]
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
