"""Pure HTCondor text handling: submit descriptions, ``condor_q``/``condor_history -json`` parsing, state mapping.

No I/O: tested directly (tests/test_htcondor_parse.py), and every description it writes is parsed
by the real ``htcondor2.Submit`` in the tests; the backend (``htcondor``) only runs the commands.

Facts relied on (HTCondor manual): ``request_memory`` is in MB (MiB) without a unit, ``request_disk``
in KiB without a unit; ``condor_submit -terse`` prints ``<cluster>.<proc> - <cluster>.<proc>``;
``condor_q -json`` prints one JSON array of job ads, or nothing at all when no job matches;
``JobStatus`` 1 Idle, 2 Running, 3 Removed, 4 Completed, 5 Held, 6 Transferring Output, 7 Suspended;
``HoldReasonCode`` 46/47: the job ran longer than ``allowed_job_duration``/``allowed_execute_duration``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core import backend as base
from interlink_nats.submitters.core.backend import (
    BackendError,
    BackendState,
    Capacity,
    FailureRules,
    JobAlreadyEnded,
    Observation,
    SubmitRejected,
)

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

DURATION_HOLD_CODES = frozenset({46, 47})
"""JobDurationExceeded / JobExecuteExceeded: a site's own time limit, reported as DeadlineExceeded."""

# Submit commands the submitter writes itself: a site or a pod may not change them, or the job
# would run something else, write elsewhere, or hide from the submitter's queries.
RESERVED_COMMANDS = frozenset(
    {
        "universe",
        "executable",
        "arguments",
        "args",
        "initialdir",
        "initial_dir",
        "output",
        "error",
        "log",
        "input",
        "queue",
        "transfer_executable",
        "transfer_input_files",
        "transfer_output_files",
        "transfer_output_remaps",
        "should_transfer_files",
        "when_to_transfer_output",
        "leave_in_queue",
        "periodic_remove",
        "on_exit_remove",
        "environment",
        "env",
        "getenv",
        "batch_name",
        "+jobbatchname",
        "my.jobbatchname",
    }
)
# A pod (annotation) may only ask for placement and resources, never for site policy.
POD_COMMANDS = frozenset(
    {
        "requirements",
        "rank",
        "request_cpus",
        "request_memory",
        "request_disk",
        "request_gpus",
        "require_gpus",
        "gpus_minimum_capability",
        "gpus_minimum_memory",
        "accounting_group_user",
    }
)
_COMMAND_NAME = re.compile(r"^(?:\+|[Mm][Yy]\.)?[A-Za-z_][A-Za-z0-9_.]*$")
_TERSE_ID = re.compile(r"^(\d+)\.(\d+)\s*-\s*(\d+)\.(\d+)\s*$")
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
    Command.REMOVE: [
        (re.compile(r"not found|does not exist|couldn't find|no jobs matched|already", re.IGNORECASE), JobAlreadyEnded)
    ],
}


def classify_failure(command: Command, returncode: int | None, stderr: str) -> type[BackendError]:
    """Which error a failed condor command is (``returncode`` None: it timed out); see ``base.classify_failure``."""
    return base.classify_failure(returncode, stderr, transient=_TRANSIENT, rules=_FAILURES.get(command, ()))


class SubmitCommandError(ValueError):
    """A submit command the submitter may not pass on (the message names it and where it came from)."""


@dataclass(frozen=True, slots=True)
class SubmitJob:
    """Everything one submit description is made of (the backend fills it from a JobSpec)."""

    uid: str
    pool: str
    job_dir: str
    namespace: str = ""
    name: str = ""
    resources: pb.ResourceRequest | None = None
    spool: bool = False
    """Remote CE: sandboxes travel with the job (``-spool``); else the job runs in ``job_dir`` itself."""
    site_commands: Mapping[str, str] | None = None
    pod_commands: Sequence[str] = ()
    request_disk: str = ""
    time_limit_margin: float = 60.0


def quote(value: str) -> str:
    """A ClassAd string literal. Control characters are refused: a submit line ends at a newline."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SubmitCommandError(f"value {value!r} contains a control character")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_command(name: str, value: str, *, source: str, allowed: frozenset[str] | None = None) -> tuple[str, str]:
    """Validate one ``name = value`` submit command from the site config or a pod."""
    key = name.strip()
    if not _COMMAND_NAME.match(key):
        raise SubmitCommandError(f"{source} submit command {name!r} is not a valid command name")
    low = key.lower()
    attr = low[1:] if low.startswith("+") else low[3:] if low.startswith("my.") else ""
    if low in RESERVED_COMMANDS or attr.startswith("interlink"):
        raise SubmitCommandError(f"{source} submit command {key!r} is not allowed (the submitter sets it itself)")
    if allowed is not None and low not in allowed:  # a pod sets no custom attribute (accounting, owner…)
        raise SubmitCommandError(
            f"{source} submit command {key!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
        )
    text = str(value)
    if any(ord(c) < 32 and c != "\t" for c in text):
        raise SubmitCommandError(f"{source} submit command {key!r} has a control character in its value")
    if allowed is not None and "$" in text:
        raise SubmitCommandError(f"{source} submit command {key!r} may not use $ macros")
    return key, text


def pod_commands(flags: Iterable[str]) -> list[tuple[str, str]]:
    """The pod's backend flags as ``name=value`` submit commands (placement and resources only)."""
    out = []
    for flag in flags:
        if "=" not in flag:
            raise SubmitCommandError(f"pod submit command {flag!r} must look like name=value")
        name, value = flag.split("=", 1)
        out.append(check_command(name, value.strip(), source="pod", allowed=POD_COMMANDS))
    return out


