"""The pods of one Indexed Job as ONE Slurm job array, against the same pods submitted one by one (real Slurm).

By default drives the Slurm backend directly (``SlurmBackend.submit_array`` vs ``SlurmBackend.submit``): "submitter
CPU" is then this process's own CPU plus its reaped children's (sbatch, squeue), the part the backend costs. With
``--stack`` the same burst goes through nats-server, the gateway (which coalesces the Job's pods) and a submitter
process, and the CPU is the gateway's and the submitter's (``_array_stack.py`` says how).

Each measurement starts its own one-node Slurm (``tests/harness/slurm_cluster.py``) whose node declares N + 2 CPUs
(``config_overrides``), so every task can run at once; each pod asks 1 CPU and 8 MiB, its one container runs
``true`` (rendered by the real renderer, runtime ``none``). The N pods are handed over at once (a burst, as Kueue
admitting one Workload releases them): the array as one ``sbatch --array``, the singles as N ``sbatch`` with up
to 64 in flight (the submitter's default ``max_concurrency`` of RPC handlers). The clock runs from the burst to
the first poll (one ``squeue``, every 0.2 s) in which every pod is Running or Completed. Figures, medians over the
reps, with array and singles interleaved in each rep (alternating which goes first):

- batch submissions per 1,000 pods, counted from slurmctld's own log (``_slurm_rpc_submit_batch_job``);
- burst → all running, and its speedup (singles ÷ array);
- submitter CPU per pod (this process + its children), and slurmctld's CPU per pod (``/proc/<pid>/stat``).

Also, for single pods on the same kind of Slurm, submit → Running p50 and p99 when polled at the submitter's
default ``poll_interval_s``, through the backend in both modes (pods handed over one every 0.37 s, so they fall
anywhere in the poll cycle).

What bounds "burst → all running" here is slurmctld itself, not the submissions. Slurm schedules at events (a
submission, a completion) and then considers ``default_queue_depth`` jobs, each task of an array counting as one
(slurm.schedmd.com/sched_config.html; default 100): a 1,000-task array starts about 100 tasks per event, while each
single is considered at its own submission. Starting a task costs slurmctld as much as starting a single job (the
array's record is split per task as it starts, under its job lock), and ending it as much (``sdiag``'s per-RPC
times, printed per pod): a task saves only the submission's RPC. ``--queue-depth`` sets the depth for both modes
(``burst``: N + 100); a deeper queue made the array slower here, not faster (each event then starts hundreds of
tasks while completions wait for the lock: 1,000 pods through the stack were all up 30 s after the last create at
Slurm's default, 157 s at ``burst``). Both slurmctld figures are given: until all are up, and over the pods'
whole life (until none is in ``squeue``).

``--quick``: N = 100 only and fewer single-pod samples (a few minutes). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).parent.parent / "tests" / "harness"))

from _harness import cpu_seconds, median, percentile, print_table
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.core.backend import ArraySpec, BackendState, JobHandle, JobSpec
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir
from interlink_nats.submitters.settings import SubmitterSettings
from slurm_cluster import SlurmCluster

SINGLES_IN_FLIGHT = 64
POLL_S = 0.2
UP = (BackendState.RUNNING, BackendState.COMPLETED)


def indexed_job_pods(state: Path, n: int) -> list[JobSpec]:
    """N pods of one Indexed Job (its labels and annotation, ``JOB_COMPLETION_INDEX``), each in its job directory."""
    job_uid, job_name = str(uuid.uuid4()), "scan"
    specs = []
    for i in range(n):
        uid = str(uuid.uuid4())
        pod = {
            "metadata": {
                "name": f"{job_name}-{i}-x",
                "namespace": "bench",
                "uid": uid,
                "labels": {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job_name},
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
            },
            "spec": {
                "hostname": f"{job_name}-{i}",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "command": ["true"],
                        "env": [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}],
                        "resources": {"limits": {"cpu": "1", "memory": "8Mi"}},
                    }
                ],
            },
        }
        job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        job_dir = job_dir_for(state, uid)
        script = prepare_job_dir(job_dir, job.script, job.layout)
        specs.append(JobSpec(uid, job_dir, script, job.resources, tuple(job.backend_flags), "bench", f"{job_name}-{i}"))
    return specs


def own_cpu() -> float:
    """This process's CPU and its reaped children's (the sbatch and squeue it ran)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def submissions(cluster: SlurmCluster) -> int:
    return len(re.findall(r"_slurm_rpc_submit_batch_job", (cluster.dir / "log" / "slurmctld.log").read_text()))


