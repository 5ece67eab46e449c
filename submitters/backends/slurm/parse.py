"""Pure Slurm text handling: sbatch argument building, squeue/sacct/sinfo parsing, state mapping.

Tested from recorded output (tests/backends/slurm/test_slurm_parse.py); the backend only runs the commands.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import ne

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.slurm import array_ids
from interlink_nats.submitters.backends.slurm.flags import Flag
from interlink_nats.submitters.core import backend as base
from interlink_nats.submitters.core.backend import (
    Accounted,
    BackendError,
    BackendState,
    Capacity,
    CommandUnusable,
    FailureRules,
    JobAlreadyEnded,
    Observation,
    SubmitRejected,
)

SQUEUE_FORMAT = "JobArrayID:|,Name:|,State:|,Reason:|,exit_code:|,StartTime:|,EndTime:|,tres-alloc:"
"""``squeue -O``: '|' after each field (JobArrayID: a plain job's id, an array task's ``<id>_<i>``, pending tasks'
``<id>_[3-19]``: ``array_ids``), full widths (no padding); exit_code is a raw wait status; tres-alloc is
what slurmctld allocated (``cpu=2,mem=512M,node=1,billing=2,gres/gpu=1``): an ended job's usage (``core.usage``)."""
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Start,End,AllocTRES,ElapsedRaw"
"""``sacct -X -P -o``: the allocation's TRES and its run time in seconds come in the same call as the state."""
SINFO_FORMAT = "%N|%c|%m|%G"

_STATES: dict[str, BackendState] = {
    "PENDING": BackendState.QUEUED,
    "CONFIGURING": BackendState.QUEUED,
    "REQUEUED": BackendState.QUEUED,
    "REQUEUE_FED": BackendState.QUEUED,
    "REQUEUE_HOLD": BackendState.QUEUED,
    "RESV_DEL_HOLD": BackendState.QUEUED,
    "RUNNING": BackendState.RUNNING,
    "COMPLETING": BackendState.RUNNING,
    "SIGNALING": BackendState.RUNNING,
    "STAGE_OUT": BackendState.RUNNING,
    "RESIZING": BackendState.RUNNING,
    "SUSPENDED": BackendState.RUNNING,
    "STOPPED": BackendState.RUNNING,
    "COMPLETED": BackendState.COMPLETED,
    "FAILED": BackendState.FAILED,
    "BOOT_FAIL": BackendState.NODE_FAIL,
    "NODE_FAIL": BackendState.NODE_FAIL,
    "SPECIAL_EXIT": BackendState.FAILED,
    "CANCELLED": BackendState.CANCELLED,
    "REVOKED": BackendState.CANCELLED,
    "TIMEOUT": BackendState.TIMEOUT,
    "DEADLINE": BackendState.DEADLINE,
    "OUT_OF_MEMORY": BackendState.OUT_OF_MEMORY,
    "PREEMPTED": BackendState.PREEMPTED,
}


class Command(enum.Enum):
    """The Slurm commands the backend runs (named by role: the configured paths may be wrappers)."""

    SBATCH = "sbatch"
    SQUEUE = "squeue"
    SACCT = "sacct"
    SCANCEL = "scancel"
    SINFO = "sinfo"


# stderr of any Slurm command that means "try again later", not "this is wrong".
_TRANSIENT = re.compile(
    r"unable to contact slurm controller|socket timed out|temporarily unable|resource temporarily unavailable|"
    r"connection refused|communication connection failure|slurm_persist_conn|zero bytes were transmitted|"
    r"no answer within|sending.*failed|Job submit/allocate failed: Slurm backup controller in standby mode",
    re.IGNORECASE,
)
_FAILURES: Mapping[Command, FailureRules] = {
    Command.SBATCH: [(re.compile(""), SubmitRejected)],  # only sbatch refuses a job for good
    Command.SACCT: [(re.compile(r"accounting storage|slurmdbd", re.IGNORECASE), CommandUnusable)],
    Command.SCANCEL: [(re.compile(r"invalid job id|already completing", re.IGNORECASE), JobAlreadyEnded)],
}


