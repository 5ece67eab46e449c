"""The conformance kit: the ``Backend`` protocol (``submitters/core/backend.py``) driven directly, the same
scenarios against every backend (``site``, conftest.py). A backend is done when it passes:
``pytest tests/conformance -k <name>``.

What a backend does not declare (``RunsGangs``, ``RunsArrays``, ``ReportsChanges``, ``ReportsFree``,
``MakesLayout``, switching accounts) is skipped for it, saying so; what it declares is held to the protocol's word.
The per-backend tests keep what is particular to one batch system (its flags, its texts, its failure modes); these
are the answers all must give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from accounts import ThrowAway
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import (
    GONE,
    BackendState,
    JobHandle,
    MakesLayout,
    Observation,
    ReportsChanges,
    ReportsFree,
    RunsArrays,
    RunsGangs,
)
from interlink_nats.submitters.testing import wait_for

from conformance.conftest import (
    OUTPUT_MARK,
    WAIT_S,
    Job,
    Site,
    declared,
    layout_output,
    observe,
    until_ended,
    until_running,
)


async def test_a_job_is_queued_or_running_then_ends_with_its_exit_code_and_its_output(site: Site) -> None:
    backend = await site.open()
    ok, failing = [await site.submit(backend, site.spec(code)) for code in (0, 3)]
    first = await backend.poll([ok.handle, failing.handle])
    for job in (ok, failing):
        assert first.get(job.handle.uid, GONE).state in (BackendState.QUEUED, BackendState.RUNNING), first
        await until_running(backend, job)
        job.go()
    done, bad = await until_ended(backend, ok.handle), await until_ended(backend, failing.handle)
    assert done.state is BackendState.COMPLETED and done.exit_code in (None, 0), done
    assert bad.state is BackendState.FAILED and bad.exit_code in (None, 3), bad
    for job in (ok, failing):
        output = layout_output(backend, job.dir)

        async def printed(path: Path = output) -> bool:
            return OUTPUT_MARK in _text(path)

        await wait_for(printed, timeout=WAIT_S, interval=0.2, what=f"{output} to hold the job's stdout")


async def test_cancel_ends_a_running_job_and_is_idempotent_even_once_the_job_has_ended(site: Site) -> None:
    backend = await site.open()
    running = await site.submit(backend, site.spec())
    ended = await site.submit(backend, site.spec())
    await until_running(backend, running)
    await until_running(backend, ended)
    ended.go()
    assert (await until_ended(backend, ended.handle)).state is BackendState.COMPLETED

    await backend.cancel(running.handle)
    await backend.cancel(running.handle)  # twice: quiet
    seen = await until_ended(backend, running.handle)
    assert seen.state is BackendState.CANCELLED, seen
    await backend.cancel(running.handle)  # once it has ended: quiet too
    assert (await observe(backend, running.handle) or GONE).state in (BackendState.CANCELLED, BackendState.GONE)
    assert not (running.dir / "go").exists() and OUTPUT_MARK not in _text(layout_output(backend, running.dir))

    await backend.cancel(ended.handle)  # a job that ended by itself keeps its outcome
    await backend.cancel(ended.handle)
    assert (await observe(backend, ended.handle) or GONE).state in (BackendState.COMPLETED, BackendState.GONE)


async def test_a_new_instance_finds_a_job_again_by_its_handle_after_a_crash(site: Site) -> None:
    first = await site.open()
    job = await site.submit(first, site.spec(code=0))
    await until_running(first, job)
    await site.crash(first)

    again = await site.open()
    never = site.spec()  # its directory made, the crash came before the batch system heard of it
    found = await again.reconcile([JobHandle(job.handle.uid, job.dir), JobHandle(never.uid, never.job_dir)])
    assert found[job.handle.uid].job_id == job.handle.job_id, found
    assert found[never.uid].job_id is None, found
    assert (await observe(again, job.handle) or GONE).state is BackendState.RUNNING
    job.go()
    assert (await until_ended(again, job.handle)).state is BackendState.COMPLETED


async def test_poll_changes_adds_up_to_what_poll_says(site: Site) -> None:
    backend = await site.open()
    declared(site, backend, ReportsChanges, "ReportsChanges")
    assert isinstance(backend, ReportsChanges)
    a, b = [await site.submit(backend, site.spec()) for _ in range(2)]
    for job in (a, b):
        await until_running(backend, job)
    tracked = {job.handle.uid: job.handle for job in (a, b)}
    known: dict[str, Observation] = {}

    async def step(
        added: Sequence[JobHandle] = (), removed: Sequence[JobHandle] = (), *, restart: bool = False
    ) -> None:
        if restart:
            tracked.clear()
        for gone in removed:
            del tracked[gone.uid]
            known.pop(gone.uid, None)
        tracked.update({h.uid: h for h in added})
        answer = await backend.poll_changes(added, removed, restart=restart)
        assert {h.uid for h in added} <= answer.keys(), f"every added job is answered: {answer}"
        if restart:
            known.clear()
        known.update({uid: obs for uid, obs in answer.items() if uid in tracked})
        full = await backend.poll(list(tracked.values()))
        assert known == {uid: full.get(uid, GONE) for uid in tracked}, "poll_changes said less than poll"

    await step(list(tracked.values()), restart=True)
    await step()  # nothing changed
    a.go()
    await until_ended(backend, a.handle)
    await step()  # a ended: said
    await step(removed=[a.handle])
    b.go()
    await until_ended(backend, b.handle)
    await step()
    await step([a.handle, b.handle], restart=True)  # a restart answers every job again
    assert set(known) == {a.handle.uid, b.handle.uid}


async def test_a_group_runs_as_one_job_and_is_found_again_by_its_group(site: Site) -> None:
    backend = await site.open()
    declared(site, backend, RunsGangs, "RunsGangs")
    assert isinstance(backend, RunsGangs)
    gang = site.gang(2)
    job_id = await backend.submit_gang(gang)
    assert job_id
    handle = JobHandle(gang.uid, gang.job_dir, job_id)
    site.handles.append(handle)
    seen = await until_ended(backend, handle)
    assert seen.state is BackendState.COMPLETED, seen
    assert [(m.job_dir / "ran").read_text().strip() for m in gang.members] == ["0", "1"], "every member ran"

    await site.crash(backend)
    again = await site.open()
    assert isinstance(again, RunsGangs)
    assert (await again.find_gang(gang)).job_id == job_id
    assert (await again.find_gang(site.gang(2))).job_id is None, "a group never submitted is not found"


async def test_an_array_is_one_submission_whose_members_run_end_and_are_cancelled_each_alone(site: Site) -> None:
    backend = await site.open()
    declared(site, backend, RunsArrays, "RunsArrays")
    assert isinstance(backend, RunsArrays)
    array = site.array([0, 3, 0])
    array_id, ids = await backend.submit_array(array)
    assert array_id and len(ids) == 3 and len(set(ids)) == 3, (array_id, ids)
    jobs = [Job(JobHandle(m.uid, m.job_dir, i)) for m, i in zip(array.members, ids, strict=True)]
    site.handles.extend(j.handle for j in jobs)
    seen = await backend.poll([j.handle for j in jobs])
    assert all(seen[j.handle.uid].state in (BackendState.QUEUED, BackendState.RUNNING) for j in jobs), seen

    await backend.cancel(jobs[2].handle)  # a delete of one member: the others run on
    for job in jobs[:2]:
        await until_running(backend, job)
        job.go()
    ok, failed = await until_ended(backend, jobs[0].handle), await until_ended(backend, jobs[1].handle)
    assert ok.state is BackendState.COMPLETED and ok.exit_code in (None, 0), ok
    assert failed.state is BackendState.FAILED and failed.exit_code in (None, 3), "one member fails alone"
    for job in jobs[:2]:
        assert OUTPUT_MARK in _text(layout_output(backend, job.dir)), "each member's output in its own directory"
    gone = (await backend.poll([jobs[2].handle])).get(jobs[2].handle.uid, GONE)
    assert gone.state in (BackendState.CANCELLED, BackendState.GONE), gone
    assert OUTPUT_MARK not in _text(layout_output(backend, jobs[2].dir))

    await site.crash(backend)
    again = await site.open()
    assert isinstance(again, RunsArrays)
    assert (await again.find_array(array)).job_id == array_id, "found by the array's uid, not submitted again"
    assert (await again.find_array(site.array([0]))).job_id is None, "an array never submitted is not found"


async def test_free_capacity_is_never_more_than_the_total_and_costs_one_call(site: Site) -> None:
    backend = await site.open()
    declared(site, backend, ReportsFree, "ReportsFree")
    assert isinstance(backend, ReportsFree)
    total = await backend.capacity()
    job = await site.submit(backend, site.spec())
    await until_running(backend, job)
    before = backend.calls
    free = await backend.free()
    assert backend.calls - before <= 1, "free() is one batch call"
    job.go()
    if free is None:
        return  # the site cannot tell: allowed, and the report then leaves free empty
    for what in ("cpu_millis", "memory_bytes", "gpus"):
        have, cap = getattr(free, what), getattr(total, what)
        assert have >= 0, free
        assert not cap or have <= cap, f"{what}: free {have} > total {cap}"


async def test_a_switched_account_runs_the_job_as_that_account(site: Site, request: pytest.FixtureRequest) -> None:
    probe = {"default": {"run_as_user": "nobody"}}
    refusal = site.refuses_account_switching(probe)
    if refusal is not None:
        pytest.skip(f"{site.name} declares it does not switch accounts: {refusal}")
    account: ThrowAway = request.getfixturevalue("account")  # made only for a backend that switches
    reachable_dir: Path = request.getfixturevalue("reachable_dir")
    policy = {"default": {"run_as_user": account.name}}
    backend = await site.open(accounting=policy)
    job = await site.submit(backend, site.spec(root=reachable_dir, then="id -u > {dir}/who; id -g >> {dir}/who"))
    who = job.dir / "who"
    await until_running(backend, job)
    job.go()
    assert (await until_ended(backend, job.handle)).state is BackendState.COMPLETED
    assert who.read_text().split() == [str(account.uid), str(account.gid)]


async def test_a_runner_that_makes_the_layout_has_removed_it_when_the_end_is_seen(site: Site) -> None:
    """``MakesLayout``: the layout handed over in ``JobSpec.layout`` is there when the script runs, and gone (logs
    and the script's own files kept) by the time a poll sees the job end."""
    backend = await site.open()
    declared(site, backend, MakesLayout, "MakesLayout")
    assert isinstance(backend, MakesLayout) and backend.makes_layout
    found = "[ -d {dir}/volumes/v ] && [ {dir}/rootfs/c/v -ef {dir}/volumes/v ] && echo found > {dir}/found"
    entries = (layout.LayoutDir("volumes/v", 0o750), layout.LayoutLink("rootfs/c/v", "volumes/v"))
    job = await site.submit(backend, dataclasses.replace(site.spec(then=found), layout=entries))
    await until_running(backend, job)
    job.go()
    assert (await until_ended(backend, job.handle)).state is BackendState.COMPLETED
    assert (job.dir / "found").exists(), "the script found the layout"
    assert [
        name for name in layout.ENDED_JOB_LAYOUT if (job.dir / name).is_symlink() or (job.dir / name).exists()
    ] == []
    assert OUTPUT_MARK in _text(layout_output(backend, job.dir))


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
