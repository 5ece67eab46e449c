"""kernel.tasks.cancel_and_wait: every process stops its loops this way."""

from __future__ import annotations

import asyncio

import pytest
from interlink_nats.kernel.tasks import cancel_and_wait


async def test_running_tasks_are_cancelled_and_ended_when_it_returns() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await started.wait()
    await cancel_and_wait(*tasks, None)
    assert all(task.cancelled() for task in tasks)


async def test_what_a_task_raises_on_its_way_out_is_not_the_callers() -> None:
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("clean-up failed")  # what a careless task does

    failed = asyncio.create_task(fails_when_cancelled())
    done = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0)
    await done
    await cancel_and_wait(failed, done)
    assert failed.done() and isinstance(failed.exception(), RuntimeError)


async def test_the_caller_can_still_be_cancelled_while_it_waits() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # takes its time to end: the caller waits for it

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0)
    assert not stopper.done()
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert not task.done()
    release.set()
    await task
