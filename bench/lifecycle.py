"""The whole life of N pods at a site: ``/create`` -> the job runs (``true``) -> it ends -> its statuses reach the
gateway -> its layout is removed; with the jobs running beside the creates, at 64 and at 1 in flight.

Stack: ``interlink-nats gateway`` and ``interlink-nats submitter shell`` (runtime none) as their own processes, a
nats-server. Two pod shapes from ``_pods``, interleaved within each rep (each rep starts with the next shape):
``minimal`` and ``interlink`` (2 containers with 15 env vars each, an emptyDir, a configMap with ``items``). A
window is one shape at one in-flight: its creates, then the wait until every pod's job has ended, every container
reads terminated at the gateway and the layout is gone from every job directory (the bench watches the files, then
asks ``/status`` once to confirm, so its own calls barely count in the gateway's figure).

CPU per pod, from ``/proc/<pid>/stat`` deltas over a window (``CpuMeter`` of ``create.py``): the gateway's own, the
submitter's own (``of it kernel``: its system time), its children's (the launcher's own CPU) and the jobs' (a
cgroup v1 ``cpuacct`` group around the submitter's tree, less the two: the launcher lets the kernel reap the
runners, so no ``cutime`` counts them) apart. Unlike ``create.py`` (whose README row holds the jobs with
``--hold-jobs``), these figures run them: launching each job, the polls that see it end, the statuses it
publishes, the removal of its layout are all in. ``pods/s`` is N over the window's wall time, which the poll
interval bounds from below (the submitter's shipped 5 s unless ``--poll-interval``).

Where the submitter's CPU goes: the submitter runs under ``_sampler.py`` (a CPU-time sampling profiler the bench
alone uses; ``--no-profile`` runs it bare). Each sampled stack is put in one phase by the innermost frame a rule
of ``PHASES`` names: create (Submit: the request, the registry, the job directory), launch (the launcher's pipe,
the pidfd watch), poll (the backend poll, container files, the plan), publish (the outbox, events to NATS),
cleanup (the ended layout's removal), nats (the client's reads and writes), loop (no Python frame above the event
loop's and no worker thread busy: uvloop's own C code, epoll, socket and pipe I/O), other. ``--stacks N`` prints
the stacks sampled most.

Found with it (2026-11-29, 2 shared cores): on ext4 without a journal, 85-90 % of the submitter's whole-life CPU
for an interLink-shaped pod is the kernel's (``of it kernel``), in ``prepare_job_dir`` (create) and
``remove_ended_layout`` (cleanup): the layout's 14 inodes are made and freed again per pod, and on such a file
system a new inode costs more the more were freed nearby just before (``create.py`` says more).
``--state-root /dev/shm`` takes the file system out.

Ceiling, in the same run (once per rep): a raw nats-py request-reply between two processes (64 in flight, the
minimal pod's Submit bytes); its CPU per call (client + responder) is the machine's yardstick, printed beside
every figure (``vs raw``: the submitter's CPU per pod in raw request-replies).

Slurm is not measured yet (``"slurm": null`` in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    HttpConnection,
    cpu_seconds,
    file_system_of,
    free_port,
    http_request,
    median,
    print_table,
    start_gateway,
    stop_process,
    wait_http,
)
from _pods import SHAPES, Shape, pod_data
from create import RAW_RESPONDER, CpuMeter, closed_loop, raw_ceiling
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.services.scripts import render_job

IN_FLIGHT = 64
IDLE_WINDOW_S = 5.0
SHAPE_NAMES = ("interlink", "minimal")

PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (phase, substrings of "file:function"); the innermost frame any rule names decides (rules in this order).
    ("cleanup", ("jobdirs/files.py:remove_ended_layout",)),
    ("publish", ("state/outbox.py:", "edge/announcer.py:")),
    (
        "launch",
        (
            "shell/processes.py:",
            "shell/backend.py:_launch",
            "shell/backend.py:_watch_exit",
            "shell/backend.py:exited",
            "shell/backend.py:_reap",
        ),
    ),
    ("poll", ("engine/polling.py:", "shell/backend.py:poll", "core/lifecycle.py:", "core/status.py:")),
    ("create", ("engine/submission.py:", "edge/service.py:", "shell/backend.py:submit", "state/batching.py:")),
    ("nats", ("nats/",)),
)


def system_seconds(pid: int) -> float:
    """The kernel's CPU on the process's behalf (``stime``): on the create path mostly the file system's inodes."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[12]) / os.sysconf("SC_CLK_TCK")


def phase_of(stack: list[str]) -> str:
    """The phase of one sampled stack (outermost frame first)."""
    if stack and stack[-1].endswith("asyncio/runners.py:run"):
        return "loop"  # no Python frame above the loop's: uvloop's C code (epoll, socket and pipe I/O, timers)
    for frame in reversed(stack):
        for phase, markers in PHASES:
            if any(m in frame for m in markers):
                return phase
    return "other"


