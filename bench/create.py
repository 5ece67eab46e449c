"""/create → PodJID through the whole stack, at 64 and at 1 in flight, with the CPU each process spends per create.

Stack: ``interlink-nats gateway`` and one ``interlink-nats submitter shell`` per runtime as their own
processes, a nats-server. Each /create renders the pod, sends the script to the pool (Submit RPC), and
returns when the submitter has recorded the job durably. Three pod shapes, interleaved within each rep
(``--shape`` picks some): ``minimal`` (one container running ``true``, one env var, no volumes),
``interlink`` (what interLink sends: two containers with 15 env vars each, an emptyDir and a configMap
with ``items``; runtime none) and ``interlink-apptainer`` (the same pod under runtime apptainer, whose job
directory layout differs; its jobs fail at once where apptainer is not installed, which leaves the
creates' figures as they are). The JSON holds every figure per shape under ``pods``.

Each rep starts with the next shape, so that with ``--reps`` a multiple of the shapes' number every shape
runs first, second and third equally often. On ext4 a shape's figures follow its place in the rep more than
its own costs (the inodes the earlier shapes' jobs freed make the later ones' dearer, see below): with a
fixed order, the apptainer-shaped pod, always third, cost 0.97 ms of submitter CPU per create against 0.32
for the interLink-shaped pod under runtime none, though its layout is smaller; run first, it cost 0.53-0.80
against 0.71-0.75 (2026-11-28).

Between reps the bench waits until every job of the rep has run (the last column), so a rep's creates
never compete with the previous rep's jobs for the CPU.

Ceiling, in the same run (once per rep): a raw nats-py request-reply between two processes with the
same request bytes as one Submit of the minimal pod and 64 in flight. The ratio is create/s ÷ raw/s.
Its CPU per call (client + responder, ``raw_cpu_ms_per_req``) is the machine's yardstick: CPU figures
in ms differ twofold between the machines this project runs on, so ``create_cpu_vs_raw`` (a create's
plumbing CPU in raw request-replies; ``_1`` at 1 in flight) is the figure to compare across machines
and sessions. The goals: ``create_cpu_vs_raw`` <= 5, ``create_cpu_vs_raw_1`` <= 10 and
``create_p50_ms_1`` <= 1 on a quiet machine, for every shape.

CPU per create (P1), from ``/proc/<pid>/stat`` deltas over the creates of a rep: the gateway's
and the submitter's own CPU (the plumbing: ``create_cpu_ms_per_req`` is their sum), the shell launcher's
own CPU apart, and the jobs' CPU (reaped children of the submitter and its launcher, counted until the
rep's jobs have all finished) apart again, so the plumbing figure does not include the pods' work. The
submitter's CPU after the creates until the rep's jobs have all run (``ends``: the polls that see them end,
their statuses, the removal of their layouts, which the job scripts leave to it) is a figure of its own.

The submitter's figure includes the kernel's work creating each job directory's inodes, which depends on
the file system: on ext4 without a journal (this project's CI machines) each new inode scans the inodes
freed in the last minutes, so it costs 35-170 µs depending on how much was deleted nearby just before
(earlier reps, other work on the machine). The table names the file system; ``--state-root /dev/shm``
runs the same bench with the job directories on tmpfs, leaving the plumbing's own CPU.

The jobs run on this machine, beside the creates that start them: at 1 in flight a rep's jobs (about 5 ms of
CPU each) take much of the two cores the creates need, so ``create_p50_ms_1`` is not a quiet machine's.
``--hold-jobs`` pauses the submitters' launchers (SIGSTOP) while a batch's creates are timed and resumes them
after: the jobs then run after the creates, as they would on a batch site's compute nodes. The launches' pipe
round trips then fall in ``ends`` rather than in the creates' CPU; the JSON says ``jobs_held``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    start_gateway,
    stop_process,
    wait_http,
)
from _pods import SHAPES, Shape, pod_data
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.services.scripts import render_job

IN_FLIGHT = 64
IDLE_WINDOW_S = 5.0


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


@contextlib.contextmanager
def launchers_held(submitter_pid: int, hold: bool) -> Iterator[None]:
    """With ``hold``, the submitter's launcher processes are stopped (the jobs wait) until the block ends."""
    pids = child_pids(submitter_pid) if hold else []
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


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


@dataclass
class Figures:
    """One shape's measurements over the reps."""

    creates: list[tuple[float, list[float]]] = field(default_factory=list)  # 64 in flight: (rate, latencies)
    serial: list[tuple[float, list[float]]] = field(default_factory=list)  # 1 in flight
    cpus: dict[int, list[dict[str, float]]] = field(default_factory=lambda: {IN_FLIGHT: [], 1: []})


