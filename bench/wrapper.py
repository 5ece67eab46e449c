"""The rendered job script's own overhead: CPU and process spawns per job when the containers run ``true``.

Each job is what a submitter runs: a job directory written by the submitter's own code, then
``bash script.sh`` with runtime ``none`` (the container's command runs on the host), for a pod of two
containers with 15 env vars each, an emptyDir and a configMap volume (the pod of the README's benchmark table).

- CPU per job: ``getrusage(RUSAGE_CHILDREN)`` deltas around the jobs (bash and everything it forks).
- Baseline in the same run: a bare bash script that only runs the two containers' commands
  (``/bin/true`` twice, in the background, then ``wait``), so ``wrapper_cpu_ms`` is what the
  rendered script adds over running the containers at all.
- Spawns: one job under ``strace -f`` (when present), counting fork/clone calls up to the first
  container's ``execve`` and in all (the baseline's own spawns are subtracted in the last count).
- The submitter's side: ``prepare_job_dir`` (which makes the layout the script declares, so that the
  script does not fork for it) and ``remove_ended_layout`` once the job ended (so that the script forks no
  ``rm``), in this process's CPU time, per job, against the bare script's ("submitter CPU ms";
  ``prepare_cpu_ms`` in the JSON in earlier versions, when it held ``prepare_job_dir`` alone).

Probes: a container sleeping ``--probe-seconds`` with one readiness probe (period 1 s), against
the same container without it: the probe loop's CPU per period, per handler (exec ``true``, tcpSocket).

Goals (P8): wrapper CPU <= 3 ms per job over the bare script, <= 2 spawns before the first
container starts (the first goals were 10 ms and 5).

The job directory's file system is named in the table and the JSON (``state_fs``): on ext4 without a
journal, creating inodes right after many were deleted nearby (``bench/poll.py`` just before, in
``make bench``) costs several times more, in the script's own CPU as in ``prepare_job_dir``'s (measured:
10.7 ms per job and 4.7 ms of prepare, against 4.7 and 0.39 ms run alone). ``--state-root /dev/shm``
takes the file system out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import file_system_of, median, print_table
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.jobdirs.files import prepare_job_dir, remove_ended_layout

TRUE = shutil.which("true") or "/bin/true"
BASELINE_SCRIPT = f"#!/bin/bash\n{TRUE} &\n{TRUE} &\nwait\n"


def bench_pod() -> dict[str, Any]:
    env = [{"name": f"VAR_{i}", "value": f"value-{i} with 'quotes'"} for i in range(15)]
    mounts = [{"name": "cfg", "mountPath": "/etc/app"}, {"name": "scratch", "mountPath": "/scratch"}]

    def container(name: str) -> dict[str, Any]:
        return {"name": name, "image": "busybox", "command": [TRUE], "env": env, "volumeMounts": mounts}

    config_map = {"metadata": {"name": "app-config"}, "data": {"app.yaml": "a: 1\n", "extra.txt": "x\n"}}
    return {
        "pod": {
            "metadata": {"name": "wrapper", "namespace": "bench", "uid": "00000000-0000-4000-8000-00000000beef"},
            "spec": {
                "containers": [container("main"), container("sidecar")],
                "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}, {"name": "scratch", "emptyDir": {}}],
            },
        },
        "container": [
            {"name": name, "configMaps": [config_map], "secrets": None, "projectedvolumemaps": None}
            for name in ("main", "sidecar")
        ],
    }


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_job(job_dir: Path, job: pb.JobScript, prefix: list[str] | None = None) -> float:
    """Run one job as a submitter would; returns the CPU seconds the submitter's side took here: making the
    layout (``prepare_job_dir``) and removing it once the job ended (``remove_ended_layout``: the script
    leaves the layout the submitter made to the submitter)."""
    shutil.rmtree(job_dir, ignore_errors=True)
    started = time.process_time()
    prepare_job_dir(job_dir, job.script, job.layout)
    prepare = time.process_time() - started
    env = {**os.environ, layout.JOB_DIR_ENV: str(job_dir)}
    proc = subprocess.run(
        [*(prefix or []), "bash", layout.SCRIPT_NAME], cwd=job_dir, env=env, stdout=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed ({proc.returncode}); see {job_dir}")
    started = time.process_time()
    remove_ended_layout(job_dir)
    return prepare + time.process_time() - started


def cpu_per_job_ms(job_dir: Path, job: pb.JobScript, jobs: int) -> tuple[float, float, float]:
    """(CPU ms per job, wall ms per job, the submitter's CPU ms per job) over ``jobs`` sequential jobs."""
    started_cpu, started = children_cpu_s(), time.perf_counter()
    prepare = 0.0
    for _ in range(jobs):
        prepare += run_job(job_dir, job)
    cpu, wall = (children_cpu_s() - started_cpu) * 1e3 / jobs, (time.perf_counter() - started) * 1e3 / jobs
    return cpu, wall, prepare * 1e3 / jobs


def spawn_counts(job_dir: Path, job: pb.JobScript, tmp: Path) -> tuple[int, int] | None:
    """(spawns before the first container's execve, spawns in all) of one job, from strace; None without it."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    trace = tmp / "strace.txt"
    run_job(job_dir, job, [strace, "-f", "-qq", "-e", "trace=fork,vfork,clone,clone3,execve", "-o", str(trace)])
    before_first, total, seen_container = 0, 0, False
    for line in trace.read_text().splitlines():
        call = line.split(None, 1)[1] if " " in line else line
        if call.startswith(("clone(", "clone3(", "fork(", "vfork(")) and "CLONE_THREAD" not in call:
            total += 1
            if not seen_container:
                before_first += 1
        elif call.startswith("execve(") and f'("{TRUE}"' in call and "= 0" in call:
            seen_container = True
    return before_first, total


def probe_cpu_per_period_ms(tmp: Path, seconds: int) -> dict[str, float]:
    """CPU ms one readiness probe costs per period (1 s), by handler: a container sleeping ``seconds`` with
    the probe, against the same container without it (the probe loop's cost per probe period)."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    probes: dict[str, dict[str, Any] | None] = {
        "none": None,
        "exec": {"exec": {"command": [TRUE]}},
        "tcpSocket": {"tcpSocket": {"port": 9}},
    }
    cpu: dict[str, float] = {}
    for name, handler in probes.items():
        c: dict[str, Any] = {"name": "main", "image": "busybox", "command": [sleep, str(seconds)]}
        if handler is not None:
            c["readinessProbe"] = {**handler, "periodSeconds": 1, "failureThreshold": 1}
        pod = {"metadata": {"name": "probe", "namespace": "bench", "uid": f"probe-{name}"}, "spec": {"containers": [c]}}
        job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        started = children_cpu_s()
        run_job(tmp / "jobs" / f"probe-{name}", job)
        cpu[name] = (children_cpu_s() - started) * 1e3
    return {name: round((cpu[name] - cpu["none"]) / seconds, 3) for name in probes if name != "none"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=50, help="jobs per rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--probe-seconds", type=int, default=10, help="how long the probe cost is measured")
    parser.add_argument(
        "--state-root", type=Path, default=None, help="where the job directory goes (default: the temp dir)"
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-wrapper-", dir=args.state_root))
    state_fs = file_system_of(tmp)
    job_dir = tmp / "jobs" / "00000000-0000-4000-8000-00000000beef"
    job = render_job(bench_pod(), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    script = job.script
    try:
        run_job(job_dir, job)  # warm the page cache
        rows, wrapper, baseline, prepare, base_prepare = [], [], [], [], []
        for rep in range(args.reps):
            cpu, wall, prep = cpu_per_job_ms(job_dir, job, args.jobs)
            base_cpu, base_wall, base_prep = cpu_per_job_ms(job_dir, pb.JobScript(script=BASELINE_SCRIPT), args.jobs)
            wrapper.append(cpu)
            baseline.append(base_cpu)
            prepare.append(prep)
            base_prepare.append(base_prep)
            rows.append(
                [
                    rep + 1,
                    f"{cpu:.1f}",
                    f"{base_cpu:.1f}",
                    f"{cpu - base_cpu:.1f}",
                    f"{wall:.1f}",
                    f"{base_wall:.1f}",
                    f"{prep:.3f}",
                    f"{base_prep:.3f}",
                ]
            )
        spawns = spawn_counts(job_dir, job, tmp)
        base_spawns = spawn_counts(job_dir, pb.JobScript(script=BASELINE_SCRIPT), tmp)
        print_table(
            f"rendered wrapper, runtime none, 2 containers running {TRUE}, {args.jobs} sequential jobs per rep "
            f"(job directory on {state_fs})",
            [
                "rep",
                "job CPU ms",
                "baseline CPU ms",
                "wrapper CPU ms",
                "job wall ms",
                "baseline wall ms",
                "submitter CPU ms",
                "baseline submitter CPU ms",
            ],
            rows,
        )
        if spawns is not None and base_spawns is not None:
            print(
                f"spawns per job: {spawns[0]} before the first container, {spawns[1]} in all "
                f"(baseline script: {base_spawns[0]} before, {base_spawns[1]} in all)"
            )
        job_cpu, base_cpu = median(wrapper), median(baseline)
        figures: dict[str, Any] = {
            "wrapper_cpu_ms": round(job_cpu - base_cpu, 2),
            "job_cpu_ms": round(job_cpu, 2),
            "baseline_cpu_ms": round(base_cpu, 2),
            "spawns_before_first_container": spawns[0] if spawns else None,
            "spawns_total": spawns[1] if spawns else None,
            "wrapper_spawns": spawns[1] - base_spawns[1] if spawns and base_spawns else None,
            "script_bytes": len(script.encode()),
            "submitter_cpu_ms": round(median(prepare), 3),
            "baseline_submitter_cpu_ms": round(median(base_prepare), 3),
            "goal_wrapper_cpu_ms": 3,
            "goal_spawns_before_first_container": 2,
            "jobs": args.jobs,
            "reps": args.reps,
            "state_fs": state_fs,
        }
        probe_cost = probe_cpu_per_period_ms(tmp, args.probe_seconds)
        print(
            "one readiness probe per container, CPU ms per probe period (1 s): "
            + ", ".join(f"{name} {ms}" for name, ms in probe_cost.items())
        )
        figures["probe_cpu_ms_per_period"] = probe_cost
        print(json.dumps(figures))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
