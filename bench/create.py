"""/create → PodJID through the whole stack, at 64 and at 1 in flight, with the CPU each process spends per create.

Stack: ``interlink-nats gateway`` and ``interlink-nats submitter shell`` as their own processes, a
nats-server, pods whose one container runs ``true``. Each /create renders the pod, sends the script
to the pool (Submit RPC), and returns when the submitter has recorded the job durably.

Between reps the bench waits until every job of the rep has run (the last column), so a rep's creates
never compete with the previous rep's jobs for the CPU.

Ceiling, in the same run: a raw nats-py request-reply between two processes with the same request
bytes as one Submit (a rendered no-op pod) and 64 in flight. The ratio is create/s ÷ raw/s. Its CPU per
call (client + responder, ``raw_cpu_ms_per_req``) is the machine's yardstick: CPU figures in ms differ
twofold between the machines this project runs on, so ``create_cpu_vs_raw`` (a create's plumbing CPU in
raw request-replies) is the figure to compare across machines and sessions.

CPU per create (issue 14, P1), from ``/proc/<pid>/stat`` deltas over the creates of a rep: the gateway's
and the submitter's own CPU (the plumbing: ``create_cpu_ms_per_req`` is their sum), the shell launcher's
own CPU apart, and the jobs' CPU (reaped children of the submitter and its launcher, counted until the
rep's jobs have all finished) apart again, so the plumbing figure does not include the pods' work.
Goals: plumbing <= 0.5 ms at 64 in flight, <= 1.5 ms and p50 <= 3 ms at 1 in flight.

The submitter's figure includes the kernel's work creating each job directory's inodes, which depends on
the file system: on ext4 without a journal (this project's CI machines) each new inode scans the inodes
freed in the last minutes, so it costs 35-170 µs depending on how much was deleted nearby just before
(earlier reps, other work on the machine). The table names the file system; ``--state-root /dev/shm``
runs the same bench with the job directories on tmpfs, leaving the plumbing's own CPU.
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
    child_pids,
    closed_loop_calls,
    cpu_seconds,
    file_system_of,
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
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.services.scripts import render_job

IN_FLIGHT = 64
IDLE_WINDOW_S = 5.0


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


async def closed_loop(port: int, requests: list[bytes], in_flight: int = IN_FLIGHT) -> tuple[list[float], float, int]:
    """``in_flight`` workers, each with its own keep-alive connection, until the requests run out."""
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
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies, time.perf_counter() - started, errors


class CpuMeter:
    """CPU seconds of the gateway, the submitter, the submitter's launcher(s) and the jobs, between two reads."""

    def __init__(self, gateway_pid: int, submitter_pid: int) -> None:
        self.gateway_pid, self.submitter_pid = gateway_pid, submitter_pid

    def read(self) -> dict[str, float]:
        gateway, _ = cpu_seconds(self.gateway_pid)
        submitter, jobs = cpu_seconds(self.submitter_pid)
        launcher = 0.0
        for pid in child_pids(self.submitter_pid):
            try:
                own, reaped = cpu_seconds(pid)
            except OSError:
                continue
            launcher += own
            jobs += reaped
        return {"gateway": gateway, "submitter": submitter, "launcher": launcher, "jobs": jobs}

    @staticmethod
    def per_request_ms(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
        return {key: (after[key] - before[key]) * 1e3 / count for key in before}


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
    parser.add_argument("--serial-pods", type=int, default=300, help="creates per rep at 1 in flight")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--state-root",
        type=Path,
        default=None,
        help="where the submitter's state and job directories go (default: the temp dir); e.g. /dev/shm to "
        "take the file system's inode costs out of the submitter's figure",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-create-", dir=args.state_root))
    state_fs = file_system_of(tmp)
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
        meter = CpuMeter(gateway.pid, submitter.pid)
        idle_before = meter.read()
        time.sleep(IDLE_WINDOW_S)  # what the two processes spend with nothing to do (timers, polls)
        idle_ms = CpuMeter.per_request_ms(idle_before, meter.read(), 1)  # one "request": the whole window
        idle_ms_per_s = (idle_ms["gateway"] + idle_ms["submitter"]) / IDLE_WINDOW_S
        rows, creates, raws, serial = [], [], [], []
        raw_cpus: list[float] = []  # ms of CPU per raw request-reply, client + responder
        cpus: dict[int, list[dict[str, float]]] = {IN_FLIGHT: [], 1: []}
        for rep in range(args.reps):
            for in_flight in (IN_FLIGHT, 1):
                count = args.pods if in_flight > 1 else args.serial_pods
                run = f"r{rep}-{in_flight}-{uuid.uuid4().hex[:6]}"
                pods = [pod_data(i, run) for i in range(count)]
                requests = [http_request("POST", "/create", json.dumps(p).encode()) for p in pods]
                before = meter.read()
                latencies, elapsed, errors = asyncio.run(closed_loop(port, requests, in_flight))
                after_creates = meter.read()
                drained = asyncio.run(wait_finished(port, pods))
                cpu = CpuMeter.per_request_ms(before, after_creates, count)
                cpu["jobs"] = CpuMeter.per_request_ms(before, meter.read(), count)["jobs"]
                cpu["plumbing"] = cpu["gateway"] + cpu["submitter"]
                cpus[in_flight].append(cpu)
                create_rate = len(latencies) / elapsed
                raw_rate, raw_p99 = float("nan"), float("nan")
                if in_flight == IN_FLIGHT:
                    raw_count = args.pods * 4
                    raw_before = time.process_time(), cpu_seconds(responder.pid)[0]
                    raw_lat, raw_elapsed = asyncio.run(raw_ceiling(nats_server.url, submit_bytes, raw_count))
                    raw_cpus.append(
                        (time.process_time() - raw_before[0] + cpu_seconds(responder.pid)[0] - raw_before[1])
                        * 1e3
                        / raw_count
                    )
                    raw_rate, raw_p99 = len(raw_lat) / raw_elapsed, percentile(raw_lat, 99)
                    creates.append((create_rate, latencies))
                    raws.append((raw_rate, raw_lat))
                else:
                    serial.append((create_rate, latencies))
                rows.append(
                    [
                        rep + 1,
                        in_flight,
                        f"{create_rate:.0f}",
                        f"{percentile(latencies, 50) * 1e3:.1f}",
                        f"{percentile(latencies, 99) * 1e3:.1f}",
                        f"{cpu['gateway']:.2f}",
                        f"{cpu['submitter']:.2f}",
                        f"{cpu['plumbing']:.2f}",
                        f"{cpu['launcher']:.2f}",
                        f"{cpu['jobs']:.2f}",
                        f"{raw_rate:.0f}",
                        f"{raw_p99 * 1e3:.1f}",
                        f"{raw_cpus[-1]:.3f}" if in_flight == IN_FLIGHT else "nan",
                        f"{create_rate / raw_rate:.3f}",
                        errors,
                        f"{drained:.1f}",
                    ]
                )
        print(f"idle, gateway + submitter: {idle_ms_per_s:.2f} ms of CPU per second over {IDLE_WINDOW_S:g} s")
        print_table(
            f"/create → PodJID, {args.pods} pods per rep at {IN_FLIGHT} in flight, {args.serial_pods} at 1 "
            f"(Submit request {len(submit_bytes)} B on the wire; job directories on {state_fs}); CPU in ms per create",
            [
                "rep",
                "in flight",
                "creates/s",
                "p50 ms",
                "p99 ms",
                "gateway",
                "submitter",
                "plumbing",
                "launcher",
                "jobs",
                "raw NATS req/s",
                "raw p99 ms",
                "raw CPU ms",
                "ratio",
                "errors",
                "jobs done after s",
            ],
            rows,
        )
        create_rate = median([c[0] for c in creates])
        raw_rate = median([r[0] for r in raws])

        def cpu_median(in_flight: int, key: str) -> float:
            return round(median([c[key] for c in cpus[in_flight]]), 3)

        figures = {
            "creates_per_s": round(create_rate, 1),
            "create_p50_ms": round(median([percentile(c[1], 50) for c in creates]) * 1e3, 2),
            "create_p99_ms": round(median([percentile(c[1], 99) for c in creates]) * 1e3, 2),
            "raw_nats_per_s": round(raw_rate, 1),
            "ratio": round(create_rate / raw_rate, 3),
            "raw_cpu_ms_per_req": round(median(raw_cpus), 4),
            "create_cpu_vs_raw": round(cpu_median(IN_FLIGHT, "plumbing") / median(raw_cpus), 2),
            "create_cpu_ms_per_req": cpu_median(IN_FLIGHT, "plumbing"),
            "gateway_cpu_ms_per_req": cpu_median(IN_FLIGHT, "gateway"),
            "submitter_cpu_ms_per_req": cpu_median(IN_FLIGHT, "submitter"),
            "launcher_cpu_ms_per_req": cpu_median(IN_FLIGHT, "launcher"),
            "jobs_cpu_ms_per_req": cpu_median(IN_FLIGHT, "jobs"),
            "creates_per_s_1": round(median([c[0] for c in serial]), 1),
            "create_p50_ms_1": round(median([percentile(c[1], 50) for c in serial]) * 1e3, 2),
            "create_cpu_ms_per_req_1": cpu_median(1, "plumbing"),
            "gateway_cpu_ms_per_req_1": cpu_median(1, "gateway"),
            "submitter_cpu_ms_per_req_1": cpu_median(1, "submitter"),
            "launcher_cpu_ms_per_req_1": cpu_median(1, "launcher"),
            "jobs_cpu_ms_per_req_1": cpu_median(1, "jobs"),
            "idle_cpu_ms_per_s": round(idle_ms_per_s, 2),
            "submit_request_bytes": len(submit_bytes),
            "in_flight": IN_FLIGHT,
            "state_fs": state_fs,
        }
        print(json.dumps(figures))
    finally:
        responder.kill()
        stop_process(gateway)
        stop_process(submitter)
        nats_server.stop_blocking()


if __name__ == "__main__":
    main()