def classify_failure(command: Command, returncode: int | None, stderr: str) -> type[BackendError]:
    """Which error a failed Slurm command is (``returncode`` None: it timed out); see ``base.classify_failure``."""
    return base.classify_failure(returncode, stderr, transient=_TRANSIENT, rules=_FAILURES.get(command, ()))


def map_state(raw: str) -> BackendState | None:
    """``CANCELLED by 0`` → CANCELLED; unknown words → None (the caller keeps the job as it was)."""
    word = raw.strip().split(" ", 1)[0].rstrip("+").upper()
    return _STATES.get(word)


def resource_flags(req: pb.ResourceRequest | None) -> list[str]:
    """Pod resources → sbatch flags (cpus rounded up, memory in MiB rounded up, time in whole minutes)."""
    if req is None:
        return []
    flags: list[str] = []
    if req.cpu_millis > 0:
        flags.append(f"--cpus-per-task={max(1, math.ceil(req.cpu_millis / 1000))}")
    if req.memory_bytes > 0:
        flags.append(f"--mem={max(1, math.ceil(req.memory_bytes / 2**20))}M")
    if req.gpus > 0:
        flags.append(f"--gres=gpu:{req.gpus}")
    if req.wall_time is not None and req.wall_time.total_seconds() > 0:
        flags.append(f"--time={format_minutes(req.wall_time)}")
    return flags


