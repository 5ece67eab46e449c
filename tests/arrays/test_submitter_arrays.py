"""Arrays (SubmitGroup of kind ARRAY) end to end on the shell backend: real nats-server, real RPC layer, real bash.

An array's members are ordinary pods at the submitter, each its own job; only the submission is one. What is
counted: the backend's array and single submissions (``CountingShell``) and what each member's container did.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import rpc_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.core.backend import ArraySpec, BackendUnavailable, JobHandle, JobSpec, Reconciled
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.testing import SimulatedCrash, crash, settings_for, wait_for
from jobs import pod_job
from shell_submitter import final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool

ARRAY = pb.GroupKind.ARRAY


class CountingShell(ShellBackend):
    """The real shell backend, counting what the submitter asked of it."""

    def __init__(self) -> None:
        super().__init__(kill_grace_s=3.0)
        self.array_submits: list[str] = []
        self.single_submits: list[str] = []
        self.cancels: list[str] = []

    async def submit(self, spec: JobSpec) -> str:
        self.single_submits.append(spec.uid)
        return await super().submit(spec)

    async def submit_array(self, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        self.array_submits.append(array.array_uid)
        self.single_submits.clear()  # its members' submits are the array's, not singles
        array_id, ids = await super().submit_array(array)
        self.single_submits.clear()
        return array_id, ids

    async def cancel(self, job: JobHandle) -> None:
        self.cancels.append(job.uid)
        await super().cancel(job)


def array(commands: Sequence[str], *, job: str = "scan") -> list[pb.JobScript]:
    """One array: task ``i`` runs ``commands[i]`` (``sh -c``) in its container ``main``."""
    array_uid = f"a-{uuid.uuid4().hex}"
    out = []
    for i, cmd in enumerate(commands):
        script = pod_job(uid(), {"main": cmd}, name=f"{job}-{i}")
        script.array = pb.ArrayMember(
            array_uid=array_uid, job_name=job, job_uid="j1", task=i, size=len(commands), completion_index=i
        )
        out.append(script)
    return out


def uids(members: Sequence[pb.JobScript]) -> list[str]:
    return [m.pod.uid for m in members if m.pod is not None]


def request(members: list[pb.JobScript]) -> pb.SubmitGroupRequest:
    return pb.SubmitGroupRequest(members=members, kind=ARRAY)


@pytest.fixture
def backend() -> CountingShell:
    return CountingShell()


@pytest.fixture
async def submitter(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS, backend: CountingShell
) -> AsyncIterator[Submitter]:
    await ensure_events_stream(nc.jetstream())
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool), backend=backend) as s:
        yield s


async def statuses(client: pb.SubmitterServiceStub, members: Sequence[str], within: float = 60) -> list[pb.JobStatus]:
    return [await final_status(client, u, within) for u in members]


def log_of(sub: Submitter, pod_uid: str) -> str:
    return (sub.state_dir / "jobs" / pod_uid / "containers" / "main.log").read_text()


async def test_an_array_is_one_submission_each_member_its_own_job_log_and_status(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell
) -> None:
    members = array([f"echo task {i}" if i != 3 else "echo failing; exit 3" for i in range(6)])
    client = submitter_client(nc, pool, timeout=30)
    reply = await client.submit_group(request(members))
    assert reply.created and reply.member_job_ids == uids(members), "each member its own job id"
    assert backend.array_submits == [members[0].array.array_uid] and backend.single_submits == []
    final = await statuses(client, uids(members))
    expected = [pb.JobState.FAILED if i == 3 else pb.JobState.SUCCEEDED for i in range(6)]
    assert [s.state for s in final] == expected, "one member failing fails only its pod"
    for i, u in enumerate(uids(members)):
        assert log_of(submitter, u) == ("failing\n" if i == 3 else f"task {i}\n")
    again = await client.submit_group(request(members))  # the gateway's retry
    assert not again.created and list(again.member_job_ids) == uids(members) and len(again.statuses) == 6
    assert backend.array_submits == [members[0].array.array_uid], "never submitted twice"


async def test_cancel_of_one_member_stops_only_its_task(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    started.mkdir()
    members = array([f"touch {started}/{i}; exec sleep 300" for i in range(2)])  # the host may run only 2 at once
    client = submitter_client(nc, pool, timeout=30)
    await client.submit_group(request(members))

    async def all_started() -> bool:
        return len(list(started.iterdir())) == 2

    await wait_for(all_started, timeout=60, what="every task running")
    await client.cancel(pb.CancelRequest(pod_uid=uids(members)[1]))
    assert backend.cancels == [uids(members)[1]], "only its own task"

    async def other_seen_running() -> bool:
        status = await client.get_status(pb.GetStatusRequest(pod_uids=uids(members)[:1]))
        return status.statuses[0].state == pb.JobState.RUNNING

    await wait_for(other_seen_running, timeout=30, what="the other task still running")
    assert (started / "0").exists()
    await client.cancel(pb.CancelRequest(pod_uid=uids(members)[0]))


async def test_a_malformed_array_and_a_plain_submit_of_a_member_are_refused_naming_the_field(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    members = array(["true"] * 2)
    members[1].array.task = 0
    for bad, field in ((members, "members[1].array.task"), (array(["true"])[:0], "members")):
        with pytest.raises(GRPCError) as err:
            await client.submit_group(request(bad))
        assert err.value.status == Status.INVALID_ARGUMENT and field in (err.value.message or "")
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=array(["true"])[0]))
    assert err.value.status == Status.INVALID_ARGUMENT and "job.array" in (err.value.message or "")
    assert backend.array_submits == [] and backend.single_submits == []


async def submit_until_crash(
    settings: SubmitterSettings, members: list[pb.JobScript], step: str
) -> tuple[Submitter, CountingShell]:
    """A submitter whose SubmitGroup of ``members`` dies at ``step`` (the ``on_step`` seam), as a kill -9 there."""
    backend = CountingShell()
    submitter = Submitter(settings, backend=backend)
    await submitter.start()

    def die(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    submitter.submissions.on_step = die
    with pytest.raises(SimulatedCrash):
        await submitter.gangs.submit_group(request(members))
    return submitter, backend


async def test_a_crash_after_the_backend_took_the_array_finds_it_again_never_resubmitting(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    await ensure_events_stream(nc.jetstream())
    runs = tmp_path / "runs"
    runs.mkdir()
    gate = tmp_path / "gate"
    members = array([f"echo run >> {runs}/{i}; while [ ! -e {gate} ]; do sleep 0.05; done" for i in range(2)])
    settings = settings_for(tmp_path / "state", nats_url, pool=pool)
    a, first = await submit_until_crash(settings, members, "submitted")

    async def launched() -> bool:
        return len(list(runs.iterdir())) == 2  # the host may run only 2 at once

    await wait_for(launched, timeout=30, what="the array's tasks to start")
    assert first.array_submits == [members[0].array.array_uid]
    await crash(a)
    await first.close()
    await a.stop()
    second = CountingShell()
    async with Submitter(settings, backend=second):
        client = submitter_client(nc, pool, timeout=30)
        again = await client.submit_group(request(members))  # the gateway's retry, after recovery found it
        assert not again.created and list(again.member_job_ids) == uids(members)
        gate.touch()
        final = await statuses(client, uids(members))
        assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 2
        assert second.array_submits == [] and second.single_submits == [], "found again, never resubmitted"
    assert {p.read_text() for p in runs.iterdir()} == {"run\n"}, "each task ran exactly once"


class HeldShell(CountingShell):
    """CountingShell unreachable for array lookups while ``down`` (as a backend at a submitter's restart), whose
    array submission is held in flight (``entered`` set) until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled_ids: list[str] = []

    async def cancel(self, job: JobHandle) -> None:
        self.cancelled_ids.append(job.job_id)
        await super().cancel(job)

    async def find_array(self, array: ArraySpec) -> Reconciled:
        if self.down:
            raise BackendUnavailable("unreachable")
        return await super().find_array(array)

    async def submit_array(self, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        self.entered.set()
        await self.release.wait()
        return await super().submit_array(array)


async def test_a_crash_before_the_submission_submits_once_and_cancels_a_member_deleted_meanwhile(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    """Killed between the member list and the backend's answer; restarted while the backend is unreachable (its
    start's recovery leaves the members submitting); the pod of task 2 deleted (a Cancel over NATS) while the
    next recovery submits the array: that task is cancelled once the backend has it and never runs."""
    await ensure_events_stream(nc.jetstream())
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    runs.mkdir()
    members = array([f"until [ -e {gate} ]; do sleep 0.05; done; echo run >> {runs}/{i}" for i in range(3)])
    deleted = uids(members)[2]
    settings = settings_for(tmp_path / "state", nats_url, pool=pool)
    a, first = await submit_until_crash(settings, members, "job_dir")  # claimed, member list written, not submitted
    await crash(a)
    await first.close()
    await a.stop()
    assert first.array_submits == []
    second = HeldShell()
    async with Submitter(settings, backend=second) as b:
        assert second.array_submits == [] and not second.entered.is_set(), "its start could not reach the backend"
        client = submitter_client(nc, pool, timeout=60)
        second.down = False
        recovery = asyncio.create_task(b.recover())  # what the poll loop runs now and then
        await asyncio.wait_for(second.entered.wait(), timeout=30)
        heard = await nc.subscribe(rpc_subject("Cancel", pool))
        cancel = asyncio.create_task(client.cancel(pb.CancelRequest(pod_uid=deleted)))  # the pod deleted now
        await heard.next_msg(timeout=30)
        second.release.set()
        await recovery
        reply = await cancel
        assert reply.found and reply.status.state == pb.JobState.CANCELLED
        assert second.array_submits == [members[0].array.array_uid], "recovery submitted the array once"
        assert second.cancels == [deleted], "its task cancelled once the backend had it"
        gate.touch()
        final = await statuses(client, uids(members)[:2])
        assert [s.state for s in final] == [pb.JobState.SUCCEEDED] * 2
        again = await client.submit_group(request(members))  # the gateway's retry
        assert not again.created and second.array_submits == [members[0].array.array_uid]
        assert second.single_submits == []
        assert again.member_job_ids[2] and second.cancelled_ids == [again.member_job_ids[2]], "its task, by its id"
        assert deleted not in b.poller.tracked, "a deleted pod is not polled"
    assert sorted(p.name for p in runs.iterdir()) == ["0", "1"], "the deleted member's command never ran"
    assert {p.read_text() for p in runs.iterdir()} == {"run\n"}, "the others ran once"


async def test_a_backend_without_arrays_gets_each_member_as_a_single_submit(
    tmp_path: Path, nats_url: str, pool: str, nc: nats.NATS
) -> None:
    class NoArrays(CountingShell):
        """The shell backend as a backend without ``RunsArrays`` looks to the submitter."""

        submit_array = None  # type: ignore[assignment]

    await ensure_events_stream(nc.jetstream())
    backend = NoArrays()
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=pool), backend=backend) as s:
        members = array([f"echo {i}" for i in range(3)])
        client = submitter_client(nc, pool, timeout=30)
        reply = await client.submit_group(request(members))
        assert reply.created and list(reply.member_job_ids) == uids(members)
        final = await statuses(client, uids(members))
        assert [st.state for st in final] == [pb.JobState.SUCCEEDED] * 3
        for i, u in enumerate(uids(members)):
            assert log_of(s, u) == f"{i}\n"
        assert sorted(backend.single_submits) == sorted(uids(members)), "each member a single submit"