class CgroupCpu:
    """The CPU of the submitter and every process below it (jobs included), from a cgroup v1 ``cpuacct`` group
    the bench makes: the launcher ignores SIGCHLD (the kernel reaps the runners), so no ``cutime`` counts them.
    ``None`` figures where the bench may not make one (not root, no cpuacct hierarchy)."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, pid: int) -> None:
        self.path: Path | None = self.ROOT / f"bench-lifecycle-{os.getpid()}"
        try:
            self.path.mkdir()
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            self.path = None

    def read(self) -> float | None:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9 if self.path else None

    def remove(self) -> None:
        if self.path:
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (self.ROOT / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                self.path.rmdir()


class Profile:
    """The submitter's sampled stacks, read at a window's edges (SIGUSR2 makes the sampler write them)."""

    def __init__(self, pid: int, path: Path) -> None:
        self.pid, self.path = pid, path

    def read(self) -> Counter[tuple[str, ...]]:
        before = self.path.stat().st_mtime_ns if self.path.exists() else 0
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.path.exists() and self.path.stat().st_mtime_ns != before:
                try:
                    data = json.loads(self.path.read_text())
                except ValueError:
                    time.sleep(0.01)
                    continue
                return Counter({tuple(s[1:]): int(s[0]) for s in data["stacks"]})
            time.sleep(0.01)
        raise RuntimeError("the submitter's sampler did not answer SIGUSR2")

    @staticmethod
    def phases(before: Counter[tuple[str, ...]], after: Counter[tuple[str, ...]]) -> Counter[str]:
        out: Counter[str] = Counter()
        for stack, n in (after - before).items():
            out[phase_of(list(stack))] += n
        return out


def start_submitter(
    nats_url: str, tmp: Path, pool: str, poll_s: float | None, profile: Path | None
) -> subprocess.Popen[bytes]:
    config = tmp / f"{pool}.json"
    settings: dict[str, object] = {
        "pool": pool,
        "backend": "shell",
        "nats": {"url": [nats_url]},
        "state_dir": str(tmp / pool),
        "build_config": {"runtime": "CONTAINER_RUNTIME_NONE"},
    }
    if poll_s is not None:
        settings["poll_interval"] = poll_s
    config.write_text(json.dumps(settings))
    args = ["submitter", "shell", "--config", str(config)]
    exe = Path(sys.executable).with_name("interlink-nats")
    command = (
        [sys.executable, str(Path(__file__).with_name("_sampler.py")), str(profile), "2", "--", *args]
        if profile
        else [str(exe), *args]
    )
    out = (tmp / f"{pool}.log").open("ab")
    return subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)


def pod_done(job_dir: Path, containers: int) -> bool:
    """Every container ended and the layout the submitter made is gone."""
    try:
        exits = sum(1 for name in os.listdir(job_dir / layout.CONTAINERS_DIR) if name.endswith(layout.EXIT_SUFFIX))
    except OSError:
        return False
    return exits >= containers and not any(os.path.lexists(job_dir / n) for n in layout.ENDED_JOB_LAYOUT)


async def wait_lives(port: int, pods: list[dict[str, object]], jobs: Path, limit_s: float = 300.0) -> None:
    """Until every pod's job ended, its layout is removed (files) and its statuses read terminated (``/status``)."""
    started = time.monotonic()
    pending = list(pods)
    conn: HttpConnection | None = None
    try:
        while pending:
            if time.monotonic() - started > limit_s:
                raise RuntimeError(f"{len(pending)} pods did not finish their life within {limit_s:g} s")
            pending = [
                p
                for p in pending
                if not pod_done(jobs / p["pod"]["metadata"]["uid"], len(p["pod"]["spec"]["containers"]))  # type: ignore[index]
            ]
            if pending:
                await asyncio.sleep(0.05)
                continue
            conn = conn or await HttpConnection.open("127.0.0.1", port)
            for i in range(0, len(pods), 500):
                batch = [p["pod"] for p in pods[i : i + 500]]
                status, body = await conn.call(http_request("GET", "/status", json.dumps(batch).encode()))
                done = {
                    s["UID"]
                    for s in (json.loads(body) if status == 200 else [])
                    if s["containers"] and all("terminated" in c["state"] for c in s["containers"])
                }
                pending += [p for p in pods[i : i + 500] if p["pod"]["metadata"]["uid"] not in done]  # type: ignore[index]
            if pending:
                pods = pending
                await asyncio.sleep(0.2)
    finally:
        if conn:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=256, help="pods per rep and shape at 64 in flight")
    parser.add_argument("--serial-pods", type=int, default=64, help="pods per rep and shape at 1 in flight")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="128 and 32 pods, 3 reps (a minute or two)")
    parser.add_argument("--shape", action="append", choices=SHAPE_NAMES, help="a pod shape (default: both)")
    parser.add_argument("--poll-interval", type=float, default=None, help="the submitter's poll interval, s")
    parser.add_argument("--state-root", type=Path, default=None, help="where the job directories go")
    parser.add_argument("--stacks", type=int, default=0, help="print the N stacks sampled most (interLink, 64)")
    parser.add_argument("--no-profile", action="store_true", help="run the submitter without the sampler")
    args = parser.parse_args()
    if args.quick:
        args.pods, args.serial_pods = 128, 32
    shapes: list[Shape] = [SHAPES[name] for name in args.shape or SHAPE_NAMES]
    pool = shapes[0].pool  # runtime none: both shapes go to the same pool

    tmp = Path(tempfile.mkdtemp(prefix="bench-lifecycle-", dir=args.state_root))
    state_fs = file_system_of(tmp)
    jobs = tmp / pool / "jobs"
    nats_server = NatsServerProcess().start_blocking()
    port = free_port()
    profile_path = None if args.no_profile else tmp / "profile.json"
    submitter = start_submitter(nats_server.url, tmp, pool, args.poll_interval, profile_path)
    tree = CgroupCpu(submitter.pid)  # before the first create: the launcher starts with it
    gateway = start_gateway(nats_server.url, port, tmp / "gateway.log")
    responder = subprocess.Popen([sys.executable, "-c", RAW_RESPONDER, nats_server.url], stdout=subprocess.PIPE)
    try:
        assert responder.stdout is not None and responder.stdout.readline().strip() == b"ready"
        wait_http(f"http://127.0.0.1:{port}/healthz")
        raw_payload = bytes(
            pb.SubmitRequest(job=render_job(pod_data(0, "size"), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)))
        )
        meter = CpuMeter(gateway.pid, submitter.pid)
        profile = Profile(submitter.pid, profile_path) if profile_path else None
        for shape in shapes:  # the pool announced, every code path warm
            warm = [shape.make(i, f"warm-{shape.name}", pool) for i in range(64)]
            asyncio.run(closed_loop(port, [http_request("POST", "/create", json.dumps(p).encode()) for p in warm]))
            asyncio.run(wait_lives(port, warm, jobs))
        idle_before = meter.read()
        time.sleep(IDLE_WINDOW_S)
        idle = CpuMeter.per_request_ms(idle_before, meter.read(), 1)
        idle_ms_per_s = (idle["gateway"] + idle["submitter"]) / IDLE_WINDOW_S

        raw_cpus: list[float] = []
        rows: list[list[object]] = []
        figures: dict[tuple[str, int], list[dict[str, float]]] = {}
        top_stacks: Counter[tuple[str, ...]] = Counter()
        for rep in range(args.reps):
            raw_count = 2000
            raw_before = time.process_time(), cpu_seconds(responder.pid)[0]
            asyncio.run(raw_ceiling(nats_server.url, raw_payload, raw_count))
            raw_cpus.append(
                (time.process_time() - raw_before[0] + cpu_seconds(responder.pid)[0] - raw_before[1]) * 1e3 / raw_count
            )
            first = rep % len(shapes)
            for shape in shapes[first:] + shapes[:first]:
                for in_flight in (IN_FLIGHT, 1):
                    count = args.pods if in_flight > 1 else args.serial_pods
                    run = f"r{rep}-{in_flight}-{uuid.uuid4().hex[:6]}"
                    pods = [shape.make(i, run, pool) for i in range(count)]
                    requests = [http_request("POST", "/create", json.dumps(p).encode()) for p in pods]
                    stacks = profile.read() if profile else Counter()
                    before, tree_before, sys_before = meter.read(), tree.read(), system_seconds(submitter.pid)
                    started = time.perf_counter()
                    _, _, errors = asyncio.run(closed_loop(port, requests, in_flight))
                    asyncio.run(wait_lives(port, pods, jobs))
                    elapsed = time.perf_counter() - started
                    cpu = CpuMeter.per_request_ms(before, meter.read(), count)
                    tree_after = tree.read()
                    cpu["submitter_system"] = (system_seconds(submitter.pid) - sys_before) * 1e3 / count
                    if tree_before is not None and tree_after is not None:  # the rest of the tree is the jobs'
                        cpu["jobs"] = (tree_after - tree_before) * 1e3 / count - cpu["submitter"] - cpu["launcher"]
                    stacks_after = profile.read() if profile else Counter()
                    phases = Profile.phases(stacks, stacks_after)
                    if shape.name == "interlink" and in_flight > 1:
                        top_stacks.update(stacks_after - stacks)
                    total = sum(phases.values()) or 1
                    for phase, n in phases.items():  # the submitter's CPU per pod, split by the samples' shares
                        cpu[f"phase_{phase}"] = cpu["submitter"] * n / total
                    cpu["pods_per_s"] = count / elapsed
                    cpu["vs_raw"] = cpu["submitter"] / raw_cpus[-1]
                    figures.setdefault((shape.name, in_flight), []).append(cpu)
                    rows.append(
                        [
                            rep + 1,
                            shape.name,
                            in_flight,
                            f"{cpu['pods_per_s']:.0f}",
                            f"{cpu['gateway']:.2f}",
                            f"{cpu['submitter']:.2f}",
                            f"{cpu['submitter_system']:.2f}",
                            f"{cpu['launcher']:.2f}",
                            f"{cpu['jobs']:.2f}",
                            f"{cpu['vs_raw']:.1f}",
                            f"{raw_cpus[-1]:.3f}",
                            " ".join(
                                f"{p}={phases[p] * 100 / total:.0f}%"
                                for p in sorted(phases, key=phases.get, reverse=True)
                            ),  # type: ignore[arg-type]
                            errors,
                        ]
                    )
        raw_cpu = median(raw_cpus)
        print(f"idle, gateway + submitter: {idle_ms_per_s:.2f} ms of CPU per second over {IDLE_WINDOW_S:g} s")
        print(f"raw NATS request-reply: {raw_cpu:.3f} ms of CPU per call (client + responder), median of {args.reps}")
        print_table(
            f"whole life of a pod, {args.pods} pods per window at {IN_FLIGHT} in flight, {args.serial_pods} at 1 "
            f"(shell backend, runtime none, jobs run beside the creates; job directories on {state_fs}); CPU in ms "
            "per pod; 'vs raw' = the submitter's CPU in raw request-replies; 'raw' = that rep's raw request-reply CPU",
            [
                "rep",
                "pod",
                "in flight",
                "pods/s",
                "gateway",
                "submitter",
                "of it kernel",
                "children",
                "jobs",
                "vs raw",
                "raw",
                "submitter by phase",
                "errors",
            ],
            rows,
        )
        for stack, n in top_stacks.most_common(args.stacks):
            print(f"{n:5d} {phase_of(list(stack)):8s} " + " > ".join(f.rsplit("/", 1)[-1] for f in stack[-7:]))
        summary = summarize(figures, shapes, raw_cpu)
        for shape in shapes:
            phases = summary[shape.name]["submitter_phase_ms_per_pod"]
            print(f"{shape.name} at {IN_FLIGHT} in flight, submitter ms per pod by phase (medians): {phases}")
        print(
            json.dumps(
                {
                    "shell": summary,
                    "slurm": None,
                    "raw_cpu_ms_per_req": round(raw_cpu, 4),
                    "idle_cpu_ms_per_s": round(idle_ms_per_s, 2),
                    "in_flight": IN_FLIGHT,
                    "pods": args.pods,
                    "serial_pods": args.serial_pods,
                    "reps": args.reps,
                    "state_fs": state_fs,
                    "profiled": profile is not None,
                }
            )
        )
    finally:
        responder.kill()
        stop_process(gateway)
        stop_process(submitter)
        tree.remove()
        nats_server.stop_blocking()