def resource_commands(req: pb.ResourceRequest | None) -> list[tuple[str, str]]:
    """Pod resources → request_* (cpus rounded up; memory in MB — HTCondor's unit — rounded up)."""
    if req is None:
        return []
    out: list[tuple[str, str]] = []
    if req.cpu_millis > 0:
        out.append(("request_cpus", str(max(1, math.ceil(req.cpu_millis / 1000)))))
    if req.memory_bytes > 0:
        out.append(("request_memory", str(max(1, math.ceil(req.memory_bytes / 2**20)))))
    if req.gpus > 0:
        out.append(("request_gpus", str(req.gpus)))
    return out


def time_limit(req: pb.ResourceRequest | None, margin: float) -> int | None:
    """Whole seconds HTCondor lets the job run: the pod's deadline plus a margin, so that the
    script's own deadline (which writes every container's exit file) normally ends it first."""
    if req is None or req.wall_time is None or req.wall_time.total_seconds() <= 0:
        return None
    return max(1, math.ceil(req.wall_time.total_seconds() + max(0.0, margin)))


def submit_description(job: SubmitJob) -> str:
    """The whole submit description. Later commands win, so the order is the precedence:
    site commands < pod commands < pod resources < what the submitter must control."""
    lines = ["# interlink-nats: one pod, one job (generated; do not edit)", "universe = vanilla"]
    body: list[tuple[str, str]] = []
    if job.request_disk:
        body.append(("request_disk", job.request_disk))
    for name, value in (job.site_commands or {}).items():
        body.append(check_command(name, value, source="site"))
    body.extend(pod_commands(job.pod_commands))
    body.extend(resource_commands(job.resources))
    lines += [f"{k} = {v}" for k, v in body]
    lines += [
        "executable = job.sh",
        f"initialdir = {_path_value(job.job_dir)}",
        "output = job.out",
        "error = job.err",
        "log = job.log",
    ]
    if job.spool:
        # The sandbox travels: job.sh in, the container files out (when the job ends or is evicted).
        lines += [
            "should_transfer_files = YES",
            "when_to_transfer_output = ON_EXIT_OR_EVICT",
            "transfer_executable = true",
            "transfer_output_files = containers",
        ]
    else:
        # Shared filesystem: the job writes its container files in place, so logs are live.
        lines += ["should_transfer_files = NO", f"environment = {_environment({'INTERLINK_JOB_DIR': job.job_dir})}"]
    lines += [
        f"+{POD_UID_ATTR} = {quote(job.uid)}",
        f"+{POOL_ATTR} = {quote(job.pool)}",
        f"+JobBatchName = {quote(f'{job.namespace}/{job.name}' if job.name else job.uid)}",
    ]
    limit = time_limit(job.resources, job.time_limit_margin)
    if limit is not None:
        lines += [
            f"+{TIME_LIMIT_ATTR} = {limit}",
            f"periodic_remove = (JobStatus == 2) && (time() - JobCurrentStartDate > {TIME_LIMIT_ATTR})",
        ]
    lines.append("queue 1")
    return "\n".join(lines) + "\n"


def _path_value(path: str) -> str:
    if any(ord(c) < 32 for c in path) or path != path.strip():
        raise SubmitCommandError(f"job directory {path!r} cannot be written in a submit description")
    return path


def _environment(env: Mapping[str, str]) -> str:
    """The new (quoted) ``environment`` syntax: values single-quoted, quotes doubled."""
    parts = []
    for key, value in env.items():
        if any(ord(c) < 32 for c in value):
            raise SubmitCommandError(f"environment value of {key} has a control character")
        parts.append(f"{key}='{value.replace(chr(39), chr(39) * 2).replace(chr(34), chr(34) * 2)}'")
    return '"' + " ".join(parts) + '"'


def parse_submit_id(stdout: str) -> str:
    """``condor_submit -terse`` → ``"<cluster>.<proc>"`` (one job per description)."""
    for line in reversed(stdout.strip().splitlines()):
        m = _TERSE_ID.match(line.strip())
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
    """A job ad → what the runtime needs to know. None for a status this code does not know."""
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
        if limit is not None and "periodicremove" in reason.replace(" ", "").lower():
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


def clusters_constraint(pool: str, clusters: Iterable[str]) -> str:
    """The pool's jobs among these clusters (``member`` keeps 10,000 ids in one short argument)."""
    ids = ",".join(sorted({c for c in clusters if c.isdigit()}, key=int))
    return f"{pool_constraint(pool)} && member(ClusterId, {{{ids}}})"


def uids_constraint(pool: str, uids: Iterable[str]) -> str:
    return f"{pool_constraint(pool)} && member({POD_UID_ATTR}, {{{','.join(quote(u) for u in uids)}}})"


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
