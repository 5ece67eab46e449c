"""The shell submitter end to end: real nats-server, real RPC layer, real bash jobs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM, config_subject, events_subject, resources_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job

Phase = pb.ContainerPhase


def uid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


@pytest.fixture
def pool() -> str:
    return f"p{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def submitter(tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS) -> AsyncIterator[Submitter]:
    await ensure_events_stream(nc.jetstream())  # as the gateway or an admin step does: pools never create it
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool)) as s:
        yield s


async def final_status(client: pb.SubmitterServiceStub, pod_uid: str, within: float = 20) -> pb.JobStatus:
    async def check() -> pb.JobStatus | None:
        resp = await client.get_status(pb.GetStatusRequest(pod_uids=[pod_uid]))
        st = resp.statuses[0]
        done = st.state in (pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST)
        return st if done else None

    return await wait_for(check, timeout=within, what=f"pod {pod_uid} to finish")


async def test_a_job_runs_and_reports_every_container_with_its_exit_code(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    job = pod_job(u, {"main": "echo hello; exit 3", "side": "echo side"}, init={"prep": "echo prep"})
    resp = await client.submit(pb.SubmitRequest(job=job))
    assert resp.created
    assert resp.job_id
    assert resp.status is None, "a new job is pending: its status is not sent back on the hot path"
    again = await client.submit(pb.SubmitRequest(job=job))
    assert not again.created
    assert again.job_id == resp.job_id
    assert again.status is not None
    assert [c.name for c in again.status.containers] == ["prep", "main", "side"]

    st = await final_status(client, u)
    assert st.state == pb.JobState.FAILED
    codes = {c.name: (c.phase, c.exit_code, c.init) for c in st.containers}
    assert codes == {
        "prep": (Phase.TERMINATED, 0, True),
        "main": (Phase.TERMINATED, 3, False),
        "side": (Phase.TERMINATED, 0, False),
    }
    main = next(c for c in st.containers if c.name == "main")
    assert main.started_at is not None
    assert main.finished_at is not None
    assert main.finished_at >= main.started_at
    assert st.message == "container main exited with 3"

    again = await client.submit(pb.SubmitRequest(job=job))
    assert not again.created
    assert again.status.state == pb.JobState.FAILED


async def test_a_failed_init_container_terminates_the_main_containers(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "echo never"}, init={"prep": "exit 7"})))
    st = await final_status(client, u)
    assert st.state == pb.JobState.FAILED
    assert st.reason == "InitContainerFailed"
    assert [(c.name, c.phase, c.exit_code) for c in st.containers] == [
        ("prep", Phase.TERMINATED, 7),
        ("main", Phase.TERMINATED, 7),
    ]


async def test_logs_stream_while_running_and_follow_ends_when_the_container_ends(
    submitter: Submitter, nc: nats.NATS, pool: str, tmp_path: Path
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    u = uid()
    gate = tmp_path / "gate"
    cmd = f"for i in 1 2 3; do echo line$i; done; while [ ! -e {gate} ]; do sleep 0.1; done; echo last"
    await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": cmd})))

    async def running() -> bool:
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
        return st.state == pb.JobState.RUNNING and st.containers[0].phase == Phase.RUNNING

    await wait_for(running, what="the container to run")

    async def three_lines() -> bytes | None:
        chunks = [c async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main"))]
        data = b"".join(c.data for c in chunks)
        return data if data.count(b"\n") >= 3 else None

    data = await wait_for(three_lines, what="three log lines")
    assert data == b"line1\nline2\nline3\n"
    tail_req = pb.GetLogsRequest(pod_uid=u, container="main", tail_lines=1)
    tail = b"".join([c.data async for c in client.get_logs(tail_req)])
    assert tail == b"line3\n"
    limited = [c async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main", limit_bytes=4))]
    assert b"".join(c.data for c in limited) == b"line", "limit_bytes counts from where output starts"
    both = pb.GetLogsRequest(pod_uid=u, container="main", tail_lines=2, limit_bytes=7)
    assert b"".join([c.data async for c in client.get_logs(both)]) == b"line2\nl", "from the first tail line"

    async def follow() -> bytes:
        got = b""
        async for chunk in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main", follow=True, offset=6)):
            got += chunk.data
        return got

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    assert not follower.done()
    gate.touch()
    assert await asyncio.wait_for(follower, 15) == b"line2\nline3\nlast\n"
    assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED


async def test_cancel_stops_the_job_removes_its_files_and_is_idempotent(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    job = pod_job(u, {"main": "sleep 300"})
    await client.submit(pb.SubmitRequest(job=job))

    async def running() -> bool:
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
        return st.containers[0].phase == Phase.RUNNING

    await wait_for(running, what="the container to run")
    job_dir = submitter.state_dir / "jobs" / u
    assert job_dir.is_dir()
    assert oct(job_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((job_dir / "job.sh").stat().st_mode & 0o777) == "0o700"

    resp = await client.cancel(pb.CancelRequest(pod_uid=u))
    assert resp.found
    assert resp.status.state == pb.JobState.CANCELLED
    assert all(c.phase == Phase.TERMINATED for c in resp.status.containers)
    assert not job_dir.exists()
    assert (await client.cancel(pb.CancelRequest(pod_uid=u))).found
    assert not (await client.cancel(pb.CancelRequest(pod_uid=uid()))).found

    resubmit = await client.submit(pb.SubmitRequest(job=job))
    assert not resubmit.created, "a cancelled pod is never run again"
    with pytest.raises(GRPCError) as err:
        [c async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container="main"))]
    assert err.value.status == Status.NOT_FOUND


async def test_invalid_jobs_are_rejected_with_a_clear_error(submitter: Submitter, nc: nats.NATS, pool: str) -> None:
    client = submitter_client(nc, pool)
    bad = pb.JobScript(pod=pb.PodRef(uid="../etc", name="x", namespace="d"), script="true", containers=["main"])
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=bad))
    assert err.value.status == Status.INVALID_ARGUMENT
    empty = pb.JobScript(pod=pb.PodRef(uid=uid(), name="x", namespace="d"), script="true", containers=[])
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=empty))
    assert "at least one container" in (err.value.message or "")


async def test_events_list_and_describe(submitter: Submitter, nc: nats.NATS, pool: str) -> None:
    client = submitter_client(nc, pool)
    js = nc.jetstream()
    info = await js.stream_info(EVENTS_STREAM)
    assert "interlink.events.*" in info.config.subjects
    sub = await js.subscribe(events_subject(pool), ordered_consumer=True)
    uids = [uid() for _ in range(3)]
    for u in uids:
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "true"})))
    for u in uids:
        await final_status(client, u)

    async def all_succeeded_events() -> set[str] | None:
        seen: dict[str, tuple[int, pb.JobState]] = {}
        while True:
            try:
                msg = await sub.next_msg(timeout=0.2)
            except nats.errors.TimeoutError:
                break
            ev = pb.JobEvent.parse(msg.data)
            uid_ = ev.status.pod.uid
            assert ev.revision > seen.get(uid_, (0, None))[0]
            if uid_ not in all_succeeded_events.seen and uid_ not in seen:  # type: ignore[attr-defined]
                assert ev.revision == 1, "the first JobEvent of a job has revision 1 (docs/rpc.md)"
            assert ev.instance_id == submitter.instance_id
            seen[uid_] = (ev.revision, ev.status.state)
            all_succeeded_events.seen.update(seen)  # type: ignore[attr-defined]
        ok = {u for u, (_, s) in all_succeeded_events.seen.items() if s == pb.JobState.SUCCEEDED}  # type: ignore[attr-defined]
        return ok if ok >= set(uids) else None

    all_succeeded_events.seen = {}  # type: ignore[attr-defined]
    await wait_for(all_succeeded_events, what="SUCCEEDED events for every job")

    page1 = await client.list_jobs(pb.ListJobsRequest(include_finished=True, page_size=2))
    assert len(page1.jobs) == 2
    assert page1.next_page_token
    page2 = await client.list_jobs(
        pb.ListJobsRequest(include_finished=True, page_size=2, page_token=page1.next_page_token)
    )
    assert {j.pod.uid for j in page1.jobs + page2.jobs} == set(uids)
    assert not page2.next_page_token
    assert (await client.list_jobs(pb.ListJobsRequest())).jobs == []

    # include_finished means every job the pool knows: cancelled ones too, until they are pruned.
    await client.cancel(pb.CancelRequest(pod_uid=uids[0]))
    listed = await client.list_jobs(pb.ListJobsRequest(include_finished=True))
    assert {j.pod.uid for j in listed.jobs} == set(uids)
    cancelled = uid()
    await client.submit(pb.SubmitRequest(job=pod_job(cancelled, {"main": "sleep 60"})))
    assert (await client.cancel(pb.CancelRequest(pod_uid=cancelled))).found
    listed = await client.list_jobs(pb.ListJobsRequest(include_finished=True))
    [entry] = [j for j in listed.jobs if j.pod.uid == cancelled]
    assert entry.state == pb.JobState.CANCELLED and entry.deleted
    [finished_then_deleted] = [j for j in listed.jobs if j.pod.uid == uids[0]]
    assert finished_then_deleted.state == pb.JobState.SUCCEEDED and finished_then_deleted.deleted
    assert not any(j.deleted for j in listed.jobs if j.pod.uid in uids[1:])
    assert cancelled not in {j.pod.uid for j in (await client.list_jobs(pb.ListJobsRequest())).jobs}

    desc = await client.describe(pb.DescribeRequest())
    assert desc.pool == pool
    assert desc.backend == "shell"
    assert desc.instance_id == submitter.instance_id
    assert desc.resources.capacity["cpu"]
    assert desc.resources.capacity["memory"].endswith("Mi")
    await sub.unsubscribe()  # an ordered consumer's heartbeat task ends only with its subscription


async def test_announcements_carry_the_build_config_and_follow_file_changes(
    tmp_path: Path, nats_url: str, nc: nats.NATS, pool: str
) -> None:
    cfg = tmp_path / "bc.yaml"
    cfg.write_text("runtime: none\nscratch_dir: /scratch/a\n")
    configs = await nc.subscribe(config_subject(pool))
    resources = await nc.subscribe(resources_subject(pool))
    settings = settings_for(
        tmp_path / "state", nats_url, pool=pool, build_config_file=cfg, capacity={"pods": "7"}, labels={"site": "here"}
    )
    async with Submitter(settings):
        first = pb.BuildConfig.parse((await configs.next_msg(timeout=5)).data)
        assert first.runtime == pb.ContainerRuntime.NONE
        assert first.scratch_dir == "/scratch/a"
        report = pb.ResourceReport.parse((await resources.next_msg(timeout=5)).data)
        assert report.capacity["pods"] == "7"
        assert report.labels == {"site": "here"}
        assert report.backend == "shell"
        await asyncio.sleep(0.05)
        cfg.write_text("runtime: apptainer\nscratch_dir: /scratch/b\n")
        changed = pb.BuildConfig.parse((await configs.next_msg(timeout=10)).data)
        assert changed.runtime == pb.ContainerRuntime.APPTAINER
        assert changed.scratch_dir == "/scratch/b"


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