def start_submitter(shape: Shape, nats_url: str, tmp: Path) -> subprocess.Popen[bytes]:
    config = tmp / f"{shape.pool}.json"
    config.write_text(
        json.dumps(
            {
                "pool": shape.pool,
                "backend": "shell",
                "nats": {"url": [nats_url]},
                "state_dir": str(tmp / shape.pool),
                "build_config": {"runtime": f"CONTAINER_RUNTIME_{shape.runtime.name}"},
            }
        )
    )
    return start_cli(["submitter", "shell", "--config", str(config)], log=tmp / f"{shape.pool}.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=2000, help="creates per rep and pod shape")
    parser.add_argument("--serial-pods", type=int, default=300, help="creates per rep and pod shape at 1 in flight")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--shape",
        action="append",
        choices=sorted(SHAPES),
        help="a pod shape to measure (repeat for several; default: all, interleaved within each rep)",
    )
    parser.add_argument(
        "--state-root",
        type=Path,
        default=None,
        help="where the submitters' state and job directories go (default: the temp dir); e.g. /dev/shm to "
        "take the file system's inode costs out of the submitter's figure",
    )
    parser.add_argument(
        "--hold-jobs",
        action="store_true",
        help="stop the launchers while creates are timed, so that the jobs run after them, not beside them",
    )
    args = parser.parse_args()
    shapes = [SHAPES[name] for name in args.shape or SHAPES]

    tmp = Path(tempfile.mkdtemp(prefix="bench-create-", dir=args.state_root))
    state_fs = file_system_of(tmp)
    nats_server = NatsServerProcess().start_blocking()
    port = free_port()
    submitters = {shape.pool: start_submitter(shape, nats_server.url, tmp) for shape in shapes}
    gateway = start_gateway(nats_server.url, port, tmp / "gateway.log")
    responder = subprocess.Popen([sys.executable, "-c", RAW_RESPONDER, nats_server.url], stdout=subprocess.PIPE)
    try:
        assert responder.stdout is not None and responder.stdout.readline().strip() == b"ready"
        wait_http(f"http://127.0.0.1:{port}/healthz")
        submit_bytes = {
            shape.name: len(
                bytes(
                    pb.SubmitRequest(
                        job=render_job(shape.make(0, "size", shape.pool), pb.BuildConfig(runtime=shape.runtime))
                    )
                )
            )
            for shape in shapes
        }
        raw_payload = bytes(
            pb.SubmitRequest(job=render_job(pod_data(0, "size"), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)))
        )
        meters = {shape.pool: CpuMeter(gateway.pid, submitters[shape.pool].pid) for shape in shapes}
        for shape in shapes:  # every pool announced, its code paths warm
            warm = [shape.make(i, f"warm-{shape.name}", shape.pool) for i in range(100)]
            asyncio.run(closed_loop(port, [http_request("POST", "/create", json.dumps(p).encode()) for p in warm]))
            asyncio.run(wait_finished(port, warm))
        meter = meters[shapes[0].pool]
        idle_before = meter.read()
        time.sleep(IDLE_WINDOW_S)  # what the gateway and one submitter spend with nothing to do (timers, polls)
        idle_ms = CpuMeter.per_request_ms(idle_before, meter.read(), 1)  # one "request": the whole window
        idle_ms_per_s = (idle_ms["gateway"] + idle_ms["submitter"]) / IDLE_WINDOW_S
        rows: list[list[object]] = []
        raws: list[tuple[float, list[float]]] = []
        raw_cpus: list[float] = []  # ms of CPU per raw request-reply, client + responder
        figures = {shape.name: Figures() for shape in shapes}
        for rep in range(args.reps):
            raw_count = args.pods * 4
            raw_before = time.process_time(), cpu_seconds(responder.pid)[0]
            raw_lat, raw_elapsed = asyncio.run(raw_ceiling(nats_server.url, raw_payload, raw_count))
            raw_cpus.append(
                (time.process_time() - raw_before[0] + cpu_seconds(responder.pid)[0] - raw_before[1]) * 1e3 / raw_count
            )
            raws.append((len(raw_lat) / raw_elapsed, raw_lat))
            first = rep % len(shapes)  # each rep starts with the next shape (see the module docstring)
            for shape in shapes[first:] + shapes[:first]:
                for in_flight in (IN_FLIGHT, 1):
                    count = args.pods if in_flight > 1 else args.serial_pods
                    run = f"r{rep}-{in_flight}-{uuid.uuid4().hex[:6]}"
                    pods = [shape.make(i, run, shape.pool) for i in range(count)]
                    requests = [http_request("POST", "/create", json.dumps(p).encode()) for p in pods]
                    meter = meters[shape.pool]
                    before = meter.read()
                    with launchers_held(meter.submitter_pid, args.hold_jobs):
                        latencies, elapsed, errors = asyncio.run(closed_loop(port, requests, in_flight))
                    after_creates = meter.read()
                    drained = asyncio.run(wait_finished(port, pods))
                    cpu = CpuMeter.per_request_ms(before, after_creates, count)
                    drained_cpu = CpuMeter.per_request_ms(after_creates, meter.read(), count)
                    cpu["jobs"] += drained_cpu["jobs"]
                    cpu["ends"] = drained_cpu["submitter"]
                    cpu["plumbing"] = cpu["gateway"] + cpu["submitter"]
                    shape_figures = figures[shape.name]
                    shape_figures.cpus[in_flight].append(cpu)
                    create_rate = len(latencies) / elapsed
                    (shape_figures.creates if in_flight > 1 else shape_figures.serial).append((create_rate, latencies))
                    rows.append(
                        [
                            rep + 1,
                            shape.name,
                            in_flight,
                            f"{create_rate:.0f}",
                            f"{percentile(latencies, 50) * 1e3:.1f}",
                            f"{percentile(latencies, 99) * 1e3:.1f}",
                            f"{cpu['gateway']:.2f}",
                            f"{cpu['submitter']:.2f}",
                            f"{cpu['plumbing']:.2f}",
                            f"{cpu['launcher']:.2f}",
                            f"{cpu['jobs']:.2f}",
                            f"{cpu['ends']:.2f}",
                            f"{cpu['plumbing'] / raw_cpus[-1]:.1f}",
                            errors,
                            f"{drained:.1f}",
                        ]
                    )
        raw_rate = median([r[0] for r in raws])
        raw_cpu = median(raw_cpus)
        print(f"idle, gateway + submitter: {idle_ms_per_s:.2f} ms of CPU per second over {IDLE_WINDOW_S:g} s")
        print(
            f"raw NATS request-reply at {IN_FLIGHT} in flight ({len(raw_payload)} B, the minimal pod's Submit): "
            f"{raw_rate:.0f}/s, p99 {median([percentile(r[1], 99) for r in raws]) * 1e3:.1f} ms, "
            f"{raw_cpu:.3f} ms of CPU per request-reply (client + responder), medians of {args.reps} reps"
        )
        print_table(
            f"/create → PodJID, {args.pods} pods per rep and shape at {IN_FLIGHT} in flight, {args.serial_pods} at 1 "
            f"(job directories on {state_fs}; jobs {'held while timed' if args.hold_jobs else 'run beside'}); "
            "CPU in ms per create; 'vs raw' = plumbing CPU in raw request-replies",
            [
                "rep",
                "pod",
                "in flight",
                "creates/s",
                "p50 ms",
                "p99 ms",
                "gateway",
                "submitter",
                "plumbing",
                "launcher",
                "jobs",
                "ends",
                "vs raw",
                "errors",
                "jobs done after s",
            ],
            rows,
        )
        result: dict[str, object] = {
            "raw_nats_per_s": round(raw_rate, 1),
            "raw_cpu_ms_per_req": round(raw_cpu, 4),
            "idle_cpu_ms_per_s": round(idle_ms_per_s, 2),
            "in_flight": IN_FLIGHT,
            "state_fs": state_fs,
            "jobs_held": args.hold_jobs,
            "pods": {
                shape.name: shape_result(figures[shape.name], raw_rate, raw_cpu, submit_bytes[shape.name])
                for shape in shapes
            },
        }
        print(json.dumps(result))
    finally:
        responder.kill()
        stop_process(gateway)
        for submitter in submitters.values():
            stop_process(submitter)
        nats_server.stop_blocking()
        shutil.rmtree(tmp, ignore_errors=True)