class Slurm:
    """A fresh one-node Slurm for one measurement, its SLURM_CONF in this process's environment."""

    def __init__(self, cpus: int, queue_depth: int | None = None) -> None:
        self.cluster = SlurmCluster(cpus=cpus, queue_depth=queue_depth)

    def __enter__(self) -> SlurmCluster:
        self.cluster.start()
        os.environ["SLURM_CONF"] = str(self.cluster.conf)
        return self.cluster

    def __exit__(self, *_: object) -> None:
        self.cluster.stop()


async def until_all_up(backend: SlurmBackend, jobs: Sequence[JobHandle]) -> None:
    while True:
        seen = await backend.poll(jobs)
        if len(seen) == len(jobs) and all(o.state in UP for o in seen.values()):
            return
        bad = [o for o in seen.values() if o.state.terminal and o.state is not BackendState.COMPLETED]
        if bad:
            raise RuntimeError(f"a pod ended {bad[0]}")
        await asyncio.sleep(POLL_S)


RPC_LINE = re.compile(r"^\s+([A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.M)


def rpc_ms(cluster: SlurmCluster) -> dict[str, float]:
    """slurmctld's own account of the time its RPC handlers took, by message type (``sdiag``), in ms: where its
    work goes (a wall time under slurmctld's locks, not CPU)."""
    out = subprocess.run(["sdiag"], env=cluster.env, capture_output=True, text=True, timeout=60).stdout
    by_type = out.split("Remote Procedure Call statistics by message type", 1)[-1].split("by user", 1)[0]
    return {name: int(total) / 1000 for name, _count, total in RPC_LINE.findall(by_type)}


async def until_all_ended(cluster: SlurmCluster) -> None:
    while True:
        queue = await asyncio.to_thread(cluster.run, "squeue", "-h", "-r", "-o", "%i")
        if not queue.stdout.strip():
            return
        await asyncio.sleep(POLL_S)


async def measure(mode: str, n: int, queue_depth: int | None = None) -> dict[str, Any]:
    """One burst of N pods, as one array or as N singles, on its own Slurm."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-array-", ignore_cleanup_errors=True) as tmp,
        Slurm(n + 2, queue_depth) as cluster,
    ):
        specs = indexed_job_pods(Path(tmp) / "state", n)
        backend = SlurmBackend()
        ctld = cluster._procs[0].pid
        before_subs, before_ctld, before_cpu = submissions(cluster), cpu_seconds(ctld)[0], own_cpu()
        started = time.perf_counter()
        if mode == "array":
            array_uid = str(uuid.uuid4())
            _, ids = await backend.submit_array(
                ArraySpec(array_uid, tuple(specs), Path(tmp) / "state" / "arrays" / array_uid, name="scan")
            )
        else:
            gate = asyncio.Semaphore(SINGLES_IN_FLIGHT)

            async def one(spec: JobSpec) -> str:
                async with gate:
                    return await backend.submit(spec)

            ids = tuple(await asyncio.gather(*(one(s) for s in specs)))
        submitted = time.perf_counter()
        await until_all_up(backend, [JobHandle(s.uid, s.job_dir, i) for s, i in zip(specs, ids, strict=True)])
        done = time.perf_counter()
        ctld_up = cpu_seconds(ctld)[0]
        await until_all_ended(cluster)
        return {
            "all_up_s": done - started,
            "from_first_s": done - started,  # the burst is handed over at once: its first pod is its last
            "submit_s": submitted - started,
            "submissions": submissions(cluster) - before_subs,
            "cpu_per_pod_ms": (own_cpu() - before_cpu) / n * 1000,
            "ctld_per_pod_ms": (ctld_up - before_ctld) / n * 1000,
            "ctld_life_per_pod_ms": (cpu_seconds(ctld)[0] - before_ctld) / n * 1000,
            "rpc_ms_per_pod": {k: v / n for k, v in rpc_ms(cluster).items()},
        }


async def single_latencies(samples: int, poll_s: float) -> list[float]:
    """Submit → first poll seeing Running or Completed, with one poller at the submitter's interval."""
    with tempfile.TemporaryDirectory(prefix="bench-array-", ignore_cleanup_errors=True) as tmp, Slurm(4):
        specs = indexed_job_pods(Path(tmp) / "state", samples)
        backend = SlurmBackend()
        handed: dict[str, tuple[float, JobHandle]] = {}
        seen_at: dict[str, float] = {}

        async def feed() -> None:
            for spec in specs:
                at = time.perf_counter()
                handed[spec.uid] = (at, JobHandle(spec.uid, spec.job_dir, await backend.submit(spec)))
                await asyncio.sleep(0.37)

        feeding = asyncio.create_task(feed())
        while len(seen_at) < samples:
            await asyncio.sleep(poll_s)
            now = time.perf_counter()
            seen = await backend.poll([h for _, h in handed.values()])
            for uid, obs in seen.items():
                if uid not in seen_at and obs.state in UP:
                    seen_at[uid] = now
        await feeding
        return [seen_at[uid] - handed[uid][0] for uid in handed]


def queue_depth_for(setting: str, n: int) -> int | None:
    return None if setting == "slurm" else n + 100 if setting == "burst" else int(setting)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [100] if args.quick else [int(n) for n in args.sizes.split(",")]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for n in sizes:
            modes = ["array", "singles"] if rep % 2 == 0 else ["singles", "array"]
            for mode in modes:
                depth = queue_depth_for(args.queue_depth, n)
                if args.stack:
                    from _array_stack import measure_stack

                    measured = await asyncio.to_thread(measure_stack, mode, n, depth, args.max_payload)
                    runs.setdefault((mode, n), []).append(measured)
                else:
                    runs.setdefault((mode, n), []).append(await measure(mode, n, depth))
                print(f"rep {rep} n={n} {mode}: {runs[(mode, n)][-1]}", file=sys.stderr)

    def med(mode: str, n: int, key: str) -> float:
        return median([r[key] for r in runs[(mode, n)]])

    rows = []
    for n in sizes:
        for mode in ("array", "singles"):
            rows.append(
                [
                    n,
                    mode,
                    f"{med(mode, n, 'submissions') / n * 1000:.0f}",
                    f"{med(mode, n, 'submit_s'):.2f}",
                    f"{med(mode, n, 'all_up_s'):.2f}",
                    f"{med(mode, n, 'from_first_s'):.2f}",
                    f"{med(mode, n, 'cpu_per_pod_ms'):.2f}",
                    f"{med(mode, n, 'ctld_per_pod_ms'):.2f}",
                ]
            )
    header = ["N", "mode", "subs/1000", "submit s", "last→all up s", "first→all up s", "CPU ms/pod", "slurmctld ms/pod"]
    if not args.stack:
        header.append("slurmctld whole life ms/pod")
        for row in rows:
            row.append(f"{med(str(row[1]), int(row[0]), 'ctld_life_per_pod_ms'):.2f}")
    print_table(
        f"One Indexed Job as one Slurm array vs single pods (medians of {args.reps}; Slurm's default_queue_depth: "
        f"{args.queue_depth})",
        header,
        rows,
    )
    top_n = sizes[-1]
    rpc: dict[str, dict[str, float]] = {}
    if not args.stack:
        for mode in ("array", "singles"):
            types = sorted({t for r in runs[(mode, top_n)] for t in r["rpc_ms_per_pod"]})
            rpc[mode] = {t: median([r["rpc_ms_per_pod"].get(t, 0.0) for r in runs[(mode, top_n)]]) for t in types}
        shown = sorted(set(rpc["array"]) | set(rpc["singles"]), key=lambda t: -rpc["singles"].get(t, 0.0))
        print_table(
            f"slurmctld's RPC handling time per pod by message type at N = {top_n} (sdiag, ms, medians)",
            ["message", "array", "singles"],
            [[t, f"{rpc['array'].get(t, 0.0):.3f}", f"{rpc['singles'].get(t, 0.0):.3f}"] for t in shown],
        )
    poll_s = float(SubmitterSettings.model_fields["poll_interval_s"].default)
    lat = await single_latencies(args.samples or (12 if args.quick else 40), poll_s)
    print_table(
        f"Single pod submit → Running (poll every {poll_s:g} s)",
        ["samples", "p50 s", "p99 s"],
        [[len(lat), f"{percentile(lat, 50):.2f}", f"{percentile(lat, 99):.2f}"]],
    )
    top = sizes[-1]
    out: dict[str, Any] = {
        "bench": "array",
        "driven": "stack" if args.stack else "backend",
        "reps": args.reps,
        "largest_n": top,
        "submissions_per_1000_pods": med("array", top, "submissions") / top * 1000,
        "singles_submissions_per_1000_pods": med("singles", top, "submissions") / top * 1000,
        "all_running_speedup_1000": (
            med("singles", 1000, "all_up_s") / med("array", 1000, "all_up_s") if 1000 in sizes else None
        ),
        "cpu_per_pod_ratio": med("array", top, "cpu_per_pod_ms") / med("singles", top, "cpu_per_pod_ms"),
        "slurmctld_cpu_ratio": med("array", top, "ctld_per_pod_ms") / med("singles", top, "ctld_per_pod_ms"),
        "single_pod_running_p50_s": percentile(lat, 50),
        "single_pod_running_p99_s": percentile(lat, 99),
        "poll_interval_s": poll_s,
        "queue_depth": args.queue_depth,
        "max_payload": args.max_payload,
    }
    if not args.stack:
        out["slurmctld_whole_life_cpu_ratio"] = med("array", top, "ctld_life_per_pod_ms") / med(
            "singles", top, "ctld_life_per_pod_ms"
        )
        out["slurmctld_rpc_ms_per_pod"] = rpc
    for n in sizes:
        out[f"all_running_speedup_{n}"] = med("singles", n, "all_up_s") / med("array", n, "all_up_s")
        out[f"all_running_array_s_{n}"] = med("array", n, "all_up_s")
        out[f"all_running_singles_s_{n}"] = med("singles", n, "all_up_s")
        out[f"first_to_all_running_speedup_{n}"] = med("singles", n, "from_first_s") / med("array", n, "from_first_s")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="N = 100 only, fewer single-pod samples")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sizes", default="100,1000", help="burst sizes N, comma-separated (default 100,1000)")
    parser.add_argument("--stack", action="store_true", help="through nats-server, gateway and submitter processes")
    parser.add_argument("--samples", type=int, default=0, help="single-pod latency samples (default 40, quick 12)")
    parser.add_argument(
        "--max-payload",
        type=int,
        default=None,
        help="--stack: the nats-server's max_payload in bytes (default NATS's, 1 MiB); one array never exceeds it",
    )
    parser.add_argument(
        "--queue-depth",
        default="slurm",
        help="Slurm's SchedulerParameters default_queue_depth: 'slurm' (its default, 100), 'burst' (N + 100) or a "
        "number",
    )
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps(result))
