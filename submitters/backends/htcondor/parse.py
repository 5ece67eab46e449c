"""Pure HTCondor text handling: ``condor_q``/``condor_history -json`` parsing, state mapping, constraints.

No I/O: tested directly (tests/backends/htcondor/test_htcondor_parse.py); the backend (``htcondor``) only runs the
commands. Submit descriptions are written by ``submit.py``.

Facts relied on (HTCondor manual and sources): ``condor_submit -terse`` prints
``<cluster>.<proc> - <cluster>.<proc>``, with ``-spool`` before it spools the input (so a spool failure
still prints the id); ``condor_q -json`` prints one JSON array of job ads, or nothing at all when no job
matches, ``condor_history -json`` prints ``[`` ``]`` then; ``condor_rm -totals`` prints one line of counts
(htcondor ``src/condor_rm.V6/rm.cpp``), the only way to tell "not found" from "permission denied", which
share the "Couldn't find/remove all jobs" text; Linux limits one argument to 128 KiB (MAX_ARG_STRLEN);
``JobStatus`` 1 Idle, 2 Running, 3 Removed, 4 Completed, 5 Held, 6 Transferring Output, 7 Suspended;
``HoldReasonCode`` 46/47: the job ran longer than ``allowed_job_duration``/``allowed_execute_duration``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from interlink_nats.submitters.core import backend as base
from interlink_nats.submitters.core.backend import (
    Accounted,
    BackendError,
    BackendState,
    BackendUnavailable,
    Capacity,
    FailureRules,
    JobAlreadyEnded,
    Observation,
    SubmitRejected,
)

ARG_MAX_BYTES = 128 * 1024 - 1
"""Linux's limit on ONE argument (MAX_ARG_STRLEN, 32 pages, its NUL included): a longer argv entry makes
exec fail with E2BIG, so every constraint and every batch of job ids is split to fit."""

POD_UID_ATTR = "InterlinkPodUID"
"""Custom job attribute naming the pod: how a job submitted just before a crash is found again."""
POOL_ATTR = "InterlinkPool"
"""Custom job attribute naming the interlink pool: every query is limited to the pool's own jobs."""
TIME_LIMIT_ATTR = "InterlinkTimeLimit"
"""Seconds a job may run (activeDeadlineSeconds plus a margin); ``periodic_remove`` enforces it."""

QUERY_ATTRS = (
    "ClusterId",
    "ProcId",
    "JobStatus",
    POD_UID_ATTR,
    POOL_ATTR,
    TIME_LIMIT_ATTR,
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "RemoveReason",
    "ExitCode",
    "ExitBySignal",
    "ExitSignal",
    "JobStartDate",
    "JobCurrentStartDate",
    "EnteredCurrentStatus",
    "CompletionDate",
)
"""The only attributes asked for (``-attributes``): the answer for 10,000 jobs stays small."""
USAGE_ATTRS = (
    "CpusProvisioned",
    "MemoryProvisioned",
    "GPUsProvisioned",
    "RequestCpus",
    "RequestMemory",
    "RequestGPUs",
    "RemoteWallClockTime",
)
"""What an ended job was allocated (the slot's provisioned share, else its request; memory in MiB) and its run time:
asked of ``condor_history`` only, where ended jobs are, in the call the poll makes anyway."""


def attributes(command: Command) -> str:
    """The ``-attributes`` of a query: the usage ones too for the history."""
    return ",".join((*QUERY_ATTRS, *USAGE_ATTRS) if command is Command.HISTORY else QUERY_ATTRS)


def accounted(ad: Mapping[str, Any]) -> Accounted | None:
    """An ended job's allocation and run time as its ad records them; None when it names no CPUs (not asked, or an
    unevaluated expression)."""
    cpus = _int(ad.get("CpusProvisioned")) or _int(ad.get("RequestCpus"))
    if cpus is None or cpus <= 0:
        return None
    memory = _int(ad.get("MemoryProvisioned")) or _int(ad.get("RequestMemory")) or 0
    gpus = _int(ad.get("GPUsProvisioned")) or _int(ad.get("RequestGPUs")) or 0
    wall = _int(ad.get("RemoteWallClockTime"))
    return Accounted(cpus * 1000, max(0, memory) * 2**20, max(0, gpus), float(wall) if wall and wall > 0 else None)