def summarize(
    figures: dict[tuple[str, int], list[dict[str, float]]], shapes: list[Shape], raw_cpu: float
) -> dict[str, dict[str, object]]:
    """Per shape, medians over the reps; ``_1`` = at 1 in flight."""
    out: dict[str, dict[str, object]] = {}
    for shape in shapes:
        result: dict[str, object] = {}
        for in_flight, suffix in ((IN_FLIGHT, ""), (1, "_1")):
            cpus = figures[(shape.name, in_flight)]

            def med(key: str, cpus: list[dict[str, float]] = cpus) -> float:
                return round(median([c.get(key, 0.0) for c in cpus]), 3)

            result[f"submitter_cpu_ms_per_pod{suffix}"] = med("submitter")
            result[f"submitter_system_cpu_ms_per_pod{suffix}"] = med("submitter_system")
            result[f"submitter_cpu_vs_raw{suffix}"] = round(med("submitter") / raw_cpu, 2)
            result[f"gateway_cpu_ms_per_pod{suffix}"] = med("gateway")
            result[f"children_cpu_ms_per_pod{suffix}"] = med("launcher")
            result[f"jobs_cpu_ms_per_pod{suffix}"] = med("jobs")
            result[f"pods_per_s{suffix}"] = round(med("pods_per_s"), 1)
            phases = sorted({k for c in cpus for k in c if k.startswith("phase_")})
            result[f"submitter_phase_ms_per_pod{suffix}"] = {p[6:]: med(p) for p in phases}
        out[shape.name] = result
    return out


if __name__ == "__main__":
    main()
