"""kernel.tasks: how every process stops its loops (cancel_and_wait; cancel_until_done for loops eating a cancel)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from interlink_nats.kernel.tasks import cancel_and_wait, cancel_until_done


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


async def test_a_retry_loop_that_eats_one_cancel_is_cancelled_again_until_it_ends() -> None:
    """The shape of nats-py's first-connect loop: an attempt that catches CancelledError and tries again."""
    attempts = 0

    async def retries_for_ever() -> None:
        nonlocal attempts
        while True:
            attempts += 1
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)  # an attempt (its close path swallows the cancel)
            await asyncio.sleep(0.05)  # the pause between attempts: a cancel here gets through

    task = asyncio.create_task(retries_for_ever())
    await asyncio.sleep(0)
    assert await cancel_until_done(task, again_every_s=0.01, within_s=60)
    assert task.cancelled() and attempts >= 1


async def test_a_task_that_will_not_end_is_left_behind_after_the_bound() -> None:
    deaf = True

    async def deaf_to_cancels() -> None:
        while deaf:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    task = asyncio.create_task(deaf_to_cancels())
    await asyncio.sleep(0)
    assert not await cancel_until_done(task, again_every_s=0.01, within_s=0.1)
    assert not task.done()  # the stop goes on without it, bounded
    deaf = False
    assert await cancel_until_done(task, within_s=60)