DURATION_HOLD_CODES = frozenset({46, 47})
"""JobDurationExceeded / JobExecuteExceeded: a site's own time limit, reported as DeadlineExceeded."""

_TERSE_ID = re.compile(r"(\d+)\.(\d+)\s*-\s*(\d+)\.(\d+)\s*")
# condor_* stderr that means "try again later", not "this is wrong".
_TRANSIENT = re.compile(
    r"failed to connect|connection refused|timed out|timeout|can't find address|cannot find address|"
    r"unable to locate|authenticat|communication error|no route to host|temporarily|"
    r"failed to fetch ads|SECMAN|connect to schedd",
    re.IGNORECASE,
)


class Command(enum.Enum):
    """The condor commands the backend runs (named by role: the configured paths may be wrappers)."""

    SUBMIT = "condor_submit"
    QUEUE = "condor_q"
    HISTORY = "condor_history"
    REMOVE = "condor_rm"
    TRANSFER_DATA = "condor_transfer_data"
    STATUS = "condor_status"


_FAILURES: Mapping[Command, FailureRules] = {
    Command.SUBMIT: [(re.compile(""), SubmitRejected)],  # only condor_submit refuses a job for good
    # Without a -totals line the schedd gave no answer: "Couldn't find/remove all jobs" alone is then a failure
    # to reach it (rm.cpp prints it for a missing answer too), not a job already gone.
    Command.REMOVE: [
        (re.compile(r"couldn't find/remove", re.IGNORECASE), BackendUnavailable),
        (re.compile(r"not found|does not exist|no jobs matched|already", re.IGNORECASE), JobAlreadyEnded),
    ],
}


def classify_failure(command: Command, returncode: int | None, stderr: str) -> type[BackendError]:
    """Which error a failed condor command is (``returncode`` None: it timed out); see ``base.classify_failure``."""
    return base.classify_failure(returncode, stderr, transient=_TRANSIENT, rules=_FAILURES.get(command, ()))


def quote(value: str) -> str:
    """A ClassAd string literal (constraints, job attributes). Control characters are refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"value {value!r} contains a control character")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_submit_id(stdout: str) -> str:
    """``condor_submit -terse`` → ``"<cluster>.<proc>"`` (one job per description)."""
    for line in reversed(stdout.strip().splitlines()):
        m = _TERSE_ID.fullmatch(line.strip())
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    raise ValueError(f"condor_submit printed no job id: {stdout.strip()[:200]!r}")


def parse_ads(text: str, *, what: str = "condor_q") -> list[dict[str, Any]]:
    """``-json`` output → job ads. Empty output (no job matched) is an empty list."""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} -json printed something that is not JSON: {exc}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"{what} -json printed {type(data).__name__}, not a list of job ads")
    return [ad for ad in data if isinstance(ad, dict)]


@dataclass(frozen=True, slots=True)
class CondorJob:
    """One job ad, reduced to what the submitter needs."""

    job_id: str
    uid: str
    status: int
    observation: Observation

    @property
    def cluster(self) -> str:
        return self.job_id.split(".", 1)[0]


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _ts(value: Any) -> float | None:
    n = _int(value)
    return float(n) if n else None


def observe(ad: Mapping[str, Any], *, now: float, hold_timeout: float = 0.0) -> Observation | None:
    """A job ad → what the runtime needs to know. None for a status this code does not know. An ended job carries
    its ad's record of what it was allocated (``accounted``), when the ad has one."""
    obs = _observe(ad, now=now, hold_timeout=hold_timeout)
    if obs is None or not obs.state.terminal:
        return obs
    record = accounted(ad)
    return obs if record is None else replace(obs, accounted=record)


