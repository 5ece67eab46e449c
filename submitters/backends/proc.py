"""Run batch-system commands: never through a shell, bounded in time, with failures turned into
:class:`CommandFailed` that carries argv, exit code and stderr.

The child is started by :class:`subprocess.Popen` (CPython's ``vfork``), not by the event loop's
``subprocess_exec``: the submitter runs on uvloop, whose libuv spawn is a ``fork`` that copies the page
tables of the whole process, so each ``squeue`` or ``sbatch`` cost CPU in proportion to the submitter's
heap (12 ms against 2.8 ms with a 300 MB heap, measured; about 5 ms per poll with 10,000 jobs tracked).
Its output and its exit are then awaited on the loop: the pipes by readers on their descriptors, the exit
through a pidfd (a thread where there is none), so a command can still be cancelled and is killed when it is.

Every command is timed here, the one place they are run: :func:`time_commands` names where the durations go (the
submitter's /metrics), by command and outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from interlink_nats.submitters.core.backend import BackendUnavailable, CommandFailed

READ_CHUNK = 1 << 16
"""Bytes per read of a command's output (a pipe's whole buffer on Linux)."""


CommandTimer = Callable[[str, str, float], None]
"""Told of each batch command once it ended: (command, outcome, seconds). The outcomes: ``ok``, ``failed`` (a
non-zero exit), ``timeout`` (no answer within its time limit: killed), ``not_run`` (the program could not be
started), ``cancelled`` (the caller stopped waiting: the submitter stopping)."""

_timer: ContextVar[CommandTimer | None] = ContextVar("command_timer", default=None)


def time_commands(timer: CommandTimer | None) -> None:
    """Report every command run from now on in this context (the calling task and the tasks it starts) to
    ``timer``. A context, as the log fields are bound (``kernel.log_context``): set once where a submitter starts,
    not passed down through every backend to each of its commands."""
    _timer.set(timer)


class Timed:
    """The outcome of one timed command (``ok`` unless the body says otherwise or raises)."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome = "ok"


@contextlib.contextmanager
def timed(command: str) -> Iterator[Timed]:
    """Time the body as one run of ``command`` (a role such as ``sbatch``, never a pod's value) for the timer of
    this context (none: nothing is done); an exception sets the outcome (see :data:`CommandTimer`)."""
    timer = _timer.get()
    if timer is None:
        yield Timed()
        return
    started = time.perf_counter()
    done = Timed()
    try:
        yield done
    except CommandFailed as exc:
        done.outcome = "timeout" if exc.returncode is None else "failed"
        raise
    except BackendUnavailable:
        done.outcome = "not_run"
        raise
    except BaseException:
        done.outcome = "cancelled"
        raise
    finally:
        timer(command, done.outcome, time.perf_counter() - started)


@dataclass(frozen=True, slots=True)
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


async def run_command(
    argv: Sequence[str],
    *,
    time_limit: float = 60.0,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    cwd: str | None = None,
    command: str | None = None,
) -> Completed:
    """Run ``argv`` to completion; raise CommandFailed on a non-zero exit (when ``check``) or after ``time_limit``.

    ``command``: what it is timed as (its role, e.g. ``sbatch``: the configured program may be a wrapper); by
    default the program's file name."""
    argv = [str(a) for a in argv]
    with timed(command or Path(argv[0]).name) as done:
        completed = await _run(argv, time_limit=time_limit, env=env, check=check, cwd=cwd)
        if completed.returncode != 0:
            done.outcome = "failed"
        return completed


async def _run(
    argv: list[str], *, time_limit: float, env: Mapping[str, str] | None, check: bool, cwd: str | None
) -> Completed:
    try:
        # Blocks the loop only until the child's exec (vfork): see the module docstring for why not the loop's spawn.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
    except FileNotFoundError as exc:
        raise BackendUnavailable(f"command not found: {argv[0]}") from exc
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {argv[0]}: {exc}") from exc
    try:
        async with asyncio.timeout(time_limit):
            out, err = await asyncio.gather(_read_all(proc.stdout), _read_all(proc.stderr))
            returncode = await _exited(proc)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(_exited(proc))
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise CommandFailed(argv, None, f"no answer within {time_limit:g}s") from None
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    done = Completed(argv, returncode, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stderr or done.stdout)
    return done


async def _read_all(pipe: IO[bytes] | None) -> bytes:
    """Everything the child writes to ``pipe`` until it closes it, read on the loop as it comes.

    A reader on the descriptor, not a pipe transport: the caller keeps owning (and closes) the pipe, where a
    transport would close the descriptor itself and leave the file object to close it a second time.
    """
    assert pipe is not None
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:  # one read a wake-up: a chatty command cannot hold the loop
        if ended.done():
            return
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            ended.set_exception(exc)
            return
        if data:
            chunks.append(data)
        else:
            ended.set_result(None)  # end of file: the command closed its end

    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    """The child's exit status, awaited on a pidfd (Linux >= 5.3), else in a thread; the child is reaped."""
    if proc.poll() is not None:  # ended already (or reaped before): no descriptor needed
        return proc.returncode
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return await asyncio.to_thread(proc.wait)
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, exited)
    try:
        await readable
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return proc.wait()


def environ_with(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env
