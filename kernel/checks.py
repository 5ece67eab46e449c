"""The ``check`` commands' verdicts (``submitter check``, ``gateway check``): one row per thing tried, a table.

Why a table: an admin runs the check once before ``systemctl enable`` and must see every problem at once,
not the first one of a start that stops there. Pure: the commands try things, this module only says them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

OK = "ok"
FAILED = "FAILED"
WARNING = "warning"
"""A problem this host cannot prove (e.g. a runtime the batch nodes run, missing on the submit host)."""


@dataclass(frozen=True)
class Check:
    """One thing tried: its name, ``OK``/``FAILED``/``WARNING``, and one line saying what was found."""

    name: str
    status: str
    detail: str


def table(checks: Sequence[Check]) -> str:
    """The checks as aligned columns (name, status, detail), one line each, newline-terminated."""
    width = max((len(c.name) for c in checks), default=0)
    return "".join(f"{c.name:<{width}}  {c.status:<7}  {c.detail}\n" for c in checks)


def exit_code(checks: Sequence[Check]) -> int:
    """0 when nothing FAILED (warnings included), 2 otherwise: what the configuration makes fail is bad input."""
    return 2 if any(c.status == FAILED for c in checks) else 0
