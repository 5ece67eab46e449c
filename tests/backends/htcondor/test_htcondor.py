"""Level 2 of the htcondor backend's tests: the command-line contract, against the condor_* STAND-INS.

No HTCondor daemon can run here (see docs/backends/htcondor.md): ``tests/harness/htcondor_standin.py`` provides
condor_submit/condor_q/condor_history/condor_rm/condor_transfer_data that follow the documented
formats and really run each job as a local process. The submitter, its registry, NATS and the job
script are all real.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import htcondor_standin as standin
import nats
import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from htcondor_harness import (  # noqa: F401 (client_fixture, pool_fixture: the fixtures client and pool)
    Condor,
    client_fixture,
    deadline_pod_ends_deadline_exceeded,
    htc_settings,
    logs_of,
    pool_fixture,
    start_condor,
    until,
    until_terminal,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import events_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor.backend import (
    FETCHED_MARK,
    REMOTE_LOGS_HINT,
    HTCondorBackend,
    HTCondorConfig,
)
from interlink_nats.submitters.core.backend import BackendState, JobHandle
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job

pytestmark = pytest.mark.htcondor

Phase = pb.ContainerPhase


@pytest.fixture
def condor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Condor]:
    yield from start_condor(tmp_path, monkeypatch)


async def test_a_job_runs_through_a_local_schedd_with_exact_exit_codes_live_logs_and_events(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    nc = await nats.connect(nats_url)
    await ensure_events_stream(nc.jetstream())  # the gateway's step (pools never create it)
    u = str(uuid.uuid4())
    gate = tmp_path / "gate"
    job = pod_job(
        u,
        {"main": f"echo one; echo two; while [ ! -e {gate} ]; do sleep 0.1; done; exit 3", "side": "echo side"},
        init={"prep": "echo prep"},
        limits={"cpu": "1", "memory": "64Mi"},
    )
    async with Submitter(htc_settings(tmp_path, nats_url, pool, request_disk="1GB")) as sub:
        events = await nc.jetstream().subscribe(events_subject(pool), ordered_consumer=True)
        resp = await client.submit(pb.SubmitRequest(job=job))
        assert resp.created
        assert resp.job_id == "1.0"
        again = await client.submit(pb.SubmitRequest(job=job))
        assert (again.created, again.job_id) == (False, "1.0")
        assert len(condor.calls("condor_submit")) == 1, "idempotent by pod UID"

        st = await until(
            client, u, lambda st: st.state == pb.JobState.RUNNING and st.containers[1].phase == Phase.RUNNING, "main"
        )
        assert [c.name for c in st.containers] == ["prep", "main", "side"]
        assert st.containers[0].exit_code == 0
        # A shared filesystem: the container's log is live while the job runs.
        assert await logs_of(client, u, "main") == b"one\ntwo\n"

        gate.touch()
        st = await until_terminal(client, u)
        assert st.state == pb.JobState.FAILED
        assert [(c.name, c.exit_code) for c in st.containers] == [("prep", 0), ("main", 3), ("side", 0)]
        assert st.job_id == "1.0"
        assert await logs_of(client, u, "side") == b"side\n"

        # What condor_submit was given: the real bindings read the same file.
        import htcondor2

        desc = dict(htcondor2.Submit((sub.state_dir / "jobs" / u / "condor.sub").read_text()).items())
        assert desc["request_memory"] == str(job.resources.memory_bytes // 2**20)
        assert desc["request_cpus"] == str(job.resources.cpu_millis // 1000)
        assert desc["request_disk"] == "1GB"
        assert desc["MY.InterlinkPodUID"] == f'"{u}"'
        # The job's own event log, written by the stand-in, read by the real bindings.
        kinds = [e.type for e in htcondor2.JobEventLog(str(sub.state_dir / "jobs" / u / "job.log")).events(0)]
        assert kinds[0] == htcondor2.JobEventType.SUBMIT
        assert kinds[-1] == htcondor2.JobEventType.JOB_TERMINATED

    states = []
    while True:
        try:
            msg = await events.next_msg(timeout=2)
        except nats.errors.TimeoutError:
            break
        ev = pb.JobEvent.parse(msg.data)
        if ev.status.pod.uid == u:
            states.append(ev.status.state)
    assert states[0] in (pb.JobState.PENDING, pb.JobState.RUNNING)
    assert states[-1] == pb.JobState.FAILED
    await events.unsubscribe()  # an ordered consumer's heartbeat check outlives nc.close() otherwise
    await nc.close()


async def test_a_held_job_reports_its_hold_reason_then_fails_after_hold_timeout(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    hold = {"+StandinHoldReason": '"Error from slot1@wn: Failed to transfer files"', "+StandinHoldCode": "13"}
    settings = htc_settings(tmp_path, nats_url, pool, submit_commands=hold, hold_timeout=2.0)
    async with Submitter(settings):
        u = str(uuid.uuid4())
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "echo never"})))
        st = await until(client, u, lambda st: "Failed to transfer files" in st.message, "the hold reason")
        assert st.state == pb.JobState.PENDING
        assert (
            st.containers[0].message
            == st.message
            == "held: Error from slot1@wn: Failed to transfer files (HoldReasonCode 13)"
        )
        st = await until_terminal(client, u, within=30)
        assert st.state == pb.JobState.FAILED
        assert "Failed to transfer files" in st.message
        assert "held for more than 2s" in st.message
        await wait_for(lambda: _gone_from_queue(condor), what="the held job to be removed from the queue")
        assert condor.calls("condor_rm")


async def _gone_from_queue(condor: Condor) -> bool:
    return not condor.queue()


async def test_a_job_removed_by_an_administrator_is_cancelled_with_the_remove_reason(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    async with Submitter(htc_settings(tmp_path, nats_url, pool)):
        u = str(uuid.uuid4())
        resp = await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "sleep 300"})))
        await until(client, u, lambda st: st.state == pb.JobState.RUNNING, "running")
        rm = await asyncio.create_subprocess_exec("condor_rm", resp.job_id, stdout=asyncio.subprocess.DEVNULL)
        assert await rm.wait() == 0
        st = await until_terminal(client, u)
        assert st.state == pb.JobState.CANCELLED
        assert "via condor_rm" in st.message


async def test_htcondors_own_time_limit_ends_a_job_as_deadline_exceeded(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    """The backstop: a job that outlives activeDeadlineSeconds + margin is removed by periodic_remove."""
    async with Submitter(htc_settings(tmp_path, nats_url, pool, time_limit_margin=0)):
        u = str(uuid.uuid4())
        job = pod_job(u, {"main": "sleep 300"})
        job.resources.wall_time = dt.timedelta(seconds=1)  # the script itself has no deadline here
        await client.submit(pb.SubmitRequest(job=job))
        st = await until_terminal(client, u, within=60)
        assert st.state == pb.JobState.FAILED
        assert st.reason == "DeadlineExceeded"
        assert "time limit" in st.message
        assert st.containers[0].reason == "DeadlineExceeded"
        removed = [ad for ad in condor.history() if ad[hp.POD_UID_ATTR] == u]
        assert "PeriodicRemove" in removed[0]["RemoveReason"]


async def test_active_deadline_seconds_stops_the_pod_with_a_clear_reason(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    async with Submitter(htc_settings(tmp_path, nats_url, pool)):
        await deadline_pod_ends_deadline_exceeded(client)


async def test_cancel_removes_the_job_and_its_files_and_is_idempotent(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    async with Submitter(htc_settings(tmp_path, nats_url, pool)) as sub:
        u = str(uuid.uuid4())
        marker = tmp_path / "still-running"
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": f"while :; do touch {marker}; sleep 0.1; done"})))
        await until(client, u, lambda st: st.state == pb.JobState.RUNNING, "running")
        job_dir = sub.state_dir / "jobs" / u
        assert job_dir.is_dir()
        first = await client.cancel(pb.CancelRequest(pod_uid=u))
        assert first.found
        assert first.status.state == pb.JobState.CANCELLED
        assert not job_dir.exists()
        assert [ad["JobStatus"] for ad in condor.history() if ad[hp.POD_UID_ATTR] == u] == [3]
        marker.unlink(missing_ok=True)
        await asyncio.sleep(0.5)
        assert not marker.exists(), "the job's processes were killed"
        second = await client.cancel(pb.CancelRequest(pod_uid=u))
        assert second.found and second.status.state == pb.JobState.CANCELLED
        # The backend alone: removing a job that is already gone is quiet.
        await sub.backend.cancel(JobHandle(u, job_dir, first.status.job_id))


async def test_a_submitter_killed_between_condor_submit_and_the_registry_write_never_submits_twice(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    state = tmp_path / "state"
    config = tmp_path / "site.yaml"
    config.write_text(yaml.safe_dump({"nats_url": [nats_url], "state_dir": str(state), "poll_interval": 0.3}))
    crashed = tmp_path / "crashed"
    env = {**os.environ, "STANDIN_KILL_CALLER_AFTER_SUBMIT": str(crashed)}
    argv = [sys.executable, "-m", "interlink_nats.submitters.cli", "htcondor", "--pool", pool, "--config", str(config)]
    with (tmp_path / "submitter.log").open("w") as log:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
    try:

        async def serving() -> bool:
            try:
                await client.describe(pb.DescribeRequest(), timeout=1)
            except (GRPCError, TimeoutError):
                return False
            return True

        await wait_for(serving, timeout=60, what="the submitter process to serve")
        u = str(uuid.uuid4())
        job = pod_job(u, {"main": "echo done"})
        with pytest.raises((GRPCError, TimeoutError)):
            await client.submit(pb.SubmitRequest(job=job), timeout=10)
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    queued_id = crashed.read_text().strip()
    assert len(condor.calls("condor_submit")) == 1

    async with Submitter(settings_for(state, nats_url, pool=pool, backend="htcondor", poll_interval=0.3)):
        resp = await client.submit(pb.SubmitRequest(job=job))  # the gateway's retry
        assert (resp.created, resp.job_id) == (False, queued_id)
        st = await until_terminal(client, u)
        assert st.state == pb.JobState.SUCCEEDED
        assert st.job_id == queued_id
    assert len(condor.calls("condor_submit")) == 1, "found again by its pod-UID attribute, never resubmitted"


async def test_a_remote_ce_spools_the_sandbox_and_fetches_output_when_the_job_ends(
    condor: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    gate = tmp_path / "gate"
    settings = htc_settings(tmp_path, nats_url, pool, mode="remote", collector="ce.example:9619", schedd="ce.example")
    async with Submitter(settings) as sub:
        u = str(uuid.uuid4())
        await client.submit(
            pb.SubmitRequest(job=pod_job(u, {"main": f"echo hello; while [ ! -e {gate} ]; do sleep 0.1; done; exit 4"}))
        )
        job_dir = sub.state_dir / "jobs" / u
        await until(client, u, lambda st: st.state == pb.JobState.RUNNING, "running")
        assert not (job_dir / "containers" / "main.log").exists(), "the job runs in the CE's spool, not here"
        with pytest.raises(GRPCError) as err:
            await logs_of(client, u, "main")
        assert err.value.status == Status.UNAVAILABLE
        assert err.value.message == REMOTE_LOGS_HINT
        gate.touch()
        st = await until_terminal(client, u)
        assert st.state == pb.JobState.FAILED
        assert st.containers[0].exit_code == 4  # from the job's own exit file, fetched back
        assert (job_dir / FETCHED_MARK).exists()
        assert await logs_of(client, u, "main") == b"hello\n"
    assert all("-pool ce.example:9619 -name ce.example" in c for c in condor.calls())
    assert len(condor.calls("condor_transfer_data")) == 1
    assert not condor.queue(), "a fetched job leaves the CE's queue"


async def test_one_condor_q_and_one_condor_history_per_poll_for_a_thousand_jobs(condor: Condor, tmp_path: Path) -> None:
    def ad(cluster: int, status: int, uid: str) -> dict[str, Any]:
        a: dict[str, Any] = {"ClusterId": cluster, "ProcId": 0, "JobStatus": status, hp.POOL_ATTR: "big"}
        a[hp.POD_UID_ATTR] = uid
        if status == 4:
            a.update(ExitCode=0, ExitBySignal=False, CompletionDate=1_700_000_000)
        return a

    uids = [f"pod-{i:04d}" for i in range(1000)]
    standin.seed(
        condor.root,
        queued=[ad(i + 1, 1 + i % 2, uids[i]) for i in range(600)],
        finished=[ad(i + 1, 4, uids[i]) for i in range(600, 1000)] + [ad(5000, 4, "another-pool-job")],
    )
    backend = HTCondorBackend(HTCondorConfig(), pool="big")
    handles = [JobHandle(u, tmp_path / u, f"{i + 1}.0") for i, u in enumerate(uids)]
    before = len(condor.calls())
    seen = await backend.poll(handles)
    assert condor.calls()[before:] == ["condor_q", "condor_history"]
    assert backend.calls_by_command == {"condor_q": 1, "condor_history": 1}
    assert len(seen) == 1000
    assert seen[uids[0]].state is BackendState.QUEUED
    assert seen[uids[1]].state is BackendState.RUNNING
    assert seen[uids[999]].state is BackendState.COMPLETED

    # And after a crash, 1,000 jobs whose ids were never recorded are found by their pod UID at once.
    found = await backend.reconcile([JobHandle(u, tmp_path / u) for u in uids])
    assert {u: r.job_id for u, r in found.items()} == {u: f"{i + 1}.0" for i, u in enumerate(uids)}
    assert condor.calls()[before + 2 :] == ["condor_q", "condor_history"]


async def test_capacity_comes_from_condor_status_totals_or_else_from_the_site_config(condor: Condor) -> None:
    cap = await HTCondorBackend(HTCondorConfig(use_condor_status=True), pool="p").capacity()
    assert (cap.cpu_millis, cap.memory_bytes, cap.nodes) == ((os.cpu_count() or 1) * 1000, 4096 * 2**20, 1)
    assert condor.calls("condor_status") == ["condor_status"]
    site = await HTCondorBackend(HTCondorConfig(), pool="p").capacity()
    assert site.quantities() == {}, "nothing discovered: the site config's capacity is announced"
    assert condor.calls("condor_status") == ["condor_status"]
