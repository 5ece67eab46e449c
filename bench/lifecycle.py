"""The whole life of N pods at a site: ``/create`` -> the job runs (``true``) -> it ends -> its statuses reach the
gateway -> its layout is removed; with the jobs running beside the creates, at 64 and at 1 in flight.

Stack: ``interlink-nats gateway`` and ``interlink-nats submitter shell`` (runtime none) as their own processes, a
nats-server. Two pod shapes from ``_pods``, interleaved within each rep (each rep starts with the next shape):
``minimal`` and ``interlink`` (2 containers with 15 env vars each, an emptyDir, a configMap with ``items``). A
window is one shape at one in-flight: its creates, then the wait until every pod's job has ended, every container
reads terminated at the gateway and the layout is gone from every job directory (the bench watches the files, then
asks ``/status`` once to confirm, so its own calls barely count in the gateway's figure).

CPU per pod, over a window: the gateway's own and the submitter's own from their threads' ``schedstat`` (to the
nanosecond: ``/proc/<pid>/stat`` counts 10 ms ticks, 0.6 ms a pod over Slurm's 16), ``of it kernel`` (the
submitter's system time, in ticks), its children's (the launcher's own CPU) and the jobs' (a
cgroup v1 ``cpuacct`` group around the submitter's tree, less the two: the launcher lets the kernel reap the
runners, so no ``cutime`` counts them) apart. Unlike ``create.py`` (whose README row holds the jobs with
``--hold-jobs``), these figures run them: launching each job, the polls that see it end, the statuses it
publishes, the removal of its layout are all in. ``pods/s`` is N over the window's wall time, which the poll
interval bounds from below (the submitter's shipped 5 s unless ``--poll-interval``).

Where the submitter's CPU goes: the submitter runs under ``_sampler.py`` (a CPU-time sampling profiler the bench
alone uses; ``--no-profile`` runs it bare), sampling only in one more rep after the measured ones (rep ``p``):
sampling costs CPU of its own (a signal and a stack walk every 2 ms of CPU), so the figures and their medians come
from the reps with the sampler off (the sampled rep's are printed too: within the reps' spread on 2026-11-29), and
``submitter by phase`` splits them by the sampled rep's shares (its own CPU is printed, and is in the JSON as
``..._sampled``). Each sampled stack is put in one phase by the innermost frame a rule
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

Wake-ups: ``wake-ups`` is how often the submitter's threads were woken per pod (voluntary context switches, a
figure that does not drift with the machine's speed). Before the reps, each process's idle CPU and wake-ups per
second (10 s, ``schedstat``), and what one wake-up of a small process idle for 0.5 s costs on this machine
(``_meters.IDLE_WAKE``): on a virtual machine it is 0.2-1.8 ms of CPU (2026-11-29), so where pods come slowly
(Slurm) the submitter's CPU per pod is mostly its wake-ups.

Slurm (``--backend``; default both): a real one-node cluster (``tests/harness/slurm_cluster.py``: slurmctld, slurmd,
munged on free ports, as the tests start it) and a ``submitter slurm`` on its own pool. There ``children`` is the
batch commands' CPU (sbatch, squeue, sacct: the submitter's cgroup less the submitter), ``slurm daemons`` the
own CPU of slurmctld, slurmd and munged, and ``jobs`` what the daemons started (slurmstepd and the job, a
cgroup around the daemons less their own). The node declares ``--slurm-cpus`` CPUs (16; the jobs run ``true``,
so they may outnumber the host's cores, as ``arrays.py``'s do): with the host's 2, Slurm ran 2 jobs at a time and 62
of 64 pods waited in its queue, 1.8 pods a second, so the window's share of the submitter's per-second costs (its
polls and timers: the idle line) grew with the cluster's smallness, not with the pod. 2026-11-30, 3 interleaved pairs
of one rep, interLink-shaped pods at 64 in flight, 2 CPUs then 16: 3.60 / 3.05, 3.08 / 1.68 (the host sped up
between the two), 2.50 / 2.32 ms, wake-ups a pod 5.1 / 3.6, 5.1 / 2.9, 5.7 / 2.7 (12.7 pods a second); past 16
CPUs, slurmctld and slurmd bound the rate (64 CPUs: 12.7 pods a second too). ``--slurm-cpus 0`` declares the host's.
Slurm still starts fewer jobs a second than the shell launcher, so its windows hold fewer pods (``--slurm-pods``):
what the submitter and the gateway spend meanwhile weighs more per pod.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "harness"))  # the tests' real one-node Slurm

from _harness import (
    HttpConnection,
    cpu_seconds,
    exit_on_term,
    file_system_of,
    free_port,
    http_request,
    median,
    print_table,
    start_gateway,
    stop_process,
    wait_http,
)
from _meters import CgroupCpu, Profile, idle_wake_ms, own_cpu, phase_of, ran_seconds, system_seconds, wakeups
from _pods import SHAPES, Shape, pod_data
from create import RAW_RESPONDER, CpuMeter, closed_loop, raw_ceiling
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.services.scripts import render_job
from slurm_cluster import SlurmCluster

IN_FLIGHT = 64
IDLE_WINDOW_S = 10.0
SLURM_CPUS = 16
"""The Slurm node's declared CPUs: enough that its daemons, not its CPU count, bound how fast jobs start."""
SHAPE_NAMES = ("interlink", "minimal")


