"""Pure: Slurm's job ids as squeue and sacct print them, job array tasks included, read with Slurm's own grammar.

An array's task is ``<array id>_<index>`` (``1234_5``); squeue folds the tasks still pending into one line whose id
is a range, ``1234_[3-19]`` or ``1234_[1,4-6%2]`` (the index list, then ``%N`` when the array is throttled).
The index list is the grammar of ``sbatch --array`` (slurm.schedmd.com ``job_array.html``: comma-separated
indexes and ``first-last`` ranges, each range with an optional ``:step``); slurmctld prints it back from its bitmap
(``bit_fmt``: ``1,4-6``). Tested in tests/backends/slurm/test_slurm_array_ids.py from the lines a real Slurm printed.
"""

from __future__ import annotations

import re

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

MAX_TASKS = 4_000_001
"""Slurm's largest ``MaxArraySize`` (slurm.conf): no range squeue prints holds more, so one that does is not read."""

_PLAIN = re.compile(r"[0-9]+")
_TASK = re.compile(r"([0-9]+)_([0-9]+)")
_RANGE = re.compile(r"([0-9]+)_\[([0-9,:\-]+)(?:%[0-9]+)?\]")
_PART = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")


def is_job_id(text: str) -> bool:
    """A plain job id, an array task's, or a pending range's (anything else, a het job's ``1234+0``, is not ours)."""
    return bool(_PLAIN.fullmatch(text) or _TASK.fullmatch(text) or _RANGE.fullmatch(text))


def task_indexes(spec: str) -> list[int]:
    """``1,4-6`` or ``0-9:3`` → the indexes, in order; ValueError for text outside the grammar or over MAX_TASKS."""
    out: list[int] = []
    for part in spec.split(","):
        m = _PART.fullmatch(part)
        if m is None:
            raise ValueError(f"not an array index list: {spec!r}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1 or len(out) + (last - first) // step + 1 > MAX_TASKS:
            raise ValueError(f"not an array index list: {spec!r}")
        out.extend(range(first, last + 1, step))
    return out


def expand(job_id: str) -> list[str]:
    """The job ids one squeue/sacct id stands for: itself, or each task of a pending range (``1234_[3-5]`` →
    ``1234_3``, ``1234_4``, ``1234_5``); none for an id outside the grammar (reports are untrusted input)."""
    m = _RANGE.fullmatch(job_id)
    if m is None:
        return [job_id] if _PLAIN.fullmatch(job_id) or _TASK.fullmatch(job_id) else []
    try:
        return [f"{m.group(1)}_{i}" for i in task_indexes(m.group(2))]
    except ValueError:
        return []


def base_id(job_id: str) -> str:
    """The array's own id of a task or range id (``1234_5`` → ``1234``); a plain id is its own."""
    return job_id.split("_", 1)[0]


def member_job_ids(array_id: str, count: int) -> tuple[str, ...]:
    """Each member's job id, task i running member i: ``<array id>_<i>``."""
    return tuple(f"{array_id}_{i}" for i in range(count))


def array_flag(count: int, throttle: int = 0) -> str:
    """``--array=0-<count-1>``, with ``%<throttle>`` when the site caps how many tasks run at once."""
    if count < 1:
        raise ValueError("an array needs at least one task")
    return f"--array=0-{count - 1}" + (f"%{throttle}" if throttle > 0 else "")
