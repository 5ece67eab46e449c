"""One poll of 10,000 tracked jobs: backend calls per poll and time per poll, against per-pod polling.

Slurm: a fake ``squeue`` on PATH prints 10,000 lines (the batched call) or one line when asked
for one job (``-j``, the per-pod baseline that the original plugins use). Shell: 10,000 job
directories whose jobs have ended (the file-reading path). HTCondor: the condor_* STAND-INS of
tests/harness/htcondor_standin.py hold 10,000 job ads (9,000 in the queue, 1,000 that left it), so one poll
is one ``condor_q -json`` plus one ``condor_history -json``; the per-pod baseline is the old
condor-CE plugin's one ``condor_q -constraint 'JobBatchName == ...'`` per pod. For all, the whole runtime poll
(``Submitter.poll_once``: backend poll + container files + status mapping + one registry
commit) is timed on the first pass (every status changes) and on a steady pass (nothing
changes). The baseline is measured in the same run: per-pod calls are timed on a sample and
scaled to 10,000.

Steady state with 1% changed (Slurm and shell; ``poll_cpu_s``): 10,000 running jobs, of which 100
end between two polls (their container exit files written and noted in the change journal, as the
job script does; the squeue line turns COMPLETED, or the shell runner exits). Reported is the CPU
time of this process per poll (``time.process_time``: every thread, not the squeue child), median of
``--rounds`` polls (``poll_cpu_s_event_loop``: the part spent on the event loop's thread, i.e. the backend
call and what it parses; the rest is the poll's worker thread: files, status mapping and encoding, and the
registry's writer), against the same polls reading every job at every poll (``poll_cpu_s_full_scan``,
what each poll cost before the change signals: the poller's sweep set to every poll), and the CPU of
a poll where nothing changed (``poll_cpu_s_nothing_changed``). The shell's running jobs are real
processes: stand-ins that look like runners to the backend, 100 jobs each.

Everything runs on uvloop when it is installed, as the submitter does (``kernel.signals``): spawning a
command costs differently there (before stop 34, 5-8 ms more per poll than on asyncio's own loop, in
proportion to the process's heap; ``submitters/backends/proc.py``).

Prints a table; the LAST line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "harness"))  # the condor_* stand-ins

import htcondor_standin as standin
from _harness import run_on_uvloop
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.shell.processes import CLAIM, EXIT_FILE, PID_FILE, RUNNER_NAME
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import Backend, JobHandle
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.state.registry import Registry

FAKE_SQUEUE = """#!/bin/sh
# Fake squeue for the benchmark: the whole table, or one line for `-j <id>` (per-pod polling).
for a in "$@"; do
  if [ "$prev" = "-j" ]; then grep "^$a|" "{table}"; exit 0; fi
  prev=$a