def start_submitter(
    nats_url: str, tmp: Path, pool: str, backend: str, poll_s: float | None, profile: Path | None, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    config = tmp / f"{pool}.json"
    settings: dict[str, object] = {
        "pool": pool,
        "backend": backend,
        "nats": {"url": [nats_url]},
        "state_dir": str(tmp / pool),
        "build_config": {"runtime": "CONTAINER_RUNTIME_NONE"},
    }
    if poll_s is not None:
        settings["poll_interval"] = poll_s
    config.write_text(json.dumps(settings))
    args = ["submitter", backend, "--config", str(config)]
    exe = Path(sys.executable).with_name("interlink-nats")
    command = (
        [sys.executable, str(Path(__file__).with_name("_sampler.py")), str(profile), "2", "--", *args]
        if profile
        else [str(exe), *args]
    )
    out = (tmp / f"{pool}.log").open("ab")
    return subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True, env={**os.environ, **env})


@dataclass
class Site:
    """One backend's submitter, its pool, and what measures it (Slurm: its daemons too)."""

    backend: str
    pool: str
    submitter: subprocess.Popen[bytes]
    tree: CgroupCpu
    profile: Profile | None
    jobs: Path
    daemons: list[int] = field(default_factory=list)
    """Slurm's own daemons (slurmctld, slurmd, munged), whose CPU is reported apart."""
    batch: CgroupCpu | None = None
    """Slurm: the daemons and everything they start (slurmstepd, the jobs)."""


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
    parser.add_argument(
        "--serial-pods",
        type=int,
        default=192,
        help="pods per rep and shape at 1 in flight (a window lasts a poll interval at least: fewer pods share it)",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="128 and 32 pods (Slurm: 32 and 8), 3 reps")
    parser.add_argument("--shape", action="append", choices=SHAPE_NAMES, help="a pod shape (default: both)")
    parser.add_argument("--backend", action="append", choices=("shell", "slurm"), help="default: both")
    parser.add_argument("--slurm-pods", type=int, default=64, help="Slurm: pods per window at 64 in flight")
    parser.add_argument("--slurm-serial-pods", type=int, default=16, help="Slurm: pods per window at 1 in flight")
    parser.add_argument(
        "--slurm-cpus",
        type=int,
        default=SLURM_CPUS,
        help=f"CPUs the Slurm node declares (default {SLURM_CPUS}; 0: the host's)",
    )
    parser.add_argument("--poll-interval", type=float, default=None, help="the submitters' poll interval, s")
    parser.add_argument("--state-root", type=Path, default=None, help="where the job directories go")
    parser.add_argument("--stacks", type=int, default=0, help="print the N stacks sampled most (interLink, 64)")
    parser.add_argument("--no-profile", action="store_true", help="run the submitters without the sampler")
    args = parser.parse_args()
    if args.quick:
        args.pods, args.serial_pods, args.slurm_pods, args.slurm_serial_pods = 128, 32, 32, 8
    shapes: list[Shape] = [SHAPES[name] for name in args.shape or SHAPE_NAMES]
    backends = args.backend or ["shell", "slurm"]
    if args.slurm_cpus < 0:
        parser.error(f"--slurm-cpus: {args.slurm_cpus} is below 0 (0 declares the host's CPUs)")
    slurm_cpus = args.slurm_cpus or os.cpu_count() or 1

    exit_on_term()
    tmp = Path(tempfile.mkdtemp(prefix="bench-lifecycle-", dir=args.state_root))
    state_fs = file_system_of(tmp)
    nats_server = NatsServerProcess(die_with_parent=True).start_blocking()
    port = free_port()
    sites: list[Site] = []
    slurm = None
    keep = True  # until the figures are out: a failed run's logs tell why
    gateway = start_gateway(nats_server.url, port, tmp / "gateway.log")
    responder = subprocess.Popen([sys.executable, "-c", RAW_RESPONDER, nats_server.url], stdout=subprocess.PIPE)
    try:
        for backend in backends:
            env: dict[str, str] = {}
            daemons: list[int] = []
            if backend == "slurm":
                slurm = SlurmCluster(cpus=slurm_cpus).start()
                env = {"SLURM_CONF": str(slurm.conf)}
                munged = int((slurm.dir / "munge" / "munged.pid").read_text())
                daemons = [p.pid for p in slurm._procs] + [munged]
            pool = f"bench-{backend}"
            profile_path = None if args.no_profile else tmp / f"profile-{backend}.json"
            submitter = start_submitter(nats_server.url, tmp, pool, backend, args.poll_interval, profile_path, env)
            sites.append(
                Site(
                    backend,
                    pool,
                    submitter,
                    CgroupCpu([submitter.pid], backend),  # before the first create: the launcher starts with it
                    Profile(submitter.pid, profile_path) if profile_path else None,
                    tmp / pool / "jobs",
                    daemons,
                    CgroupCpu(daemons, "slurm-daemons") if daemons else None,
                )
            )
        assert responder.stdout is not None and responder.stdout.readline().strip() == b"ready"
        wait_http(f"http://127.0.0.1:{port}/healthz")
        raw_payload = bytes(
            pb.SubmitRequest(job=render_job(pod_data(0, "size"), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)))
        )
        for site in sites:
            for shape in shapes:  # the pool announced, every code path warm
                warm = [shape.make(i, f"warm-{site.backend}-{shape.name}", site.pool) for i in range(16)]
                asyncio.run(closed_loop(port, [http_request("POST", "/create", json.dumps(p).encode()) for p in warm]))
                asyncio.run(wait_lives(port, warm, site.jobs))
        idle_pids = {"gateway": gateway.pid, **{f"{site.backend} submitter": site.submitter.pid for site in sites}}
        idle_before = {name: (ran_seconds(pid), wakeups(pid)) for name, pid in idle_pids.items()}
        time.sleep(IDLE_WINDOW_S)
        idle = {
            name: {
                "cpu_ms_per_s": round((ran_seconds(pid) - idle_before[name][0]) * 1e3 / IDLE_WINDOW_S, 2),
                "wakeups_per_s": round((wakeups(pid) - idle_before[name][1]) / IDLE_WINDOW_S, 1),
            }
            for name, pid in idle_pids.items()
        }
        wake_ms = idle_wake_ms()

        raw_cpus: list[float] = []
        rows: list[list[object]] = []
        figures: dict[tuple[str, str, int], list[dict[str, float]]] = {}
        top_stacks: dict[str, Counter[tuple[str, ...]]] = {site.backend: Counter() for site in sites}
        profiled_figures: dict[tuple[str, str, int], dict[str, float]] = {}
        profile_phases: dict[tuple[str, str, int], Counter[str]] = {}
        # The figures come from reps with the sampler off; one more rep, sampled, tells where the CPU goes.
        plan = [(str(rep + 1), False) for rep in range(args.reps)] + ([] if args.no_profile else [("p", True)])
        for rep, (rep_name, profiled) in enumerate(plan):
            if not profiled:
                raw_count = 2000
                raw_before = time.process_time(), cpu_seconds(responder.pid)[0]
                asyncio.run(raw_ceiling(nats_server.url, raw_payload, raw_count))
                raw_cpus.append(
                    (time.process_time() - raw_before[0] + cpu_seconds(responder.pid)[0] - raw_before[1])
                    * 1e3
                    / raw_count
                )
            first = rep % len(shapes)
            for site in sites:
                for shape in shapes[first:] + shapes[:first]:
                    for in_flight in (IN_FLIGHT, 1):
                        if site.backend == "slurm":
                            count = args.slurm_pods if in_flight > 1 else args.slurm_serial_pods
                        else:
                            count = args.pods if in_flight > 1 else args.serial_pods
                        cpu, phases = window(
                            port,
                            site,
                            shape,
                            in_flight,
                            count,
                            f"r{rep_name}",
                            gateway.pid,
                            top_stacks[site.backend],
                            profiled=profiled,
                        )
                        cpu["vs_raw"] = cpu["submitter"] / raw_cpus[-1]
                        key = (site.backend, shape.name, in_flight)
                        if profiled:
                            profiled_figures[key], profile_phases[key] = cpu, phases
                        else:
                            figures.setdefault(key, []).append(cpu)
                        total = sum(phases.values()) or 1
                        rows.append(
                            [
                                rep_name,
                                site.backend,
                                shape.name,
                                in_flight,
                                f"{cpu['pods_per_s']:.1f}",
                                f"{cpu['gateway']:.2f}",
                                f"{cpu['submitter']:.2f}",
                                f"{cpu['submitter_system']:.2f}",
                                f"{cpu['wakeups']:.1f}",
                                f"{cpu['children']:.2f}",
                                f"{cpu['jobs']:.2f}",
                                f"{cpu['daemons']:.2f}" if site.daemons else "-",
                                f"{cpu['vs_raw']:.1f}",
                                f"{raw_cpus[-1]:.3f}",
                                " ".join(f"{p}={n * 100 / total:.0f}%" for p, n in phases.most_common()) or "-",
                                int(cpu["errors"]),
                            ]
                        )
        raw_cpu = median(raw_cpus)
        print(
            f"idle, over {IDLE_WINDOW_S:g} s: "
            + ", ".join(
                f"{n} {f['cpu_ms_per_s']:.2f} ms of CPU, {f['wakeups_per_s']:.1f} wake-ups per s"
                for n, f in idle.items()
            )
        )
        print(f"one wake-up of a process idle for 0.5 s: {wake_ms:.3f} ms of CPU on this machine")
        print(f"raw NATS request-reply: {raw_cpu:.3f} ms of CPU per call (client + responder), median of {args.reps}")
        if not args.no_profile:
            print(
                "rep 'p': the submitter sampled (bench/_sampler.py), for 'submitter by phase' only: sampling costs CPU"
                " of its own, so its figures are not in the medians; the phase split applies its shares to them"
            )
        print_table(
            f"whole life of a pod, shell: {args.pods} pods per window at {IN_FLIGHT} in flight, {args.serial_pods}"
            " at 1;"
            f" Slurm: {args.slurm_pods} and {args.slurm_serial_pods} on a node of {slurm_cpus} CPUs (runtime none, jobs"
            " run beside the creates; job"
            f" directories on {state_fs}); CPU in ms per pod; 'children': the shell launcher's own CPU, or the batch"
            " commands' (sbatch, squeue...); 'slurm daemons': slurmctld, slurmd and munged; 'vs raw' = the"
            " submitter's CPU in raw request-replies; 'raw' = that rep's raw request-reply CPU; 'wake-ups': how often"
            " the submitter's threads were woken, per pod",
            [
                "rep",
                "backend",
                "pod",
                "in flight",
                "pods/s",
                "gateway",
                "submitter",
                "of it kernel",
                "wake-ups",
                "children",
                "jobs",
                "slurm daemons",
                "vs raw",
                "raw",
                "submitter by phase",
                "errors",
            ],
            rows,
        )
        for backend, stacks in top_stacks.items():
            if args.stacks:
                print(f"{backend}, interlink at {IN_FLIGHT} in flight, the stacks sampled most:")
            for stack, n in stacks.most_common(args.stacks):
                print(f"{n:5d} {phase_of(list(stack)):8s} " + " > ".join(f.rsplit("/", 1)[-1] for f in stack[-7:]))
        result: dict[str, object] = {"shell": None, "slurm": None}
        for site in sites:
            result[site.backend] = summary = summarize(
                figures, profiled_figures, profile_phases, site.backend, shapes, raw_cpu
            )
            for shape in shapes:
                phases = summary[shape.name]["submitter_phase_ms_per_pod"]
                print(f"{site.backend}, {shape.name} at {IN_FLIGHT} in flight, submitter ms per pod by phase: {phases}")
        result.update(
            {
                "raw_cpu_ms_per_req": round(raw_cpu, 4),
                "idle": idle,
                "idle_wake_ms": round(wake_ms, 3),
                "in_flight": IN_FLIGHT,
                "pods": {"shell": [args.pods, args.serial_pods], "slurm": [args.slurm_pods, args.slurm_serial_pods]},
                "slurm_cpus": slurm_cpus if "slurm" in backends else None,
                "reps": args.reps,
                "state_fs": state_fs,
                "profiled": not args.no_profile,
            }
        )
        print(json.dumps(result))
        keep = False
    finally:
        responder.kill()
        stop_process(gateway)
        for site in sites:
            stop_process(site.submitter)
            site.tree.remove()
            if site.batch:
                site.batch.remove()
        if slurm is not None:
            slurm.stop()
        nats_server.stop_blocking()
        if keep:
            print(f"logs and profiles kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def window(
    port: int,
    site: Site,
    shape: Shape,
    in_flight: int,
    count: int,
    rep: str,
    gateway_pid: int,
    top_stacks: Counter[tuple[str, ...]],
    *,
    profiled: bool,
) -> tuple[dict[str, float], Counter[str]]:
    """One shape's ``count`` pods through their whole life at one site: CPU per pod, pods/s, and (``profiled``: the
    submitter sampled meanwhile) the profile's samples by phase."""
    run = f"{rep}-{in_flight}-{uuid.uuid4().hex[:6]}"
    pods = [shape.make(i, run, site.pool) for i in range(count)]
    requests = [http_request("POST", "/create", json.dumps(p).encode()) for p in pods]
    meter = CpuMeter(gateway_pid, site.submitter.pid)
    pid = site.submitter.pid
    profile = site.profile if profiled else None
    stacks = profile.read() if profile else Counter()
    if profile:
        profile.start()
    before, tree_before, sys_before, woken_before = meter.read(), site.tree.read(), system_seconds(pid), wakeups(pid)
    ran_before = {"gateway": ran_seconds(gateway_pid), "submitter": ran_seconds(pid)}
    batch_before, daemons_before = (site.batch.read() if site.batch else None), own_cpu(site.daemons)
    started = time.perf_counter()
    _, _, errors = asyncio.run(closed_loop(port, requests, in_flight))
    asyncio.run(wait_lives(port, pods, site.jobs))
    elapsed = time.perf_counter() - started
    cpu = CpuMeter.per_request_ms(before, meter.read(), count)
    for name, ran in (("gateway", ran_seconds(gateway_pid)), ("submitter", ran_seconds(pid))):
        cpu[name] = (ran - ran_before[name]) * 1e3 / count  # to the ns: 16 pods' 10 ms ticks were 0.6 ms a pod
    tree_after, batch_after = site.tree.read(), (site.batch.read() if site.batch else None)
    cpu["submitter_system"] = (system_seconds(pid) - sys_before) * 1e3 / count
    cpu["wakeups"] = (wakeups(pid) - woken_before) / count
    cpu["daemons"] = (own_cpu(site.daemons) - daemons_before) * 1e3 / count
    cpu["children"] = cpu["launcher"]
    if tree_before is not None and tree_after is not None:  # below the submitter: the launcher and the jobs, or
        below = (tree_after - tree_before) * 1e3 / count - cpu["submitter"]  # the batch commands
        if site.backend == "shell":
            cpu["jobs"] = below - cpu["launcher"]
        else:
            cpu["children"] = below
    if site.backend == "slurm":
        cpu["jobs"] = (
            (batch_after - batch_before) * 1e3 / count - cpu["daemons"]
            if batch_before is not None and batch_after is not None
            else float("nan")
        )
    stacks_after = profile.read() if profile else Counter()
    phases = Profile.phases(stacks, stacks_after)
    if shape.name == "interlink" and in_flight > 1:
        top_stacks.update(stacks_after - stacks)
    cpu["pods_per_s"] = count / elapsed
    cpu["errors"] = errors
    return cpu, phases


