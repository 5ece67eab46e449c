"""The shell submitter end to end: real nats-server, real RPC layer, real bash jobs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import EVENTS_STREAM, config_subject, events_subject, resources_subject
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from shell_submitter import Phase, final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool
from shell_submitter import submitter as submitter


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


async def test_the_poller_keeps_nothing_of_the_jobs_that_ended_or_were_cancelled(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    """A long-lived submitter sees millions of jobs end: what it keeps per job must go with the job. A job's
    last change leaves it "hot" (its logs watched for a few more polls); the hot set once kept every job that
    ended that way, so each incremental poll walked every job the submitter had ever finished; and the shell
    backend kept every job cancelled while live. One job keeps running, so the polls go on as at a site."""
    client = submitter_client(nc, pool)
    ended = [uid() for _ in range(3)]
    for u in ended:
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "echo done"})))
    keeper, cancelled = uid(), uid()
    for u in (keeper, cancelled):
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "echo up; sleep 300"})))

    async def running() -> bool:  # the other long job runs too, or waits for a slot (one per core): live either way
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[keeper]))).statuses[0]
        return st.containers[0].phase == Phase.RUNNING

    await wait_for(running, what="the kept job's container to run")
    for u in ended:
        assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    assert (await client.cancel(pb.CancelRequest(pod_uid=cancelled))).found

    async def only_the_keeper() -> bool:
        return submitter.poller.tracked.keys() == {keeper}

    await wait_for(only_the_keeper, what="every other job to be untracked")
    await submitter.poll_once()  # an incremental poll (shell reports changes) after the others left
    assert submitter.poller._hot <= {keeper}, "jobs no longer tracked are still looked for at every poll"
    assert isinstance(submitter.backend, ShellBackend)
    assert not submitter.backend._cancelled, "the backend still holds the cancelled job"
    assert (await client.cancel(pb.CancelRequest(pod_uid=keeper))).found
