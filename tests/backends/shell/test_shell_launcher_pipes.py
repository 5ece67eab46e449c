"""The shell launcher's pipes, read without streams (``processes._LauncherPipes``).

Its answers (job directory NUL pid NUL) arrive in whatever chunks the pipe gives; each resolves the oldest launch of
its directory. A launcher that dies fails what it had not answered and the next launch starts another; a launcher
that floods its output without finishing an answer is treated as gone. Real launchers under both event loops the
project runs on (the submitter's uvloop, the tests' asyncio): uvloop's subprocess transport is not asyncio's class.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.submitters.backends.shell.processes import (
    ANSWER_LIMIT,
    Launcher,
    _LauncherPipes,
)
from interlink_nats.submitters.core.backend import BackendUnavailable, JobSpec
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir

WAIT_S = 60.0

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


def spec(root: Path) -> JobSpec:
    uid = str(uuid.uuid4())
    job_dir = job_dir_for(root, uid)
    return JobSpec(uid, job_dir, prepare_job_dir(job_dir, "#!/bin/bash\ntrue\n", make_layout=False))


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_launches_are_answered_and_a_dead_launcher_is_replaced(loop: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        launcher = Launcher("bash")
        try:
            specs = [spec(tmp_path) for _ in range(8)]
            pids = await asyncio.gather(*(launcher.launch(s) for s in specs))
            assert all(isinstance(pid, int) and pid > 0 for pid in pids), pids
            assert len(set(pids)) == len(pids)
            for s in specs:
                await until((s.job_dir / ".shell.exit").exists, f"{s.uid}'s exit file")
            assert await launcher.launch(specs[0]) is None, "a claimed directory is not started again"

            pipes = launcher._pipes
            assert pipes is not None and pipes.transport is not None
            pipes.transport.kill()
            await pipes.exited
            again = spec(tmp_path)
            assert isinstance(await launcher.launch(again), int)
            assert launcher.spawned == 2
            await until((again.job_dir / ".shell.exit").exists, "the exit file of a job the second launcher ran")
        finally:
            await launcher.close()
        assert launcher._pipes is None

    LOOPS[loop](scenario())


async def _answers(chunks: list[bytes], keys: list[bytes]) -> tuple[list[int | None], Launcher]:
    launcher = Launcher("bash")
    pipes = _LauncherPipes(launcher)
    launcher._pipes = pipes
    loop = asyncio.get_running_loop()
    futures = []
    for key in keys:
        fut: asyncio.Future[int | None] = loop.create_future()
        launcher._waiting.setdefault(key, deque()).append(fut)
        futures.append(fut)
    for chunk in chunks:
        pipes.pipe_data_received(1, chunk)
    results: list[int | None] = []
    for fut in futures:
        assert fut.done(), "every answer was read"
        results.append(fut.result())
    return results, launcher


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_answers_are_read_whatever_chunks_the_pipe_gives(cuts: list[int]) -> None:
    """Answers split anywhere (inside a directory, between it and its pid, several in one read) resolve the launch
    of their directory, in order for one directory launched twice ("claimed": not started again)."""
    keys = [b"/jobs/a", b"/jobs/b", b"/jobs/a"]
    stream = b"/jobs/b\x00202\x00/jobs/a\x00101\x00/jobs/a\x00claimed\x00"
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[i:j] for i, j in zip([0, *points], [*points, len(stream)], strict=True) if stream[i:j]]

    results, launcher = asyncio.run(_answers(chunks, keys))

    assert results == [101, 202, None]
    assert launcher._waiting == {}


def test_a_launcher_flooding_its_output_is_treated_as_gone() -> None:
    async def scenario() -> None:
        launcher = Launcher("bash")
        pipes = _LauncherPipes(launcher)
        launcher._pipes = pipes
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        launcher._waiting[b"/jobs/a"] = deque([fut])
        pipes.pipe_data_received(1, b"x" * (ANSWER_LIMIT + 1))
        with pytest.raises(BackendUnavailable, match="without finishing an answer"):
            await fut
        assert launcher._pipes is None, "the next launch starts another launcher"

    asyncio.run(scenario())


def test_what_a_dead_launcher_wrote_is_still_read_before_its_launches_fail() -> None:
    """The loop may tell the launcher's exit before the last of its output: an answer it wrote before it died
    still reaches its launch (that runner did start), and only at the end of its output do the launches it never
    answered fail, to be retried (the claim makes a retry of a started job a no-op)."""

    async def scenario() -> None:
        launcher = Launcher("bash")
        pipes = _LauncherPipes(launcher)
        launcher._pipes = pipes
        loop = asyncio.get_running_loop()
        started: asyncio.Future[int | None] = loop.create_future()
        unanswered: asyncio.Future[int | None] = loop.create_future()
        launcher._waiting[b"/jobs/a"] = deque([started])
        launcher._waiting[b"/jobs/b"] = deque([unanswered])

        pipes.process_exited()
        assert not unanswered.done(), "its output is not over yet"
        pipes.pipe_data_received(1, b"/jobs/a\x00101\x00")
        pipes.pipe_connection_lost(1, None)

        assert started.result() == 101
        with pytest.raises(BackendUnavailable):
            await unanswered
        assert launcher._pipes is None
        pipes.pipe_data_received(1, b"/jobs/c\x00303\x00")  # nothing more is read from it
        assert launcher._waiting == {}

    asyncio.run(scenario())
