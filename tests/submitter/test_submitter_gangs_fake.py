"""Pod groups against the in-memory FakeBackend: a crash between any two steps of a SubmitGroup, and inside
the backend's call, starts the gang exactly once and never a member alone (milliseconds each)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import BackendState, SubmitRejected
from interlink_nats.submitters.core.errors import Refused
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import FakeBackend, SimulatedCrash, crash, offline_submitter

STEPS = ["claimed", "job_dir", "submitted", "marked"]


def group_request(size: int = 3) -> pb.SubmitGroupRequest:
    group = f"g-{uuid.uuid4()}"
    members = []
    for rank in range(size):
        uid = str(uuid.uuid4())
        members.append(
            pb.JobScript(
                pod=pb.PodRef(uid=uid, namespace="ns", name=f"m{rank}"),
                containers=["main"],
                script="#!/bin/bash\ntrue\n",
                gang=pb.GangMember(group_uid=group, group_name="pg", rank=rank, size=size),
            )
        )
    return pb.SubmitGroupRequest(members=members)


def ids(req: pb.SubmitGroupRequest) -> tuple[str, list[str]]:
    members = [m.pod.uid for m in req.members if m.pod is not None]
    gang = req.members[0].gang
    assert gang is not None
    return gang.group_uid, members


async def phases(sub: Submitter, uids: list[str]) -> list[Phase | None]:
    return [await sub.queries.job_phase(u) for u in uids]


def ran_once(backend: FakeBackend, group: str, members: list[str]) -> None:
    assert len(backend.submissions(group)) == 1, "the gang must run exactly once"
    assert all(backend.submissions(u) == [] for u in members), "never a member alone"


async def finish_and_check(sub: Submitter, backend: FakeBackend, group: str, members: list[str]) -> None:
    backend.finish(group)
    for _ in range(3):
        await sub.poll_once()
    statuses = (await sub.queries.get_status(members)).statuses
    assert [s.state for s in statuses] == [pb.JobState.SUCCEEDED] * len(members)
    assert len({s.job_id for s in statuses}) == 1


@pytest.mark.parametrize("step", STEPS)
async def test_a_crash_between_any_two_steps_runs_the_gang_exactly_once(tmp_path: Path, step: str) -> None:
    backend = FakeBackend()
    req = group_request()
    group, members = ids(req)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:

        def die(at: str) -> None:
            if at == step:
                raise SimulatedCrash(at)

        a.submissions.on_step = die
        with pytest.raises(SimulatedCrash):
            await a.gangs.submit_group(req)
        await crash(a)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        resp = await a.gangs.submit_group(req)  # the gateway's retry (recovery may have resumed it already)
        assert resp.job_id and not resp.created
        ran_once(backend, group, members)
        assert await phases(a, members) == [Phase.ACTIVE] * 3
        await finish_and_check(a, backend, group, members)


@pytest.mark.parametrize("after", [False, True], ids=["before-backend-got-it", "after-backend-got-it"])
async def test_recovery_after_a_crash_inside_submit_gang_needs_no_retry(tmp_path: Path, after: bool) -> None:
    backend = FakeBackend()
    req = group_request()
    group, members = ids(req)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        backend.crash("submit_gang", after=after)
        with pytest.raises(SimulatedCrash):
            await a.gangs.submit_group(req)
        await crash(a)
    assert len(backend.submissions(group)) == (1 if after else 0)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        assert a.tracked == 3, "every member stored: recovery alone finds or submits the gang"
        ran_once(backend, group, members)
        await finish_and_check(a, backend, group, members)


async def test_a_refused_gang_fails_every_member_and_a_retry_does_not_submit_again(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.fail("submit_gang", SubmitRejected("no such partition"))
    req = group_request(2)
    group, _ = ids(req)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        with pytest.raises(Refused, match="no such partition"):
            await a.gangs.submit_group(req)
        again = await a.gangs.submit_group(req)
        assert not again.created
        assert [s.reason for s in again.statuses] == ["SubmitFailed"] * 2
        assert backend.submissions(group) == []


async def test_a_cancelled_gang_ends_every_member_cancelled_and_is_cancelled_once(tmp_path: Path) -> None:
    backend = FakeBackend()
    req = group_request()
    group, members = ids(req)
    async with offline_submitter(tmp_path, backend, instance_id="a") as a:
        await a.gangs.submit_group(req)
        backend.start_running(group)
        await a.poll_once()
        assert [s.state for s in (await a.queries.get_status(members)).statuses] == [pb.JobState.RUNNING] * 3
        await a.submissions.cancel(members[0])
        await a.submissions.cancel(members[1])
        assert backend.cancels == [group]
        await a.poll_once()
        statuses = (await a.queries.get_status(members)).statuses
        assert [s.state for s in statuses] == [pb.JobState.CANCELLED] * 3
        assert statuses[2].reason == "Cancelled"
        assert backend.submissions(group)[0].state is BackendState.CANCELLED
