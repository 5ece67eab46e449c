"""/status at interLink's real rate: 10,000 tracked pods, one call per pod, 2,000 calls/s.

The gateway runs as its own process (``interlink-nats gateway``) with its pod table restored from
redis, as after a restart; the load is open-loop (calls start on schedule whether or not earlier
ones finished), so queueing shows in the latency. NATS messages per call are counted on the
server (/varz) and compared with an idle window of the same length: the goal is 0.

Baseline in the same run: the ping (``/status`` with ``[]``) at the same rate: the same route and HTTP
stack with no pod work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    HttpConnection,
    RedisProcess,
    free_port,
    http_request,
    median,
    nats_message_count,
    percentile,
    print_table,
    start_cli,
    stop_process,
    wait_http,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.store import REDIS_PODS_KEY, PodRecord
from interlink_nats.services.nats_server import NatsServerProcess


def make_records(count: int) -> list[PodRecord]:
    records = []
    for i in range(count):
        uid = str(uuid.UUID(int=i + 1))
        status = pb.JobStatus(
            pod=pb.PodRef(uid=uid, namespace="bench", name=f"pod-{i}"),
            pool="bench",
            job_id=str(1000 + i),
            state=pb.JobState.RUNNING,
            containers=[
                pb.ContainerStatus(name="init", init=True, phase=pb.ContainerPhase.TERMINATED, exit_code=0),
                pb.ContainerStatus(name="main", phase=pb.ContainerPhase.RUNNING),
                pb.ContainerStatus(name="sidecar", phase=pb.ContainerPhase.RUNNING),
            ],
        )
        records.append(
            PodRecord(
                uid=uid,
                namespace="bench",
                name=f"pod-{i}",
                pool="bench",
                job_id=str(1000 + i),
                init_containers=["init"],
                containers=["main", "sidecar"],
                images={"main": "busybox", "sidecar": "busybox", "init": "busybox"},
                status=status,
                revision=1,
            )
        )
    return records


def status_body(record: PodRecord) -> bytes:
    """A full pod as the VK sends it (metadata, spec and status), one per call."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": record.name,
            "namespace": record.namespace,
            "uid": record.uid,
            "annotations": {"JobID": record.job_id},
            "labels": {"app": "bench"},
        },
        "spec": {
            "containers": [{"name": n, "image": "busybox", "command": ["sleep", "3600"]} for n in record.containers],
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "tolerations": [{"key": "pool.vk.io", "value": "bench", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Running"},
    }
    return json.dumps([pod]).encode()


async def load(port: int, requests: list[bytes], rate: float, connections: int) -> tuple[list[float], int]:
    """Open-loop: request i starts at t0 + i/rate on the next free connection; returns latencies (s)."""
    pool: asyncio.Queue[HttpConnection] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await HttpConnection.open("127.0.0.1", port))
    latencies: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05

    async def one(i: int, request: bytes) -> None:
        nonlocal errors
        scheduled = start + i / rate
        conn = await pool.get()
        try:
            status, _ = await conn.call(request)
            if status != 200:
                errors += 1
            latencies.append(loop.time() - scheduled)
        finally:
            pool.put_nowait(conn)

    tasks = []
    for i, request in enumerate(requests):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, request)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait().close()
    return latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measured window")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()

    import redis

    tmp = Path(tempfile.mkdtemp(prefix="bench-status-"))
    nats = NatsServerProcess(extra_args=["-m", str(free_port())]).start_blocking()
    monitor = f"http://127.0.0.1:{nats.extra_args[-1]}"
    redis_server = RedisProcess()
    records = make_records(args.pods)
    client = redis.Redis.from_url(redis_server.url)
    pipe = client.pipeline()
    for record in records:
        pipe.hset(REDIS_PODS_KEY, record.uid, record.to_json())
    pipe.execute()
    port = free_port()
    gateway = start_cli(
        [
            "gateway",
            "--nats-url",
            nats.url,
            "--redis-url",
            redis_server.url,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        log=tmp / "gateway.log",
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        calls = int(args.rate * args.seconds)
        bodies = [status_body(records[i % len(records)]) for i in range(calls)]
        status_requests = [http_request("GET", "/status", body) for body in bodies]
        ping_requests = [http_request("GET", "/status", b"[]")] * calls
        rows, results = [], {"status": [], "ping": [], "msgs": []}
        for rep in range(args.reps):
            idle_before = nats_message_count(monitor)
            time.sleep(args.seconds)
            idle = nats_message_count(monitor) - idle_before
            before = nats_message_count(monitor)
            started = time.monotonic()
            latencies, errors = asyncio.run(load(port, status_requests, args.rate, args.connections))
            elapsed = time.monotonic() - started
            during = nats_message_count(monitor) - before
            extra = max(0.0, during - idle * elapsed / args.seconds)
            base, base_errors = asyncio.run(load(port, ping_requests, args.rate, args.connections))
            msgs_per_call = extra / len(latencies)
            results["status"].append(latencies)
            results["ping"].append(base)
            results["msgs"].append(msgs_per_call)
            rows.append(
                [
                    rep + 1,
                    f"{len(latencies) / elapsed:.0f}",
                    f"{percentile(latencies, 50) * 1e3:.2f}",
                    f"{percentile(latencies, 99) * 1e3:.2f}",
                    f"{percentile(base, 50) * 1e3:.2f}",
                    f"{percentile(base, 99) * 1e3:.2f}",
                    f"{msgs_per_call:.3f}",
                    errors + base_errors,
                ]
            )
        print_table(
            f"/status: {args.pods} tracked pods, one pod per call, open loop at {args.rate:.0f}/s",
            ["rep", "calls/s", "p50 ms", "p99 ms", "ping p50", "ping p99", "NATS msgs/call", "errors"],
            rows,
        )
        p50 = median([percentile(r, 50) for r in results["status"]]) * 1e3
        p99 = median([percentile(r, 99) for r in results["status"]]) * 1e3
        b99 = median([percentile(r, 99) for r in results["ping"]]) * 1e3
        figures = {
            "pods": args.pods,
            "rate_per_s": args.rate,
            "status_p50_ms": round(p50, 3),
            "status_p99_ms": round(p99, 3),
            "ping_p99_ms": round(b99, 3),
            "p99_ratio_vs_ping": round(p99 / b99, 2) if b99 else None,
            "nats_msgs_per_call": round(median(results["msgs"]), 4),
        }
        print(json.dumps(figures))
    finally:
        stop_process(gateway)
        redis_server.stop()
        nats.stop_blocking()


if __name__ == "__main__":
    main()