done
cat "{table}"
"""


def make_jobs(root: Path, n: int, *, shell_done: bool) -> list[tuple[str, Path, str]]:
    jobs = []
    for i in range(n):
        uid = f"{i:08d}-0000-4000-8000-000000000000"
        job_dir = root / "jobs" / uid
        (job_dir / layout.CONTAINERS_DIR).mkdir(parents=True)
        (job_dir / layout.SCRIPT_NAME).write_text("#!/bin/bash\ntrue\n")
        layout.started_path(job_dir, "main").write_text("1800000000\n")
        if shell_done:
            (job_dir / CLAIM).mkdir()
            (job_dir / PID_FILE).write_text("1\n")
            (job_dir / EXIT_FILE).write_text("0\n")
        jobs.append((uid, job_dir, str(100000 + i)))
    # Make the container dirs "settled" so the mtime cache is allowed to work, as in a real steady state.
    old = time.time() - 60
    for _, job_dir, _ in jobs:
        os.utime(job_dir / layout.CONTAINERS_DIR, (old, old))
    return jobs


async def runtime_for(root: Path, backend: Backend, jobs: list[tuple[str, Path, str]]) -> Submitter:
    settings = SubmitterSettings.load(None, pool="bench", backend=backend.name, state_dir=root)
    sub = Submitter(settings, backend=backend)
    sub.registry = await Registry.open(root / "registry.sqlite3")
    spec = bytes(pb.JobScript(containers=["main"]))
    for uid, job_dir, job_id in jobs:
        await sub.registry.claim(
            uid=uid,
            namespace="bench",
            name=uid[:8],
            owner=sub.instance_id,
            job_dir=job_dir,
            init_containers=[],
            containers=["main"],
            spec=spec,
            status=b"",
        )
        ids = {"slurm": job_id, "htcondor": f"{job_id}.0"}
        await sub.registry.mark_submitted(uid, ids.get(backend.name, uid))
    for row in await sub.registry.live(sub.instance_id):
        sub.track(row)
    return sub


async def time_polls(sub: Submitter) -> tuple[float, float, int, int]:
    """(first poll s, steady poll s, backend calls in the steady poll, statuses changed in the first)."""
    first = await sub.poll_once()
    # Two warm-up polls: after a change (here, the first poll's) a job's logs are watched for two polls.
    steady = [await sub.poll_once() for _ in range(2 + 3)][2:]
    return first.seconds, statistics.median(s.seconds for s in steady), steady[-1].backend_calls, first.changed


CHANGED_FRACTION = 100
"""1 job in this many changes between two polls of the 1%-changed passes."""


async def cpu_per_poll(sub: Submitter, change: object, batches: list[list[int]]) -> list[tuple[float, float]]:
    """CPU seconds of this process for each poll after ``change(batch)`` ended that batch's jobs, and of its
    event loop's thread alone (the backend call and what it parses; the rest is the poll's worker thread,
    which reads the files and maps and encodes the statuses, and the registry's writer)."""
    out = []
    for batch in batches:
        await change(batch)  # type: ignore[operator]
        c0, t0 = time.process_time(), time.thread_time()
        stats = await sub.poll_once()
        out.append((time.process_time() - c0, time.thread_time() - t0))
        assert stats.changed == len(batch), (stats.changed, len(batch))
    return out


async def cpu_figures(sub: Submitter, n: int, change: object, rounds: int) -> dict[str, float | int]:
    """The 1%-changed passes: incremental polls, then the same with every job read at every poll."""
    per = n // CHANGED_FRACTION
    batches = [list(range(i * per, (i + 1) * per)) for i in range(2 * rounds)]
    for _ in range(3):  # settle: the first poll's changes keep logs watched for two polls
        await sub.poll_once()
    quiet = []
    for _ in range(rounds):
        c0 = time.process_time()
        await sub.poll_once()
        quiet.append(time.process_time() - c0)
    fast = await cpu_per_poll(sub, change, batches[:rounds])
    sub.poller.sweep_polls, sub.poller.sweep_max = 1, n  # the baseline: every job read at every poll
    full = await cpu_per_poll(sub, change, batches[rounds:])
    return {
        "poll_cpu_s": round(statistics.median(c for c, _ in fast), 4),
        "poll_cpu_s_event_loop": round(statistics.median(t for _, t in fast), 4),
        "poll_cpu_s_full_scan": round(statistics.median(c for c, _ in full), 4),
        "poll_cpu_s_nothing_changed": round(statistics.median(quiet), 4),
        "changed_per_poll": per,
    }


def finish(jobs: list[tuple[str, Path, str]], batch: list[int]) -> None:
    """What a job script does as its containers end: the exit file, then a line in the change journal."""
    lines = []
    for i in batch:
        uid, job_dir, _ = jobs[i]
        layout.exit_path(job_dir, "main").write_text("0\n")
        lines.append(uid + "\n")
    with open(layout.changes_path(jobs[0][1]), "a") as journal:
        journal.write("".join(lines))


