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


def test_a_command_answers_at_its_exit_though_it_left_a_process_holding_its_output(
    run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path
) -> None:
    """Its output is read once it exited: a process it left behind with its stdout and stderr (a site's wrapper
    that starts a helper) neither holds the command until the time limit nor blocks it on a full pipe."""
    pid_file = tmp_path / "left"
    script = f"sleep 60 & echo $! > {pid_file}; head -c 200000 /dev/zero | tr '\\0' y; printf id; echo warn >&2"
    try:
        done = run(run_command(["bash", "-c", script], time_limit=30))
        assert (len(done.stdout), done.stdout[-2:], done.stderr) == (200_002, "id", "warn\n")
    finally:
        if pid_file.exists():  # else the failure above is the one to see
            os.kill(int(pid_file.read_text()), 9)


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


def test_a_name_in_no_directory_of_the_path_spawns_nothing(
    run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program nowhere on the command's PATH is "not found" without a spawn per directory (a shell pool without
    ``nvidia-smi`` spawned once per PATH directory at each announcement: 11 vforks every 30 s, seen with strace);
    a file of that name that cannot be run still gives its own error, as ``Popen`` would."""
    spawned: list[str] = []
    posix_spawn = os.posix_spawn

    def counted(path: str, *args: Any, **kwargs: Any) -> int:
        spawned.append(path)
        return posix_spawn(path, *args, **kwargs)

    monkeypatch.setattr(os, "posix_spawn", counted)
    path = os.pathsep.join(str(tmp_path / f"empty{i}") for i in range(10))
    with pytest.raises(BackendUnavailable, match=r"^command not found: no-such-nvidia-smi$"):
        run(run_command(["no-such-nvidia-smi"], env={"PATH": path}))
    assert spawned == []
    (tmp_path / "empty7").mkdir()
    (tmp_path / "empty7" / "no-such-nvidia-smi").write_text("#!/bin/sh\n")  # there, but not executable
    with pytest.raises(BackendUnavailable, match=r"^cannot run no-such-nvidia-smi: .*Permission denied"):
        run(run_command(["no-such-nvidia-smi"], env={"PATH": path}))
    assert spawned == [str(tmp_path / "empty7" / "no-such-nvidia-smi")], "only where a file of that name is"


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


def test_a_bare_name_is_found_on_the_commands_own_path(
    run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path
) -> None:
    """As ``Popen`` finds it: on the PATH of the environment the command gets, not the submitter's."""
    tool = tmp_path / "site-squeue"
    tool.write_text("#!/bin/sh\necho found here\n")
    tool.chmod(0o755)
    done = run(run_command(["site-squeue"], env={"PATH": f"/nonexistent:{tmp_path}"}))
    assert done.stdout == "found here\n"
    tool.chmod(0o644)
    with pytest.raises(BackendUnavailable, match=r"^cannot run site-squeue: .*Permission denied"):
        run(run_command(["site-squeue"], env={"PATH": f"{tmp_path}:/nonexistent"}))


def test_a_command_finds_sigpipe_at_its_default(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    """Python ignores SIGPIPE; a command must not inherit that (``yes`` ends by the signal, 128 + 13, as from a
    shell), as ``Popen(restore_signals=True)`` did."""
    done = run(run_command(["bash", "-c", 'yes | head -c 1 >/dev/null; echo "${PIPESTATUS[0]}"']))
    assert done.stdout == "141\n"


def test_a_command_gets_no_descriptor_but_its_three(tmp_path: Path) -> None:
    """A descriptor the submitter was started with (a make's jobserver pipe, inheritable) does not reach a
    command, nor do its own (close-on-exec), as with ``Popen(close_fds=True)``."""
    import subprocess
    import sys

    code = (
        "import asyncio, os\n"
        "from interlink_nats.submitters.backends.proc import run_command\n"
        "done = asyncio.run(run_command(['ls', '/proc/self/fd']))\n"
        "print(sorted(int(n) for n in done.stdout.split()))\n"
    )
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], pass_fds=(write_end,), capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert out.stdout.strip() == "[0, 1, 2, 3]", "stdin, stdout, stderr and ls's own listing"


def test_a_bare_name_on_a_long_path_costs_one_spawn(
    run: Callable[[Coroutine[Any, Any, Any]], Any], tmp_path: Path
) -> None:
    """Found once, then spawned where it was found: each failed spawn in a directory without it would cost a vfork
    and an exec, a wait of the event loop each (a voluntary context switch: the figure counted here; found by
    ``bench/lifecycle.py``, 53 wake-ups a Slurm pod where 7 were expected)."""
    import resource

    tool = tmp_path / "bin" / "site-sbatch"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'Submitted batch job 7'\n")
    tool.chmod(0o755)
    path = os.pathsep.join([*(str(tmp_path / f"empty{i}") for i in range(40)), str(tool.parent)])

    async def switches_per_command(count: int) -> float:
        await run_command(["site-sbatch"], env={"PATH": path})  # found here
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        for _ in range(count):
            assert (await run_command(["site-sbatch"], env={"PATH": path})).stdout == "Submitted batch job 7\n"
        return (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before) / count

    assert run(switches_per_command(20)) < 10, "about 40 failed spawns a command"