def summarize(
    figures: dict[tuple[str, str, int], list[dict[str, float]]],
    profiled: dict[tuple[str, str, int], dict[str, float]],
    phases: dict[tuple[str, str, int], Counter[str]],
    backend: str,
    shapes: list[Shape],
    raw_cpu: float,
) -> dict[str, dict[str, object]]:
    """Per shape, medians over the (unsampled) reps; ``_1`` = at 1 in flight. The submitter's CPU by phase is that
    median split by the sampled rep's shares; the sampled rep's own CPU is beside it (``_sampled``)."""
    out: dict[str, dict[str, object]] = {}
    for shape in shapes:
        result: dict[str, object] = {}
        for in_flight, suffix in ((IN_FLIGHT, ""), (1, "_1")):
            key = (backend, shape.name, in_flight)
            cpus = figures[key]

            def med(key: str, cpus: list[dict[str, float]] = cpus) -> float:
                return round(median([c.get(key, 0.0) for c in cpus]), 3)

            result[f"submitter_cpu_ms_per_pod{suffix}"] = med("submitter")
            result[f"submitter_system_cpu_ms_per_pod{suffix}"] = med("submitter_system")
            result[f"submitter_cpu_vs_raw{suffix}"] = round(med("submitter") / raw_cpu, 2)
            result[f"submitter_wakeups_per_pod{suffix}"] = med("wakeups")
            result[f"gateway_cpu_ms_per_pod{suffix}"] = med("gateway")
            result[f"children_cpu_ms_per_pod{suffix}"] = med("children")
            if backend == "slurm":
                result[f"slurm_daemons_cpu_ms_per_pod{suffix}"] = med("daemons")
            result[f"jobs_cpu_ms_per_pod{suffix}"] = med("jobs")
            result[f"pods_per_s{suffix}"] = round(med("pods_per_s"), 1)
            samples = phases.get(key, Counter())
            total = sum(samples.values()) or 1
            result[f"submitter_phase_ms_per_pod{suffix}"] = {
                p: round(med("submitter") * n / total, 3) for p, n in sorted(samples.items())
            }
            if key in profiled:
                result[f"submitter_cpu_ms_per_pod_sampled{suffix}"] = round(profiled[key]["submitter"], 3)
        out[shape.name] = result
    return out


if __name__ == "__main__":
    main()