def _observe(ad: Mapping[str, Any], *, now: float, hold_timeout: float) -> Observation | None:
    status = _int(ad.get("JobStatus"))
    started = _ts(ad.get("JobCurrentStartDate")) or _ts(ad.get("JobStartDate"))
    entered = _ts(ad.get("EnteredCurrentStatus"))
    finished = _ts(ad.get("CompletionDate")) or entered
    if status == 1:
        return Observation(BackendState.QUEUED, reason="idle: waiting for a matching slot", raw_state="IDLE")
    if status in (2, 6):
        raw = "RUNNING" if status == 2 else "TRANSFERRING_OUTPUT"
        return Observation(BackendState.RUNNING, raw_state=raw, started_at=started)
    if status == 7:
        return Observation(BackendState.RUNNING, reason="suspended", raw_state="SUSPENDED", started_at=started)
    if status == 5:
        reason = str(ad.get("HoldReason") or "no reason given")
        code = _int(ad.get("HoldReasonCode"))
        words = f"held: {reason}" + (f" (HoldReasonCode {code})" if code is not None else "")
        if code in DURATION_HOLD_CODES:
            return Observation(
                BackendState.TIMEOUT, reason=words, raw_state="HELD", started_at=started, finished_at=entered
            )
        if hold_timeout > 0 and entered is not None and now - entered >= hold_timeout:
            return Observation(
                BackendState.FAILED,
                exit_code=1,
                reason=f"{words}; held for more than {hold_timeout:g}s",
                raw_state="HELD",
                started_at=started,
                finished_at=now,
            )
        return Observation(BackendState.QUEUED, reason=words, raw_state="HELD", started_at=started)
    if status == 3:
        reason = str(ad.get("RemoveReason") or "removed")
        limit = _int(ad.get(TIME_LIMIT_ATTR))
        squeezed = reason.replace(" ", "").replace("_", "").lower()
        # Our periodic_remove (local), or a CE's SYSTEM_PERIODIC_REMOVE for wall time (htcondor-ce
        # config/01-ce-router-defaults.conf, REMOVE_REASON_4: "job exceeded allowed walltime").
        if limit is not None and ("periodicremove" in squeezed or "exceededallowedwalltime" in squeezed):
            return Observation(
                BackendState.TIMEOUT,
                reason=f"time limit of {limit}s exceeded (activeDeadlineSeconds): {reason}",
                raw_state="REMOVED",
                started_at=started,
                finished_at=finished,
            )
        return Observation(
            BackendState.CANCELLED, reason=reason, raw_state="REMOVED", started_at=started, finished_at=finished
        )
    if status == 4:
        if ad.get("ExitBySignal") is True:
            sig = _int(ad.get("ExitSignal"))
            return Observation(
                BackendState.FAILED,
                signal=sig,
                raw_state="COMPLETED",
                started_at=started,
                finished_at=finished,
            )
        code = _int(ad.get("ExitCode"))
        state = BackendState.COMPLETED if code == 0 else BackendState.FAILED
        return Observation(state, exit_code=code, raw_state="COMPLETED", started_at=started, finished_at=finished)
    return None


def parse_jobs(
    ads: Iterable[Mapping[str, Any]], *, pool: str, now: float, hold_timeout: float = 0.0
) -> dict[str, CondorJob]:
    """Job ads → the pool's jobs by job id (ads of other pools or without a pod UID are ignored)."""
    out: dict[str, CondorJob] = {}
    for ad in ads:
        if ad.get(POOL_ATTR) not in (None, pool):
            continue
        uid = ad.get(POD_UID_ATTR)
        cluster, proc = _int(ad.get("ClusterId")), _int(ad.get("ProcId"))
        if not isinstance(uid, str) or cluster is None:
            continue
        obs = observe(ad, now=now, hold_timeout=hold_timeout)
        if obs is None:
            continue
        job_id = f"{cluster}.{proc or 0}"
        out[job_id] = CondorJob(job_id, uid, _int(ad.get("JobStatus")) or 0, obs)
    return out


def uids_to_ids(jobs: Mapping[str, CondorJob]) -> dict[str, str]:
    """Pod UID → newest job id with that UID (a resubmission after a purge has a higher cluster)."""
    out: dict[str, str] = {}
    for job in sorted(jobs.values(), key=lambda j: tuple(int(p) for p in j.job_id.split("."))):
        out[job.uid] = job.job_id
    return out


def pool_constraint(pool: str) -> str:
    return f"{POOL_ATTR} == {quote(pool)}"


