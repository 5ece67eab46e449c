"""``proc.run_command``: what a backend's batch commands give back, on both event loops the submitter may run on
(uvloop in production, asyncio's own where uvloop is absent), and that a command never outlives its caller."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.core.backend import BackendUnavailable, CommandFailed

LOOPS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    return LOOPS[request.param]


def gone(pid: int) -> bool:
    """Neither running nor a zombie: the child was killed and reaped."""
    return not Path(f"/proc/{pid}").exists()


def test_output_exit_code_and_large_output(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    script = "head -c 3000000 /dev/zero | tr '\\0' x; printf err >&2; exit 3"
    done = run(run_command(["bash", "-c", script], check=False))
    assert (done.returncode, len(done.stdout), set(done.stdout), done.stderr) == (3, 3_000_000, {"x"}, "err")


def test_failure_names_stderr(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    with pytest.raises(CommandFailed) as failed:
        run(run_command(["bash", "-c", "echo 'sbatch: error: Invalid account' >&2; exit 1"]))
    assert failed.value.returncode == 1
    assert "Invalid account" in str(failed.value)


def test_environment_and_directory(run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path) -> None:
    done = run(run_command(["bash", "-c", 'printf "%s %s" "$PWD" "$ONLY"'], env={"ONLY": "this"}, cwd=str(tmp_path)))
    assert done.stdout == f"{tmp_path} this"


def test_missing_command_is_unavailable(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    with pytest.raises(BackendUnavailable, match="command not found: no-such-squeue"):
        run(run_command(["no-such-squeue"]))


def test_time_limit_kills_and_reaps_the_command(run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(CommandFailed, match=r"no answer within 0\.5s"):
        run(run_command(["bash", "-c", f"echo $$ > {pid_file}; exec sleep 60"], time_limit=0.5))
    assert gone(int(pid_file.read_text()))


def test_cancelled_caller_kills_and_reaps_the_command(
    run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path
) -> None:
    started = tmp_path / "started"
    os.mkfifo(started)

    async def cancel_once_started() -> int:
        command = ["bash", "-c", f"echo $$ > {started}; exec sleep 60"]
        task = asyncio.ensure_future(run_command(command))
        async with asyncio.timeout(30):  # the event: the command wrote its pid into the FIFO
            pid = int(await asyncio.to_thread(started.read_text))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    assert gone(run(cancel_once_started()))


def test_no_descriptor_left_open(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    async def many() -> None:
        for _ in range(20):
            await run_command(["true"])

    run(many())  # the first loop of the process opens what it keeps for good (uvloop's own descriptors)
    before = len(os.listdir("/proc/self/fd"))
    run(many())
    assert len(os.listdir("/proc/self/fd")) <= before