async def batch_figures(
    sub: Submitter,
    n: int,
    backend_calls: int,
    backend_s: float,
    per_pod_s: float,
    more: Callable[[], Awaitable[dict[str, float | int]]] | None = None,
) -> dict[str, float | int]:
    """A batch backend's figures: its one poll against per-pod calls, then the runtime polling all ``n``
    jobs; ``more`` adds figures measured on the same runtime after those polls."""
    first_s, steady_s, steady_calls, changed = await time_polls(sub)
    assert changed == n and sub.registry is not None
    extra = await more() if more is not None else {}
    await sub.registry.close()
    return {
        "backend_calls_per_poll": backend_calls,
        "backend_poll_s": round(backend_s, 4),
        "per_pod_calls": n,
        "per_pod_s": round(per_pod_s, 3),
        "speedup_vs_per_pod": round(per_pod_s / backend_s, 1),
        "runtime_first_poll_s": round(first_s, 3),
        "runtime_steady_poll_s": round(steady_s, 4),
        "runtime_steady_backend_calls": steady_calls,
        **extra,
    }


def squeue_line(uid: str, jid: str, *, done: bool) -> str:
    if done:
        return f"{jid}|{uid}|COMPLETED|None|0|2026-11-25T23:53:00|2026-11-26T00:13:00\n"
    return f"{jid}|{uid}|RUNNING|None|0|2026-11-25T23:53:00|N/A\n"


async def bench_slurm(root: Path, n: int, sample: int, rounds: int) -> dict[str, float | int]:
    jobs = make_jobs(root, n, shell_done=False)
    table = root / "squeue.txt"
    lines = [squeue_line(uid, jid, done=False) for uid, _, jid in jobs]
    table.write_text("".join(lines))
    bindir = root / "bin"
    bindir.mkdir()
    fake = bindir / "squeue"
    fake.write_text(FAKE_SQUEUE.replace("{table}", str(table)))
    fake.chmod(0o755)
    os.environ["PATH"] = f"{bindir}:{os.environ['PATH']}"
    backend = SlurmBackend(SlurmConfig(squeue=str(fake)))
    handles = [JobHandle(uid, d, jid) for uid, d, jid in jobs]

    calls0 = backend.calls
    t0 = time.perf_counter()
    observed = await backend.poll(handles)
    backend_s = time.perf_counter() - t0
    assert len(observed) == n, len(observed)
    backend_calls = backend.calls - calls0

    # Per-pod baseline: one `squeue -j <id>` per job, timed on a sample, scaled to n.
    t0 = time.perf_counter()
    for _, _, jid in jobs[:sample]:
        await run_command([str(fake), "-h", "-j", jid, "-O", "JobID:|,State:|"])
    per_pod_s = (time.perf_counter() - t0) / sample * n

    sub = await runtime_for(root, backend, jobs)

    async def change(batch: list[int]) -> None:
        finish(jobs, batch)
        for i in batch:
            uid, _, jid = jobs[i]
            lines[i] = squeue_line(uid, jid, done=True)
        table.write_text("".join(lines))

    return await batch_figures(
        sub, n, backend_calls, backend_s, per_pod_s, more=lambda: cpu_figures(sub, n, change, rounds)
    )


