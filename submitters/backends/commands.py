"""Whether the programs a backend runs are there: a submitter that cannot submit says so.

Why: a Slurm submitter without ``sbatch`` used to start, answer /healthz 200 and turn every Submit into a
transient failure the gateway waited out. Each backend declares its programs
(``Backend.commands``); the runtime refuses to start while one is missing, the poll loop re-checks them, and
/healthz and Submit read the last result. A check looks again where each program was found last (an
``access`` and a ``stat`` each: ~70 µs for Slurm's four on a loaded host; a full PATH search, ~0.15 ms a program,
only for one not found there): cheap enough for every poll, and never on a Submit's path while they are there.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.checks import FAILED, OK, WARNING, Check
from interlink_nats.submitters.core.backend import Backend, BatchCommand
from interlink_nats.submitters.core.errors import SubmitterError

log = logging.getLogger(__name__)


def _runnable(path: str) -> bool:
    return os.access(path, os.X_OK) and os.path.isfile(path)


def commands_problem(
    commands: Sequence[BatchCommand], path: str | None = None, found: dict[BatchCommand, str] | None = None
) -> str | None:
    """Why some of ``commands`` cannot be run (not found on ``path``, default PATH; not an executable file), in
    one line naming each program and the setting that sets its path; None when all can be run. ``found``:
    where each was found last, looked at first (and kept up to date)."""
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    found = {} if found is None else found
    not_on_path: list[str] = []
    problems: list[str] = []
    for command in dict.fromkeys(commands):
        program = command.program
        known = found.get(command)
        if known is not None and _runnable(known):
            continue
        where = shutil.which(program, path=search)
        if where is not None:
            found[command] = where
            continue
        found.pop(command, None)
        fix = f"set its path with {command.setting}" if command.setting else "install it or put it on PATH"
        if os.sep in program:
            why = "is not an executable file" if os.path.exists(program) else "does not exist"
            problems.append(f"{program} {why} ({fix})")
        else:
            not_on_path.append(f"{program} ({fix})")
    if not_on_path:
        problems.insert(0, f"not on PATH ({search}) or not executable: {', '.join(not_on_path)}")
    return "; ".join(problems) if problems else None


class CommandCheck:
    """The last verdict on a backend's programs (``problem``), refreshed by :meth:`refresh`.

    A change is logged once (an error when a program goes missing, info when all are back), not at every
    check or Submit.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._found: dict[BatchCommand, str] = {}
        self.problem: str | None = None
        """None while every program can be run; else why not, naming them (what /healthz and Submit say)."""

    def require(self) -> None:
        """At start (after the BuildConfig, which may name one): raise :class:`SubmitterError` while a program
        cannot be run, the CLI's one line and exit 2; not logged besides."""
        self.problem = commands_problem(self._backend.commands(), found=self._found)
        if self.problem is not None:
            raise SubmitterError(self.message())

    def refresh(self) -> str | None:
        """Check the programs again (the backend's current ones: a BuildConfig may add one); the new verdict."""
        problem = commands_problem(self._backend.commands(), found=self._found)
        if problem != self.problem:
            if problem is not None:
                log.error("%s cannot submit: %s", self._backend.name, problem)
            else:
                log.info("%s can run its commands again", self._backend.name)
        self.problem = problem
        return problem

    def message(self) -> str:
        """The refusal a Submit answers while ``problem`` is set."""
        return f"{self._backend.name} cannot submit: {self.problem}"


JOBS_RUN_HERE = frozenset({"shell"})
"""Backends whose jobs run on the submitter's host: a runtime missing here fails every pod."""


def runtime_command(build_config: pb.BuildConfig) -> BatchCommand | None:
    """The program the pool's jobs run containers with (the renderer's choice: ``executable``, else the
    runtime's name; unset means apptainer); None for ``runtime: none`` (pods run as host commands)."""
    runtime = build_config.runtime or pb.ContainerRuntime.APPTAINER
    if runtime == pb.ContainerRuntime.NONE:
        return None
    return BatchCommand(build_config.executable or runtime.name.lower(), "build_config.executable")


def runtime_check(backend: str, build_config: pb.BuildConfig) -> Check:
    """Whether the BuildConfig's runtime can be run here; FAILED where the jobs run on this host, a warning
    where they run on batch nodes (this host cannot see theirs)."""
    command = runtime_command(build_config)
    if command is None:
        return Check("runtime", OK, "none: pods run as host commands, no container runtime needed")
    problem = commands_problem([command])
    if problem is None:
        return Check("runtime", OK, f"{command.program}: {shutil.which(command.program)}")
    if backend in JOBS_RUN_HERE:
        return Check("runtime", FAILED, f"every pod would fail: {problem}")
    return Check("runtime", WARNING, f"{problem}; the jobs run it on the batch nodes: it must be there")


def start_warnings(backend: str, build_config: pb.BuildConfig) -> list[str]:
    """What the start says will fail (one line each), besides the programs it already requires."""
    found = runtime_check(backend, build_config)
    return [f"runtime: {found.detail}"] if found.status != OK else []
