"""Run batch-system commands: always ``create_subprocess_exec`` (never a shell), bounded in time,
with failures turned into :class:`CommandFailed` that carries argv, exit code and stderr."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from interlink_nats.submitters.core.backend import BackendUnavailable, CommandFailed


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
) -> Completed:
    """Run ``argv`` to completion; raise CommandFailed on a non-zero exit (when ``check``) or after ``time_limit``."""
    argv = [str(a) for a in argv]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
    except FileNotFoundError as exc:
        raise BackendUnavailable(f"command not found: {argv[0]}") from exc
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {argv[0]}: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise CommandFailed(argv, None, f"no answer within {time_limit:g}s") from None
    done = Completed(argv, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stderr or done.stdout)
    return done


def environ_with(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env