def shape_result(figures: Figures, raw_rate: float, raw_cpu: float, submit_bytes: int) -> dict[str, object]:
    """One pod shape's medians over the reps, CPU also as raw request-replies (the figure that compares machines)."""

    def cpu_median(in_flight: int, key: str) -> float:
        return round(median([c[key] for c in figures.cpus[in_flight]]), 3)

    create_rate = median([c[0] for c in figures.creates])
    return {
        "creates_per_s": round(create_rate, 1),
        "ratio": round(create_rate / raw_rate, 3),
        "create_p50_ms": round(median([percentile(c[1], 50) for c in figures.creates]) * 1e3, 2),
        "create_p99_ms": round(median([percentile(c[1], 99) for c in figures.creates]) * 1e3, 2),
        "create_cpu_vs_raw": round(cpu_median(IN_FLIGHT, "plumbing") / raw_cpu, 2),
        "create_cpu_ms_per_req": cpu_median(IN_FLIGHT, "plumbing"),
        "gateway_cpu_ms_per_req": cpu_median(IN_FLIGHT, "gateway"),
        "submitter_cpu_ms_per_req": cpu_median(IN_FLIGHT, "submitter"),
        "launcher_cpu_ms_per_req": cpu_median(IN_FLIGHT, "launcher"),
        "jobs_cpu_ms_per_req": cpu_median(IN_FLIGHT, "jobs"),
        "ends_cpu_ms_per_req": cpu_median(IN_FLIGHT, "ends"),
        "creates_per_s_1": round(median([c[0] for c in figures.serial]), 1),
        "create_p50_ms_1": round(median([percentile(c[1], 50) for c in figures.serial]) * 1e3, 2),
        "create_cpu_vs_raw_1": round(cpu_median(1, "plumbing") / raw_cpu, 2),
        "create_cpu_ms_per_req_1": cpu_median(1, "plumbing"),
        "gateway_cpu_ms_per_req_1": cpu_median(1, "gateway"),
        "submitter_cpu_ms_per_req_1": cpu_median(1, "submitter"),
        "submit_request_bytes": submit_bytes,
    }


if __name__ == "__main__":
    main()
