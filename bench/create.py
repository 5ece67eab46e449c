"""/create → PodJID through the whole stack, 64 in flight, against raw NATS request-reply as the ceiling.

Stack: ``interlink-nats gateway`` and ``interlink-nats submitter shell`` as their own processes, a
nats-server, pods whose one container runs ``true``. Each /create renders the pod, sends the script
to the pool (Submit RPC), and returns when the submitter has recorded the job durably.

Between reps the bench waits until every job of the rep has run (the last column), so a rep's creates
never compete with the previous rep's jobs for the CPU.

Ceiling, in the same run: a raw nats-py request-reply between two processes with the same request
bytes as one Submit (a rendered no-op pod) and 64 in flight. The ratio is create/s ÷ raw/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    HttpConnection,
    closed_loop_calls,
    free_port,
    http_request,
    median,
    percentile,
    print_table,
    start_cli,
    stop_process,
    wait_http,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.nats_server import NatsServerProcess
from interlink_nats.services.scripts import render_job

IN_FLIGHT = 64


def pod_data(i: int, run: str) -> dict[str, object]:
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"bench-{run}-{i}",
                "namespace": "bench",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{run}/{i}")),
            },
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "command": ["true"], "env": [{"name": "N", "value": str(i)}]}
                ],
                "tolerations": [{"key": "pool.vk.io", "value": "bench", "effect": "NoSchedule"}],
            },
        },
        "container": [{"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None}],
    }


async def closed_loop(port: int, requests: list[bytes]) -> tuple[list[float], float, int]:
    """IN_FLIGHT workers, each with its own keep-alive connection, until the requests run out."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    latencies: list[float] = []
    errors = 0

    async def worker() -> None:
        nonlocal errors
        conn = await HttpConnection.open("127.0.0.1", port)
        try:
            while not queue.empty():
                request = queue.get_nowait()
                started = time.perf_counter()
                status, body = await conn.call(request)
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    errors += 1
                    if errors <= 3:
                        print(f"create failed: {status} {body[:200]!r}", file=sys.stderr)
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return latencies, time.perf_counter() - started, errors


async def wait_finished(port: int, pods: list[dict[str, object]], limit_s: float = 300.0) -> float:
    """Wait until every pod of a rep has run, so the next rep's creates do not compete with its jobs."""
    started = time.perf_counter()
    conn = await HttpConnection.open("127.0.0.1", port)
    try:
        pending = list(pods)
        while pending and time.perf_counter() - started < limit_s:
            batch = [p["pod"] for p in pending[:200]]
            status, body = await conn.call(http_request("GET", "/status", json.dumps(batch).encode()))
            done = {
                s["UID"]
                for s in json.loads(body)
                if status == 200 and all("terminated" in c["state"] for c in s["containers"])
            }
            pending = [p for p in pending if p["pod"]["metadata"]["uid"] not in done]  # type: ignore[index]
            if pending:
                await asyncio.sleep(0.5)
    finally:
        conn.close()
    return time.perf_counter() - started


RAW_RESPONDER = textwrap.dedent("""
    import asyncio, sys, nats
    async def main():
        nc = await nats.connect(sys.argv[1])
        async def reply(msg):
            await msg.respond(b"\\x0a\\x041234")
        await nc.subscribe("bench.raw", queue="bench", cb=reply)
        await nc.flush()
        print("ready", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())
""")


async def raw_ceiling(url: str, payload: bytes, count: int) -> tuple[list[float], float]:
    import nats

    nc = await nats.connect(url)
    try:
        return await closed_loop_calls(lambda: nc.request("bench.raw", payload, timeout=10), count, IN_FLIGHT)
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=2000, help="creates per rep")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-create-"))
    nats_server = NatsServerProcess().start_blocking()
    port = free_port()
    submitter = start_cli(
        ["submitter", "shell", "--pool", "bench", "--nats-url", nats_server.url, "--state-dir", str(tmp / "submitter")],
        log=tmp / "submitter.log",
    )
    gateway = start_cli(
        ["gateway", "--nats-url", nats_server.url, "--port", str(port), "--log-level", "warning"],
        log=tmp / "gateway.log",
    )
    responder = subprocess.Popen([sys.executable, "-c", RAW_RESPONDER, nats_server.url], stdout=subprocess.PIPE)
    try:
        assert responder.stdout is not None and responder.stdout.readline().strip() == b"ready"
        wait_http(f"http://127.0.0.1:{port}/healthz")
        job = render_job(pod_data(0, "size"), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        submit_bytes = bytes(pb.SubmitRequest(job=job))
        warm = [http_request("POST", "/create", json.dumps(pod_data(i, "warm")).encode()) for i in range(100)]
        asyncio.run(closed_loop(port, warm))
        asyncio.run(wait_finished(port, [pod_data(i, "warm") for i in range(100)]))
        rows, creates, raws = [], [], []
        for rep in range(args.reps):
            run = f"r{rep}-{uuid.uuid4().hex[:6]}"
            pods = [pod_data(i, run) for i in range(args.pods)]
            requests = [http_request("POST", "/create", json.dumps(p).encode()) for p in pods]
            latencies, elapsed, errors = asyncio.run(closed_loop(port, requests))
            drained = asyncio.run(wait_finished(port, pods))
            raw_lat, raw_elapsed = asyncio.run(raw_ceiling(nats_server.url, submit_bytes, args.pods * 4))
            create_rate, raw_rate = len(latencies) / elapsed, len(raw_lat) / raw_elapsed
            creates.append((create_rate, latencies))
            raws.append((raw_rate, raw_lat))
            rows.append(
                [
                    rep + 1,
                    f"{create_rate:.0f}",
                    f"{percentile(latencies, 50) * 1e3:.1f}",
                    f"{percentile(latencies, 99) * 1e3:.1f}",
                    f"{raw_rate:.0f}",
                    f"{percentile(raw_lat, 99) * 1e3:.1f}",
                    f"{create_rate / raw_rate:.3f}",
                    errors,
                    f"{drained:.1f}",
                ]
            )
        print_table(
            f"/create → PodJID, {IN_FLIGHT} in flight, {args.pods} pods per rep "
            f"(Submit request {len(submit_bytes)} B on the wire)",
            [
                "rep",
                "creates/s",
                "p50 ms",
                "p99 ms",
                "raw NATS req/s",
                "raw p99 ms",
                "ratio",
                "errors",
                "jobs done after s",
            ],
            rows,
        )
        create_rate = median([c[0] for c in creates])
        raw_rate = median([r[0] for r in raws])
        figures = {
            "creates_per_s": round(create_rate, 1),
            "create_p50_ms": round(median([percentile(c[1], 50) for c in creates]) * 1e3, 2),
            "create_p99_ms": round(median([percentile(c[1], 99) for c in creates]) * 1e3, 2),
            "raw_nats_per_s": round(raw_rate, 1),
            "ratio": round(create_rate / raw_rate, 3),
            "submit_request_bytes": len(submit_bytes),
            "in_flight": IN_FLIGHT,
        }
        print(json.dumps(figures))
    finally:
        responder.kill()
        stop_process(gateway)
        stop_process(submitter)
        nats_server.stop_blocking()


if __name__ == "__main__":
    main()
