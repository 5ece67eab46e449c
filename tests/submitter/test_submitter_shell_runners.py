"""The shell submitter's runners end to end: replicas sharing a registry, claims, slots, polls.

Replicas answer for each other and adopt a stopped one's jobs; a claim whose runner never started is lost
within two polls; a full slot frees when its runner ends (watched by pidfd, or adopted); the incremental
answers add up to the full poll. Real nats-server, real RPC, real bash.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from shell_submitter import nc as nc
from shell_submitter import pool as pool
from shell_submitter import uid


async def test_replicas_share_the_registry_answer_for_each_other_and_adopt_a_stopped_ones_jobs(
    tmp_path: Path, nats_url: str, nc: nats.NATS, pool: str
) -> None:
    state = tmp_path / "state"
    a = Submitter(settings_for(state, nats_url, pool=pool, instance_id="replica-a"))
    b = Submitter(settings_for(state, nats_url, pool=pool, instance_id="replica-b"))
    await a.start()
    await b.start()
    try:
        client = submitter_client(nc, pool)
        # The queue group picks a replica at random for each call: 8 calls all went to one replica about
        # once in 128 runs, so submit until each owns some (64 calls to one replica: once in 2**63).
        uids: list[str] = []
        while len(uids) < 8 or not (a.tracked and b.tracked):
            assert len(uids) < 64, f"the queue group never reached one replica: {a.tracked=} {b.tracked=}"
            uids.append(uid())
            await client.submit(pb.SubmitRequest(job=pod_job(uids[-1], {"main": "sleep 1.5"})))
        assert a.tracked + b.tracked == len(uids), "each job is owned by exactly one replica"
        # Either replica answers for every job, whoever owns it.
        for replica in (a, b):
            resp = await replica.queries.get_status(uids)
            assert not resp.unknown_pod_uids
            assert len(resp.statuses) == len(uids)
        victim = uids[0]
        assert (await b.submissions.cancel(victim)).found
        await a.stop()  # its lock goes: b adopts its jobs on its next adoption check

        async def all_done() -> bool:
            resp = await b.queries.get_status(uids[1:])
            return all(s.state == pb.JobState.SUCCEEDED for s in resp.statuses)

        await wait_for(all_done, what="b to finish a's jobs")
        assert (await b.queries.get_status([victim])).statuses[0].state == pb.JobState.CANCELLED
    finally:
        await a.stop()
        await b.stop()


async def test_a_claim_whose_runner_never_started_is_lost_within_two_polls_saying_so(tmp_path: Path) -> None:
    """The launcher killed between claim and start (e.g. the submitter's container restarted with
    everything in it) leaves a claim and no runner: two polls, not a minute, and the reason says so.
    A launcher that still lives may yet start it, so that claim is not given up."""
    from interlink_nats.submitters.backends.shell import backend as shell
    from interlink_nats.submitters.backends.shell import processes as shell_processes
    from interlink_nats.submitters.core.backend import BackendState, JobHandle
    from interlink_nats.submitters.core.status import JobMeta, map_status

    job_dir = tmp_path / "job"
    (job_dir / shell_processes.CLAIM).mkdir(parents=True)  # what the launcher's mkdir left behind
    backend = shell.ShellBackend(max_concurrent=1)
    handle = JobHandle("u1", job_dir, "u1")
    await backend.reconcile([handle])  # a restarted submitter finds the claim and tracks the job
    first = (await backend.poll([handle]))["u1"]
    assert first.state is BackendState.RUNNING, "a runner may be between fork and its pid file"
    await asyncio.sleep(shell_processes.NEVER_STARTED_AFTER)  # the next poll interval (5 s by default) is longer
    second = (await backend.poll([handle]))["u1"]
    assert second.state is BackendState.GONE
    meta = JobMeta("u1", "default", "p", "pool", "u1", (), ("main",), "shell")
    status = map_status(meta, second, {}, now=0.0)
    assert status.state == pb.JobState.LOST
    assert "never started" in status.message
    assert "never started" in status.containers[0].message

    # A claim whose launcher still lives (working through a backlog after its submitter died) is starting.
    busy = tmp_path / "busy"
    (busy / shell_processes.CLAIM).mkdir(parents=True)
    launcher = await asyncio.create_subprocess_exec("bash", "-c", "sleep 30; true", shell_processes.LAUNCHER_NAME)
    try:
        (busy / shell_processes.CLAIM_LAUNCHER).write_text(f"{launcher.pid}\n")
        slow = JobHandle("u2", busy, "u2")
        await backend.reconcile([slow])
        for _ in range(2):
            assert (await backend.poll([slow]))["u2"].state is BackendState.RUNNING
            await asyncio.sleep(shell_processes.NEVER_STARTED_AFTER)
    finally:
        launcher.kill()
        await launcher.wait()
    await backend.close()


async def start_runner(job_dir: Path, body: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """A runner as a previous submitter's launcher left it, which this backend then adopts.

    The runner writes its own pid file once its script runs, and this waits for it: right after
    ``create_subprocess_exec`` returns, the child may not have finished its ``execve`` (the parent is
    woken when close-on-exec files close, before the new command line is in place), so
    ``/proc/<pid>/cmdline`` can still be empty and the backend would not recognise its runner. Under load
    that made these tests see adopted runners as GONE, or adopt them one poll late.
    """
    from interlink_nats.submitters.backends.shell import processes as shell_processes
    from interlink_nats.submitters.testing import wait_for

    pid_file = job_dir / shell_processes.PID_FILE
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        f'echo $$ > "$1/{shell_processes.PID_FILE}"; {body}',
        shell_processes.RUNNER_NAME,
        str(job_dir),
        *args,
        **kwargs,
    )

    async def written() -> bool:
        return pid_file.exists() and pid_file.read_text().strip() == str(proc.pid)

    await wait_for(written, timeout=60, interval=0.01, what=f"runner {proc.pid} to write {pid_file}")
    return proc


async def test_a_full_slot_frees_when_its_runner_ends_watched_by_pidfd_or_adopted(tmp_path: Path) -> None:
    """One slot: a queued job starts once the runner before it ends, whether a pidfd watches that runner
    (launched by this backend) or not (adopted after a restart: found again by the reap fallback)."""
    from interlink_nats.submitters.backends.shell import backend as shell
    from interlink_nats.submitters.backends.shell import processes as shell_processes
    from interlink_nats.submitters.core.backend import JobHandle, JobSpec
    from interlink_nats.submitters.jobdirs import files as jobfiles
    from interlink_nats.submitters.testing import wait_for

    def spec(uid: str, script: str) -> JobSpec:
        job_dir = tmp_path / uid
        return JobSpec(uid, job_dir, jobfiles.prepare_job_dir(job_dir, script))

    async def started(uid: str) -> bool:
        return (tmp_path / uid / shell_processes.PID_FILE).exists()

    gate, gate_a = tmp_path / "gate", tmp_path / "gate-a"
    backend = shell.ShellBackend(max_concurrent=1)
    await backend.start()
    try:
        # Adopted: a runner this backend did not launch (a previous submitter's), still running.
        adopted_dir = tmp_path / "adopted"
        (adopted_dir / shell_processes.CLAIM).mkdir(parents=True)
        runner = await start_runner(adopted_dir, 'while [ ! -e "$2" ]; do sleep 0.05; done', str(gate))
        await backend.reconcile([JobHandle("adopted", adopted_dir)])
        await backend.submit(spec("a", f'while [ ! -e "{gate_a}" ]; do sleep 0.05; done\n'))
        await backend.submit(spec("b", "true\n"))
        assert not await started("a"), "the adopted runner holds the only slot"
        gate.touch()
        await runner.wait()
        await wait_for(lambda: started("a"), timeout=30, what="a to start after the adopted runner ended")
        assert not await started("b"), "a (watched by its pidfd) holds the slot now"
        gate_a.touch()
        await wait_for(lambda: started("b"), timeout=30, what="b to start after a ended")
    finally:
        gate.touch()
        gate_a.touch()
        await backend.close()


async def test_the_incremental_answers_add_up_to_the_full_poll(tmp_path: Path) -> None:
    """``poll_changes`` leaves out runners a pidfd watches until it fires, and what it answers adds up to
    ``poll``'s answer at every step: a runner ending, a job added, one removed, one that vanished."""
    from interlink_nats.submitters.backends.shell import backend as shell
    from interlink_nats.submitters.backends.shell import processes as shell_processes
    from interlink_nats.submitters.core.backend import GONE, BackendState, JobHandle, Observation, ReportsChanges

    backend = shell.ShellBackend()
    assert isinstance(backend, ReportsChanges)
    runners: dict[str, asyncio.subprocess.Process] = {}
    tracked: dict[str, JobHandle] = {}
    known: dict[str, Observation] = {}

    async def job(name: str) -> JobHandle:
        """A running job as after a restart: claim, pid file and a live runner naming its directory."""
        job_dir = tmp_path / name
        (job_dir / shell_processes.CLAIM).mkdir(parents=True)
        runners[name] = await start_runner(job_dir, "read -r _", stdin=asyncio.subprocess.PIPE)
        return JobHandle(name, job_dir, name)

    async def step(
        added: list[JobHandle] | None = None, removed: list[JobHandle] | None = None, *, restart: bool = False
    ) -> dict[str, Observation]:
        added, removed = added or [], removed or []
        if restart:
            tracked.clear()
            known.clear()
        for j in removed:
            del tracked[j.uid]
            known.pop(j.uid, None)
        tracked.update({j.uid: j for j in added})
        answer = await backend.poll_changes(added, removed, restart=restart)
        assert {j.uid for j in added} <= answer.keys(), "every added job is answered"
        known.update({uid: obs for uid, obs in answer.items() if uid in tracked})
        full = await backend.poll(list(tracked.values()))
        assert known == {uid: full.get(uid, GONE) for uid in tracked}
        return answer

    async def end(name: str, code: int) -> None:
        """The runner writes its exit file and exits; wait until the backend's pidfd saw it."""
        (tmp_path / name / shell_processes.EXIT_FILE).write_text(f"{code}\n")
        proc = runners[name]
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
        await pidfd_fired(name)

    async def pidfd_fired(name: str) -> None:
        async def seen() -> bool:
            return name not in backend._running

        await wait_for(seen, what=f"the pidfd of {name}'s runner")

    try:
        a, b, c = await job("a"), await job("b"), await job("c")
        await backend.reconcile([a, b, c])  # adopted: each runner watched by a pidfd
        first = await step([a, b, c], restart=True)
        assert {obs.state for obs in first.values()} == {BackendState.RUNNING}
        assert await step() == {}, "runners a pidfd watches cost nothing until it fires"

        await end("b", 3)
        answer = await step()
        assert answer.keys() == {"b"} and answer["b"].state is BackendState.FAILED

        d = await job("d")
        await backend.reconcile([d])
        assert (await step([d], [b])).keys() == {"d"}
        await end("a", 0)
        answer = await step()
        assert answer.keys() == {"a"}, answer

        # A job whose runner vanished without its exit file (killed with everything): GONE.
        runners["c"].kill()
        await runners["c"].wait()
        await pidfd_fired("c")
        assert (await step())["c"] is GONE
    finally:
        for proc in runners.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await backend.close()