async def bench_shell_running(root: Path, n: int, rounds: int) -> dict[str, float | int]:
    """10,000 running shell jobs, found by their pid files as after a restart, then 1% ending per poll."""
    jobs = make_jobs(root, n, shell_done=False)
    # Each stand-in process's command line names its jobs, as a runner's names its one job; one
    # stand-in ending is 1% of the jobs ending.
    per = n // CHANGED_FRACTION
    standins: list[asyncio.subprocess.Process] = []
    for start in range(0, n, per):
        group = jobs[start : start + per]
        argv = ["bash", "-c", "read -r _", RUNNER_NAME, *(str(d) for _, d, _ in group)]
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE)
        standins.append(proc)
        for _, job_dir, _ in group:
            (job_dir / CLAIM).mkdir()
            (job_dir / PID_FILE).write_text(f"{proc.pid}\n")
    try:
        sub = await runtime_for(root, ShellBackend(), jobs)
        first_s, steady_s, _, changed = await time_polls(sub)
        assert changed == n and sub.registry is not None

        async def change(batch: list[int]) -> None:
            # The jobs of one stand-in end: container exit files and journal lines, the runner's
            # exit file, then the runner exits (its pidfd wakes the backend).
            assert len(batch) == per and batch[0] % per == 0
            finish(jobs, batch)
            for i in batch:
                (jobs[i][1] / EXIT_FILE).write_text("0\n")
            proc = standins[batch[0] // per]
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()
            await asyncio.sleep(0.1)  # the event loop runs the pidfd callbacks (already readable)

        cpu = await cpu_figures(sub, n, change, rounds)
        await sub.registry.close()
        return {"runtime_first_poll_s": round(first_s, 3), "runtime_steady_poll_s": round(steady_s, 4), **cpu}
    finally:
        for proc in standins:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def bench_shell(root: Path, n: int) -> dict[str, float | int]:
    jobs = make_jobs(root, n, shell_done=True)
    backend = ShellBackend()
    handles = [JobHandle(uid, d, uid) for uid, d, _ in jobs]
    t0 = time.perf_counter()
    observed = await backend.poll(handles)
    backend_s = time.perf_counter() - t0
    assert len(observed) == n
    sub = await runtime_for(root, ShellBackend(), jobs)
    first_s, _, _, changed = await time_polls(sub)
    assert changed == n
    await sub.registry.close()  # type: ignore[union-attr]
    return {
        "backend_calls_per_poll": backend.calls,
        "backend_poll_s": round(backend_s, 4),
        "runtime_first_poll_s": round(first_s, 3),
    }


async def bench_htcondor(root: Path, n: int, sample: int) -> dict[str, float | int]:
    jobs = make_jobs(root, n, shell_done=False)
    ads = []
    for i, (uid, _, jid) in enumerate(jobs):
        ad: dict[str, object] = {"ClusterId": int(jid), "ProcId": 0, hp.POOL_ATTR: "bench", hp.POD_UID_ATTR: uid}
        ad.update({"JobBatchName": uid, "JobStatus": 2, "JobCurrentStartDate": 1_800_000_000})
        if i >= n * 9 // 10:
            ad.update(JobStatus=4, ExitCode=0, ExitBySignal=False, CompletionDate=1_800_000_100)
        ads.append(ad)
    cut = n * 9 // 10
    condor_dir = root / "condor"
    standin.seed(condor_dir, queued=ads[:cut], finished=ads[cut:])
    for key, value in standin.install(root / "bin", condor_dir).items():
        os.environ[key] = value
    backend = HTCondorBackend(HTCondorConfig(), pool="bench")
    handles = [JobHandle(uid, d, f"{jid}.0") for uid, d, jid in jobs]
    t0 = time.perf_counter()
    observed = await backend.poll(handles)
    backend_s = time.perf_counter() - t0
    assert len(observed) == n, len(observed)
    backend_calls = backend.calls

    # Per-pod baseline (the condor-CE plugin): one condor_q per pod, timed on a sample, scaled to n.
    attrs = ",".join(hp.QUERY_ATTRS)
    t0 = time.perf_counter()
    for uid, _, _ in jobs[:sample]:
        await run_command(["condor_q", "-json", "-attributes", attrs, "-constraint", f'JobBatchName == "{uid}"'])
    per_pod_s = (time.perf_counter() - t0) / sample * n

    sub = await runtime_for(root, HTCondorBackend(HTCondorConfig(), pool="bench"), jobs)
    return await batch_figures(sub, n, backend_calls, backend_s, per_pod_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=100, help="per-pod calls actually timed for the baseline")
    parser.add_argument("--rounds", type=int, default=5, help="polls timed per 1%%-changed pass (median)")
    parser.add_argument("--skip-htcondor", action="store_true", help="only Slurm and shell (P7's figures)")
    parser.add_argument(
        "--condor-sample", type=int, default=5, help="per-pod condor_q calls timed (each reads all ads)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-poll-") as tmp:
        slurm = run_on_uvloop(bench_slurm(Path(tmp) / "slurm", args.jobs, args.sample, args.rounds))
        shell = run_on_uvloop(bench_shell(Path(tmp) / "shell", args.jobs))
        shell.update(run_on_uvloop(bench_shell_running(Path(tmp) / "shell-running", args.jobs, args.rounds)))
        htcondor: dict[str, float | int] = {}
        if not args.skip_htcondor:
            htcondor = run_on_uvloop(bench_htcondor(Path(tmp) / "htcondor", args.jobs, args.condor_sample))
    print(f"\nOne poll of {args.jobs:,} tracked jobs (2 shared cores; per-pod baseline timed on {args.sample} calls)")
    rows = [
        ("slurm: batched squeue (backend only)", slurm["backend_calls_per_poll"], f"{slurm['backend_poll_s']:.3f}"),
        ("slurm: per-pod squeue -j (baseline)", slurm["per_pod_calls"], f"{slurm['per_pod_s']:.2f}"),
        ("slurm: runtime poll, every status changes", 1, f"{slurm['runtime_first_poll_s']:.3f}"),
        ("slurm: runtime poll, steady", slurm["runtime_steady_backend_calls"], f"{slurm['runtime_steady_poll_s']:.3f}"),
        ("shell: backend poll (files + /proc)", shell["backend_calls_per_poll"], f"{shell['backend_poll_s']:.3f}"),
        ("shell: runtime poll, every job finishes", 0, f"{shell['runtime_first_poll_s']:.3f}"),
        (f"shell: runtime poll, steady ({args.jobs:,} running)", 0, f"{shell['runtime_steady_poll_s']:.3f}"),
    ]
    if htcondor:
        rows += [
            (
                "htcondor: condor_q + condor_history (stand-ins)",
                htcondor["backend_calls_per_poll"],
                f"{htcondor['backend_poll_s']:.3f}",
            ),
            (
                "htcondor: per-pod condor_q (old plugin, baseline)",
                htcondor["per_pod_calls"],
                f"{htcondor['per_pod_s']:.2f}",
            ),
            ("htcondor: runtime poll, every status changes", 2, f"{htcondor['runtime_first_poll_s']:.3f}"),
            (
                "htcondor: runtime poll, steady",
                htcondor["runtime_steady_backend_calls"],
                f"{htcondor['runtime_steady_poll_s']:.3f}",
            ),
        ]
    w = max(len(r[0]) for r in rows)
    print(f"{'case'.ljust(w)}  calls/poll  seconds")
    for name, calls, secs in rows:
        print(f"{name.ljust(w)}  {str(calls).rjust(10)}  {secs.rjust(7)}")
    print(f"batched vs per-pod squeue: {slurm['speedup_vs_per_pod']}x faster, {slurm['per_pod_calls']}x fewer calls")
    if htcondor:
        print(f"batched vs per-pod condor_q: {htcondor['speedup_vs_per_pod']}x faster, {args.jobs // 2}x fewer calls")
    print(f"\nCPU of this process per poll, {args.jobs:,} running jobs (median of {args.rounds} polls)")
    print(
        f"{'backend':8}  {'1% changed':>10}  {'of it, event loop':>17}  {'every job read (baseline)':>25}"
        f"  {'nothing changed':>15}"
    )
    for name, fig in (("slurm", slurm), ("shell", shell)):
        print(
            f"{name.ljust(8)}  {fig['poll_cpu_s']:>10.4f}  {fig['poll_cpu_s_event_loop']:>17.4f}"
            f"  {fig['poll_cpu_s_full_scan']:>25.4f}  {fig['poll_cpu_s_nothing_changed']:>15.4f}"
        )
    print(json.dumps({"bench": "poll", "jobs": args.jobs, "slurm": slurm, "shell": shell, "htcondor": htcondor}))


if __name__ == "__main__":
    sys.exit(main())
