"""Whether the programs a backend runs are there: a submitter that cannot submit says so.

Why: a Slurm submitter without ``sbatch`` used to start, answer /healthz 200 and turn every Submit into a
transient failure the gateway waited out (issue 38, finding 8). Each backend declares its programs
(``Backend.commands``); the runtime refuses to start while one is missing, the poll loop re-checks them, and
/healthz and Submit read the last result. A check is one ``stat`` per PATH entry and program (tens of µs):
cheap enough for every poll, never on a Submit's hot path while the programs are there.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence

from interlink_nats.submitters.core.backend import Backend, BatchCommand

log = logging.getLogger(__name__)


def commands_problem(commands: Sequence[BatchCommand], path: str | None = None) -> str | None:
    """Why some of ``commands`` cannot be run (not found on ``path``, default PATH; not an executable file), in
    one line naming each program and the setting that sets its path; None when all can be run."""
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    not_on_path: list[str] = []
    problems: list[str] = []
    for command in dict.fromkeys(commands):
        program = command.program
        if shutil.which(program, path=search) is not None:
            continue
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
        self.problem: str | None = None
        """None while every program can be run; else why not, naming them (what /healthz and Submit say)."""

    def refresh(self) -> str | None:
        """Check the programs again (the backend's current ones: a BuildConfig may add one); the new verdict."""
        problem = commands_problem(self._backend.commands())
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