def format_minutes(limit: dt.timedelta) -> str:
    """Slurm time ``D-HH:MM:00`` rounded up to the minute (Slurm's granularity)."""
    minutes = max(1, math.ceil(limit.total_seconds() / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def sbatch_argv(
    sbatch: str,
    *,
    uid: str,
    job_dir: str,
    script: str,
    pool_flags: Sequence[Flag],
    pod_flags: Sequence[Flag],
    sized: Sequence[str],
    site: Sequence[str] = (),
) -> list[str]:
    """The whole sbatch command, a single pod's or a gang's. Later flags win in sbatch, so the order is the
    precedence: pool flags < pod flags (flavor's, then annotation's) < the pod's resources (``sized``:
    :func:`resource_flags`, or ``gang.gang_resource_flags``) < site policy (``site``: ``--account``, ``--uid``,
    ``--gid``, decided by the backend) < what the submitter must control. The flags come parsed and checked
    (:mod:`.flags`) and are written ``--name=value``, so sbatch reads what was checked. Where the flags set memory
    per node or per GPU, a gang's memory per CPU is left out: sbatch refuses two of those at once (the launcher
    splits a node's memory)."""
    flags = [*pool_flags, *pod_flags]
    if any(f.name in _OTHER_MEMORY for f in flags):
        sized = [f for f in sized if not f.startswith("--mem-per-cpu=")]
    return [
        sbatch,
        *(f.argv() for f in flags),
        *sized,
        *site,
        f"--job-name={uid}",
        f"--chdir={job_dir}",
        f"--output={job_dir}/job.out",
        "--parsable",
        script,
    ]


_OTHER_MEMORY = ("mem", "mem-per-gpu")


def parse_sbatch_id(stdout: str) -> str:
    """``--parsable`` prints ``<id>`` or ``<id>;<cluster>``."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout.strip()!r}")
    return job_id


_ISO_SECONDS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")


@functools.lru_cache(maxsize=4096)
def parse_time(value: str) -> float | None:
    """Slurm's local ``YYYY-MM-DDTHH:MM:SS`` (``N/A``/``Unknown``/``None`` → None).

    The exact form is taken apart by a regex (strptime costs ~20 µs, twice per changed squeue line), and
    remembered: jobs that end in the same poll interval share their end times, often their start times.
    """
    value = value.strip()
    if not value or not value[0].isdigit():
        return None
    try:
        m = _ISO_SECONDS.fullmatch(value)
        if m is not None:
            year, month, day, hour, minute, second = map(int, m.groups())
            return dt.datetime(year, month, day, hour, minute, second).timestamp()
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str
    name: str
    observation: Observation


_TRES_UNITS = {"": 2**20, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
"""Slurm writes a TRES memory figure in MB unless a suffix says otherwise (powers of 1024)."""
_TRES_MEM = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGTP]?)")


@functools.lru_cache(maxsize=1024)
def parse_tres(text: str, elapsed_s: float | None = None) -> Accounted | None:
    """A TRES string (squeue's tres-alloc, sacct's AllocTRES) → the allocation; None when it names no CPUs (a
    job never allocated, or text that is not TRES). GPUs: ``gres/gpu`` (the typed ``gres/gpu:<type>`` entries
    repeat it), else the typed ones summed."""
    values: dict[str, str] = {}
    for item in text.strip().split(","):
        key, sep, value = item.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    if not values.get("cpu", "").isdigit():
        return None
    memory = 0
    m = _TRES_MEM.fullmatch(values.get("mem", ""))
    if m is not None:
        memory = round(float(m.group(1)) * _TRES_UNITS[m.group(2)])
    gpu_text = values.get("gres/gpu")
    typed = [v for k, v in values.items() if k.startswith("gres/gpu:") and v.isdigit()]
    gpus = int(gpu_text) if gpu_text is not None and gpu_text.isdigit() else sum(map(int, typed))
    return Accounted(int(values["cpu"]) * 1000, memory, gpus, elapsed_s)


def _observation(
    state_raw: str,
    reason: str,
    code: int | None,
    sig: int | None,
    start: str,
    end: str,
    accounted: Accounted | None = None,
) -> Observation | None:
    state = map_state(state_raw)
    if state is None:
        return None
    return Observation(
        state,
        exit_code=code,
        signal=sig,
        reason="" if reason == "None" else reason,
        raw_state=state_raw.strip(),
        started_at=parse_time(start),
        finished_at=parse_time(end),
        accounted=accounted,
    )


def parse_squeue_line(line: str) -> SlurmJob | None:
    """One line of ``squeue -h -O SQUEUE_FORMAT`` (None: not a plain job we can map)."""
    parts = line.rstrip("\n").split("|")
    if len(parts) < 7:
        return None
    job_id, name, state, reason, raw_exit, start, end = (p.strip() for p in parts[:7])
    if not _plain_id(job_id) and not array_ids.is_job_id(job_id):
        return None
    accounted = parse_tres(parts[7]) if len(parts) > 7 else None
    code = sig = None
    if raw_exit.isdigit():
        status = int(raw_exit)
        code, sig = (status >> 8) & 0xFF, status & 0x7F
    obs = _observation(state, reason, code, sig or None, start, end, accounted)
    return None if obs is None else SlurmJob(job_id, name, obs)


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """Lines of ``squeue -h -O SQUEUE_FORMAT`` → jobs by id (a pending range under each of its tasks' ids; het
    sub-jobs are ignored)."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        job = parse_squeue_line(line)
        if job is None:
            continue
        if _plain_id(job.job_id):
            jobs[job.job_id] = job
        else:
            jobs.update(dict.fromkeys(array_ids.expand(job.job_id), job))
    return jobs


def _plain_id(job_id: str) -> bool:
    """A plain job's id (ASCII digits, as ``array_ids``' grammar has it): nearly every line, so it skips the
    grammar's regular expressions, which cost a cold parse of 10,000 lines a third more (bench/poll.py)."""
    return job_id.isascii() and job_id.isdigit()


@dataclass(slots=True, eq=False)
class SqueueSnapshot:
    """The last ``squeue``: its raw lines (each with what it parsed to) and the jobs by id.

    Brought up to date in place by :func:`squeue_changes` (copying two dicts of 10,000 entries at every
    poll cost more than the diff they hold): whoever passes one in hands it over. Compared by identity.
    """

    lines: dict[str, SlurmJob | None]
    by_id: dict[str, SlurmJob]
    text: str = ""
    """The whole output it was read from: the same output again is recognised without splitting it."""
    rows: list[str] = field(default_factory=list)
    """That output's lines in order: the next output is compared with them place by place (see
    :func:`squeue_changes`)."""


EMPTY_SQUEUE = SqueueSnapshot({}, {})
"""Before any squeue; never changed (:func:`squeue_changes` starts a new snapshot from it)."""


def parse_squeue_since(text: str, last: SqueueSnapshot) -> SqueueSnapshot:
    """:func:`parse_squeue`, parsing only the lines that are not in ``last`` (same line: same SlurmJob object).

    Why: a steady poll of thousands of jobs sees the same lines again; only the few that changed are
    parsed, and reusing the objects lets the poller skip unchanged jobs.
    """
    return squeue_changes(text, last)[0]


def squeue_changes(text: str, last: SqueueSnapshot) -> tuple[SqueueSnapshot, set[str]]:
    """:func:`parse_squeue_since`, and the ids of the jobs whose line changed, appeared or left.

    The ids are read from the raw lines, so a line that does not parse still names its job. The lines (split at
    ``\n`` only: a stray ``\r`` or other break inside a field leaves the line whole, and the field stripped)
    are compared with the last output's place by place, in C (``map(ne)``): squeue lists the jobs in a
    steady order, so a job whose line changed is at the same place and only the places that differ are
    looked at, without hashing 10,000 lines into a set at every poll. Exact whatever the order: a line at
    a place that differs is new only if the last output did not have it anywhere (``lines``), and gone
    only if no differing place has it now (the places that agree hold the same lines in both, and a line
    at one place only: else every line is looked up). Jobs that moved cost a lookup each, nothing more.
    ``last`` is updated in place and returned (see ``SqueueSnapshot``).
    """
    if text == last.text and last.lines:
        return last, set()  # the common quiet poll: one memcmp, no line split
    rows = text.split("\n")  # squeue ends its lines with \n (splitlines looks for eight other breaks: 60 % more)
    if not rows[-1]:
        rows.pop()  # after the last line's \n
    old = last.rows
    places = list(compress(range(len(rows)), map(ne, rows, old)))
    both = min(len(rows), len(old))
    came = {rows[i] for i in places}
    came.update(rows[both:])
    went = {old[i] for i in places}
    went.update(old[both:])
    lines, by_id = last.lines, last.by_id
    new = {line for line in came if line not in lines}
    if len(old) == len(lines):  # no line twice in the last output: one at a place that agrees is still there
        gone = went - came
    else:
        now = set(rows)
        gone = {line for line in went if line not in now}
    if last is not EMPTY_SQUEUE:
        last.text, last.rows = text, rows
    if not gone and not new:
        return last, set()  # the same lines in another order
    changed = {i for line in gone | new for i in _ids_of(line)}
    if last is EMPTY_SQUEUE:
        last = SqueueSnapshot({}, {}, text, rows)
        lines, by_id = last.lines, last.by_id
    for line in gone:
        job = lines.pop(line)
        for job_id in _ids_of(line) if job is not None else ():
            if by_id.get(job_id) is job:
                del by_id[job_id]
    for line in new:
        job = lines[line] = parse_squeue_line(line)
        if job is not None:
            by_id.update(dict.fromkeys(_ids_of(line), job))
    return last, changed


def _ids_of(line: str) -> list[str]:
    """The ids a squeue line stands for, read from its first field (a pending range: each of its tasks; a field
    outside the grammar: itself, which names no tracked job)."""
    job_id = line.split("|", 1)[0].strip()
    return [job_id] if _plain_id(job_id) else (array_ids.expand(job_id) or [job_id])


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """Lines of ``sacct -X -n -P -o SACCT_FIELDS`` (ExitCode is ``code:signal``; AllocTRES and ElapsedRaw may be
    absent: lines of the fields before them still parse)."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        job_id, name, state, exit_code, start, end = (p.strip() for p in parts[:6])
        if not array_ids.is_job_id(job_id):
            continue
        code = sig = None
        if ":" in exit_code:
            a, b = exit_code.split(":", 1)
            code = int(a) if a.isdigit() else None
            sig = int(b) if b.isdigit() and int(b) else None
        elapsed = parts[7].strip() if len(parts) > 7 else ""
        accounted = parse_tres(parts[6], float(elapsed) if elapsed.isdigit() else None) if len(parts) > 6 else None
        obs = _observation(state, "", code, sig, start, end, accounted)
        if obs is not None:
            jobs.update(dict.fromkeys(array_ids.expand(job_id), SlurmJob(job_id, name, obs)))
    return jobs


_GPU = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


def parse_sinfo(text: str) -> Capacity:
    """``sinfo -h -N -o SINFO_FORMAT`` → total capacity (a node listed in several partitions counts once)."""
    seen: dict[str, tuple[int, int, int]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].strip():
            continue
        name, cpus, mem, gres = (p.strip() for p in parts[:4])
        gpus = sum(int(m) for m in _GPU.findall(gres))
        try:
            seen[name] = (int(cpus), int(mem.rstrip("+")), gpus)
        except ValueError:
            continue
    return Capacity(
        cpu_millis=sum(c for c, _, _ in seen.values()) * 1000,
        memory_bytes=sum(m for _, m, _ in seen.values()) * 2**20,
        gpus=sum(g for _, _, g in seen.values()),
        nodes=len(seen),
    )


SINFO_FREE_FORMAT = "NodeList:|,CPUsState:|,Memory:|,AllocMem:|,Gres:|,GresUsed:|,StateCompact:|"
"""``sinfo -h -N -O``: what is idle on each node, in one call (CPUs as allocated/idle/other/total)."""
_UNAVAILABLE_NODE = re.compile(
    r"down|drain|drng|fail|maint|resv|reserved|unk|power|boot|futr|inval|no_respond", re.IGNORECASE
)


def parse_sinfo_free(text: str) -> Capacity:
    """``sinfo -h -N -O SINFO_FREE_FORMAT`` → what is free now: idle CPUs, unallocated memory and GPUs of the
    nodes that can take a job (drained, down and reserved nodes give nothing; a node counts once)."""
    seen: dict[str, tuple[int, int, int]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 7 or not parts[0]:
            continue
        name, cpus, mem, alloc, gres, used, state = parts[:7]
        if _UNAVAILABLE_NODE.search(state) or state.endswith(("*", "~", "#", "!", "%", "$", "@")):
            seen[name] = (0, 0, 0)
            continue
        try:
            idle = int(cpus.split("/")[1])
            free_mem = max(0, int(mem.rstrip("+")) - int(alloc or 0))
        except (ValueError, IndexError):
            continue
        gpus = sum(int(m) for m in _GPU.findall(gres)) - sum(int(m) for m in _GPU.findall(used.split("(IDX")[0]))
        seen[name] = (idle, free_mem if idle else 0, max(0, gpus) if idle else 0)
    return Capacity(
        cpu_millis=sum(c for c, _, _ in seen.values()) * 1000,
        memory_bytes=sum(m for _, m, _ in seen.values()) * 2**20,
        gpus=sum(g for _, _, g in seen.values()),
        nodes=sum(1 for c, _, _ in seen.values() if c),
    )


def names_to_ids(jobs: Mapping[str, SlurmJob]) -> dict[str, str]:
    """Job name (pod UID, or an array's uid) → newest job id with that name (an array's own id, not a task's)."""
    out: dict[str, str] = {}
    for job in sorted(jobs.values(), key=lambda j: int(array_ids.base_id(j.job_id))):
        out[job.name] = array_ids.base_id(job.job_id)
    return out
