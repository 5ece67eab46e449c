"""/status at interLink's real rate: 10,000 tracked pods, one call per pod, 2,000 calls/s.

The gateway runs as its own process (``interlink-nats gateway``) with its pod table restored from
redis, as after a restart; the load is open-loop (calls are written on schedule, pipelined over
keep-alive connections, whether or not earlier ones were answered), so queueing shows in the
latency, which is measured from each call's scheduled time. The client reports its own schedule
lag (how late it wrote calls) and CPU per call, and the gateway's CPU per call (from /proc), so a
tail made by the load generator on a loaded machine is told apart from one made by the gateway.

NATS messages per call are counted on the server (/varz) and compared with an idle window of the
same length: the goal is 0.

Baseline in the same run: the ping (``/status`` with ``[]``) at the same rate: the same route and HTTP
stack with no pod work.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    RedisProcess,
    cpu_seconds,
    free_port,
    http_request,
    median,
    nats_message_count,
    percentile,
    print_table,
    run_on_uvloop,
    start_gateway,
    stop_process,
    wait_http,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import REDIS_PODS_KEY
from interlink_nats.services.ops.nats_server import NatsServerProcess


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


_TICK_S = 0.001
"""The client's shortest sleep: uvloop's timers tick in milliseconds, so the calls due within one tick
are written together, up to a tick late (the lag the table reports)."""


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (``/proc/<pid>/task/*/schedstat``):
    on a shared machine, time the gateway was ready to answer while other processes held the cores."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def _content_length(head: bytes) -> int:
    at = head.find(b"content-length:")
    if at < 0:
        return 0
    line_end = head.find(b"\r\n", at)
    return int(head[at + 15 : line_end if line_end >= 0 else len(head)])


class _Responses(asyncio.Protocol):
    """One keep-alive connection's answers, read as bytes arrive: each complete answer (head plus
    Content-Length body) is matched, in order, to the oldest call still waiting on this connection.

    A protocol, not streams, and no task per call: the client's own cost per call is what it must
    keep small, as it shares the machine with the gateway it measures.
    """

    def __init__(self, record: Callable[[int, int, float], None]) -> None:
        self.record = record
        self.waiting: deque[int] = deque()
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        now = time.perf_counter()
        while True:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = buffer[:head_end].lower()
            end = head_end + 4 + _content_length(head)
            if len(buffer) < end:
                break
            self.record(self.waiting.popleft(), int(head[9:12]), now)
            buffer = buffer[end:]
        self.buffer = buffer


async def load(port: int, requests: list[bytes], rate: float, connections: int) -> dict[str, Any]:
    """Open loop: call i is written at t0 + i/rate, pipelined on connection i mod ``connections``,
    whether or not earlier answers came back (uvicorn answers a connection's calls in order).

    Returns per call the latency from its scheduled time (what a caller on schedule would see) and
    the schedule lag (how late the client itself wrote it: its loop's timer granularity and its own
    CPU; a large lag means the load generator, not the gateway, made the tail), plus the client's CPU.
    """
    loop = asyncio.get_running_loop()
    count = len(requests)
    scheduled = [0.0] * count
    latencies = [0.0] * count
    lags = [0.0] * count
    codes = [0] * count
    answered = 0
    done = loop.create_future()

    def record(i: int, code: int, now: float) -> None:
        nonlocal answered
        latencies[i] = now - scheduled[i]
        codes[i] = code
        answered += 1
        if answered == count and not done.done():
            done.set_result(None)

    conns = []
    for _ in range(connections):
        _, protocol = await loop.create_connection(lambda: _Responses(record), "127.0.0.1", port)
        conns.append(protocol)
    cpu_before = time.process_time()
    start = time.perf_counter() + 0.05
    period = 1.0 / rate
    i = 0
    while i < count:
        now = time.perf_counter()
        due = min(count, int((now - start) / period) + 1) if now >= start else 0
        while i < due:  # every call whose time has come, each on its own connection
            conn = conns[i % connections]
            at = start + i * period
            scheduled[i] = at
            conn.waiting.append(i)
            assert conn.transport is not None
            conn.transport.write(requests[i])
            lags[i] = time.perf_counter() - at
            i += 1
        if i < count:  # never less than the loop's 1 ms timer tick: a shorter sleep would spin the CPU
            await asyncio.sleep(max(_TICK_S, start + i * period - time.perf_counter()))
    await asyncio.wait_for(done, timeout=max(60.0, count / rate * 10))
    cpu = time.process_time() - cpu_before
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    return {
        "latencies": latencies,
        "lags": lags,
        "errors": sum(1 for code in codes if code != 200),
        "client_cpu_s": cpu,
    }


def run_load(port: int, requests: list[bytes], rate: float, connections: int) -> dict[str, Any]:
    """:func:`load` on uvloop when installed (the gateway's loop too): a cheaper client, a truer figure."""
    return run_on_uvloop(load(port, requests, rate, connections))


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
    gateway = start_gateway(nats.url, port, tmp / "gateway.log", redis_server.url)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        calls = int(args.rate * args.seconds)
        bodies = [status_body(records[i % len(records)]) for i in range(calls)]
        status_requests = [http_request("GET", "/status", body) for body in bodies]
        ping_requests = [http_request("GET", "/status", b"[]")] * calls
        del records, pipe
        # This process holds the 100,000 records it wrote and the requests it sends: out of the cyclic
        # GC's full scans, whose pauses would otherwise show as schedule lag (as in the gateway).
        gc.collect()
        gc.freeze()
        rows: list[list[object]] = []
        results: dict[str, list[Any]] = {"status": [], "ping": [], "msgs": []}
        cpu_per_call: dict[str, list[float]] = {"status": [], "ping": [], "client": []}
        waits: dict[str, list[float]] = {"status": [], "ping": []}
        for rep in range(args.reps):
            idle_before = nats_message_count(monitor)
            time.sleep(args.seconds)
            idle = nats_message_count(monitor) - idle_before
            before = nats_message_count(monitor)
            started = time.monotonic()
            gateway_cpu, gateway_wait = cpu_seconds(gateway.pid)[0], runqueue_wait_s(gateway.pid)
            status_run = run_load(port, status_requests, args.rate, args.connections)
            status_cpu = cpu_seconds(gateway.pid)[0] - gateway_cpu
            status_wait = runqueue_wait_s(gateway.pid) - gateway_wait
            elapsed = time.monotonic() - started
            during = nats_message_count(monitor) - before
            extra = max(0.0, during - idle * elapsed / args.seconds)
            gateway_cpu, gateway_wait = cpu_seconds(gateway.pid)[0], runqueue_wait_s(gateway.pid)
            ping_run = run_load(port, ping_requests, args.rate, args.connections)
            ping_cpu = cpu_seconds(gateway.pid)[0] - gateway_cpu
            ping_wait = runqueue_wait_s(gateway.pid) - gateway_wait
            latencies, base = status_run["latencies"], ping_run["latencies"]
            msgs_per_call = extra / len(latencies)
            results["status"].append(status_run)
            results["ping"].append(ping_run)
            results["msgs"].append(msgs_per_call)
            cpu_per_call["status"].append(status_cpu / calls)
            cpu_per_call["ping"].append(ping_cpu / calls)
            waits["status"].append(status_wait / args.seconds)
            waits["ping"].append(ping_wait / args.seconds)
            cpu_per_call["client"].append((status_run["client_cpu_s"] + ping_run["client_cpu_s"]) / (2 * calls))
            rows.append(
                [
                    rep + 1,
                    f"{len(latencies) / elapsed:.0f}",
                    f"{percentile(latencies, 50) * 1e3:.2f}",
                    f"{percentile(latencies, 99) * 1e3:.2f}",
                    f"{percentile(status_run['lags'], 99) * 1e3:.2f}",
                    f"{percentile(base, 50) * 1e3:.2f}",
                    f"{percentile(base, 99) * 1e3:.2f}",
                    f"{percentile(ping_run['lags'], 99) * 1e3:.2f}",
                    f"{status_cpu / calls * 1e6:.0f}",
                    f"{ping_cpu / calls * 1e6:.0f}",
                    f"{cpu_per_call['client'][-1] * 1e6:.0f}",
                    f"{waits['status'][-1] * 1e3:.0f}/{waits['ping'][-1] * 1e3:.0f}",
                    f"{msgs_per_call:.3f}",
                    status_run["errors"] + ping_run["errors"],
                ]
            )
        print_table(
            f"/status: {args.pods} tracked pods, one pod per call, open loop at {args.rate:.0f}/s "
            "(lag: how late the client wrote calls; CPU: µs per call, gateway and client; "
            "gw wait: ms per s the gateway was runnable but had no CPU, status/ping)",
            [
                "rep",
                "calls/s",
                "p50 ms",
                "p99 ms",
                "lag p99",
                "ping p50",
                "ping p99",
                "ping lag p99",
                "gw CPU",
                "gw CPU ping",
                "client CPU",
                "gw wait ms/s",
                "NATS msgs/call",
                "errors",
            ],
            rows,
        )

        def med(kind: str, key: str, q: float) -> float:
            return median([percentile(run[key], q) for run in results[kind]]) * 1e3

        p50, p99, b99 = med("status", "latencies", 50), med("status", "latencies", 99), med("ping", "latencies", 99)
        figures = {
            "pods": args.pods,
            "rate_per_s": args.rate,
            "status_p50_ms": round(p50, 3),
            "status_p99_ms": round(p99, 3),
            "ping_p99_ms": round(b99, 3),
            "p99_ratio_vs_ping": round(p99 / b99, 2) if b99 else None,
            "nats_msgs_per_call": round(median(results["msgs"]), 4),
            "status_sched_lag_p99_ms": round(med("status", "lags", 99), 3),
            "ping_sched_lag_p99_ms": round(med("ping", "lags", 99), 3),
            "gateway_cpu_us_per_status_call": round(median(cpu_per_call["status"]) * 1e6, 1),
            "gateway_cpu_us_per_ping_call": round(median(cpu_per_call["ping"]) * 1e6, 1),
            "client_cpu_us_per_call": round(median(cpu_per_call["client"]) * 1e6, 1),
            "gateway_runqueue_wait_ms_per_s": round(median(waits["status"]) * 1e3, 1),
        }
        print(json.dumps(figures))
    finally:
        stop_process(gateway)
        redis_server.stop()
        nats.stop_blocking()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