def pack(items: Iterable[str], *, budget: int, max_items: int | None = None) -> list[list[str]]:
    """Items in order, in groups whose texts joined by one separator take at most ``budget`` bytes (and at
    most ``max_items`` each). An item longer than the budget alone is refused: it could never be sent."""
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    for item in items:
        size = len(item.encode())
        if size > budget:
            raise ValueError(f"{item[:40]!r}... is longer than one command-line argument may be")
        extra = size + (1 if current else 0)
        if current and (used + extra > budget or (max_items is not None and len(current) >= max_items)):
            groups.append(current)
            current, used, extra = [], 0, size
        current.append(item)
        used += extra
    if current:
        groups.append(current)
    return groups


def _member_constraints(pool: str, attr: str, values: list[str], limit: int) -> list[str]:
    head = f"{pool_constraint(pool)} && member({attr}, {{"
    tail = "})"
    budget = limit - len(head.encode()) - len(tail.encode())
    return [head + ",".join(group) + tail for group in pack(values, budget=budget)]


def clusters_constraints(pool: str, clusters: Iterable[str], *, limit: int = ARG_MAX_BYTES) -> list[str]:
    """The pool's jobs among these clusters, as ``member`` constraints that each fit one argument."""
    ids = sorted({c for c in clusters if c.isdigit()}, key=int)
    return _member_constraints(pool, "ClusterId", ids, limit)


def uids_constraints(pool: str, uids: Iterable[str], *, limit: int = ARG_MAX_BYTES) -> list[str]:
    """The pool's jobs of these pod UIDs, as ``member`` constraints that each fit one argument."""
    return _member_constraints(pool, POD_UID_ATTR, [quote(u) for u in dict.fromkeys(uids)], limit)


def id_batches(job_ids: Iterable[str], *, limit: int = ARG_MAX_BYTES, max_jobs: int | None = None) -> list[list[str]]:
    """Job ids (one argument each) in batches of at most ``max_jobs`` whose ids together fit one argument's
    size, so that no command line grows with the number of jobs tracked."""
    return pack(sorted(set(job_ids), key=_id_key), budget=limit, max_items=max_jobs)


def _id_key(job_id: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in job_id.split("."))


@dataclass(frozen=True, slots=True)
class RemoveTotals:
    """``condor_rm -totals``: what the schedd did with each job it was asked to remove (rm.cpp)."""

    succeeded: int
    failed: int
    not_found: int
    bad_status: int
    already_done: int
    permission_denied: int


_TOTALS = re.compile(
    r"(\d+) Succeeded, (\d+) Failed, (\d+) Not Found, (\d+) Bad Status, (\d+) Already Done, (\d+) Permission Denied"
)


def parse_remove_totals(stdout: str) -> RemoveTotals | None:
    """The totals line of ``condor_rm -totals`` (None: the schedd gave no answer)."""
    m = _TOTALS.search(stdout)
    return RemoveTotals(*(int(g) for g in m.groups())) if m else None


def removal_problem(totals: RemoveTotals) -> str | None:
    """None: every job is removed or was already gone. Else why not: permission denied is not "gone" (the job
    still runs; the token maps to another identity), so the caller raises and retries."""
    if totals.permission_denied or totals.failed:
        return (
            f"condor_rm could not remove every job: {totals.permission_denied} permission denied, "
            f"{totals.failed} failed"
        )
    return None


def parse_status_totals(ads: Iterable[Mapping[str, Any]]) -> Capacity:
    """``condor_status -json`` slot ads → total capacity (partitionable slots count whole; dynamic ones
    are already inside their parent's totals, so they are skipped)."""
    cpus = mem_mb = gpus = 0
    machines: set[str] = set()
    for ad in ads:
        if ad.get("DynamicSlot") is True:
            continue
        cpus += _int(ad.get("TotalSlotCpus")) or _int(ad.get("Cpus")) or 0
        mem_mb += _int(ad.get("TotalSlotMemory")) or _int(ad.get("Memory")) or 0
        gpus += _int(ad.get("TotalSlotGPUs")) or _int(ad.get("GPUs")) or 0
        if isinstance(ad.get("Machine"), str):
            machines.add(ad["Machine"])
    return Capacity(cpu_millis=cpus * 1000, memory_bytes=mem_mb * 2**20, gpus=gpus, nodes=len(machines))
