"""Pure status mapping: (backend observation, per-container files) → ``pb.JobStatus``.

No I/O here: the runtime reads the files (``jobfiles.read_container_files``) and asks the
backend (``Backend.poll``), then calls :func:`map_status`. Rules (see docs/submitter-engine.md):

- every container is reported, init containers first, never an empty list (an empty list
  makes the virtual kubelet call the pod Succeeded);
- a container's own ``.exit`` file always wins: it is the exact exit code;
- a failed init container means the main containers are reported *terminated* (they will
  never run; otherwise the pod would sit in Init forever);
- when the job ended without a container's ``.exit`` file, that container takes the
  job-level outcome: OOM → 137 ``OOMKilled``, time limit → 143 ``DeadlineExceeded``, …;
- a job the backend forgot that left no exit files is LOST, with a message saying so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.usage import deleted_usage, requested

LOST_EXIT_CODE = 255
"""Exit code reported for containers of a job that vanished without leaving exit files."""
SIGTERM_EXIT = 128 + 15
SIGKILL_EXIT = 128 + 9


@dataclass(frozen=True, slots=True)
class ContainerFiles:
    """What a container's files in the job directory say (see kernel/layout.py)."""

    started_at: float | None = None
    exit_code: int | None = None
    finished_at: float | None = None
    """mtime of the ``.exit`` file: it is written when the container ends."""
    ready: bool | None = None
    """The readiness probe's verdict (``.ready``); None: the container has no readiness probe."""
    reason: str = ""
    """What the ``.exit`` file says after the code: why the script stopped the container (a lifecycle
    hook's ``FailedPostStartHook``), and its message."""
    message: str = ""


def exit_reason(text: str) -> tuple[str, str]:
    """(reason, message) after the code of a complete ``.exit`` file's text; empty when it has none."""
    parts = text.split(None, 2)
    if len(parts) < 2:
        return "", ""
    return parts[1], parts[2].strip() if len(parts) > 2 else ""


def container_file_number(text: str) -> float | None:
    """The number a ``.started`` or ``.exit`` file holds; None while it is being written.

    The script writes each with one ``write`` ending in a newline and no rename (a rename costs a process in
    bash), so a file without its newline, empty or not, is still being written: read it again later."""
    if not text.endswith("\n"):
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


NO_FILES = ContainerFiles()


@dataclass(frozen=True, slots=True)
class JobMeta:
    """The registry's view of a job: identity and container names, in order."""

    uid: str
    namespace: str
    name: str
    pool: str
    job_id: str
    init_containers: tuple[str, ...]
    containers: tuple[str, ...]
    backend: str = ""
    spec: bytes = b""
    """The stored JobScript (less its script): the pod's request, read once, when its job ends (``core.usage``)."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How the job as a whole ended, applied to containers that left no exit file."""

    reason: str
    exit_code: int
    message: str


def _ts(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def job_outcome(obs: Observation, meta: JobMeta) -> _Outcome | None:
    """The job-level outcome of a terminal observation (None while the job is not over)."""
    state = obs.state
    code = obs.exit_code
    sig = obs.signal
    detail = f" ({obs.raw_state})" if obs.raw_state else ""
    because = f": {obs.reason}" if obs.reason else ""  # the batch system's own words (hold/remove reason)
    where = f"{meta.backend} job {meta.job_id}".strip() if meta.job_id else f"{meta.backend} job".strip()
    if state is BackendState.COMPLETED:
        return _Outcome("Completed", code or 0, "")
    if state is BackendState.FAILED and obs.gang_stopped:
        return _Outcome("PodGroupFailed", code or SIGTERM_EXIT, f"{where}: {obs.reason}")
    if state is BackendState.FAILED:
        exit_code = code if code else (128 + sig if sig else 1)
        msg = f"{where} failed{detail}" + (f", killed by signal {sig}" if sig else f" with exit code {exit_code}")
        return _Outcome("Error", exit_code, msg + because)
    if state is BackendState.CANCELLED:
        return _Outcome("Cancelled", SIGTERM_EXIT, f"{where} was cancelled{detail}{because}")
    if state in (BackendState.TIMEOUT, BackendState.DEADLINE):
        return _Outcome("DeadlineExceeded", SIGTERM_EXIT, f"{where} reached its time limit{detail}{because}")
    if state is BackendState.OUT_OF_MEMORY:
        return _Outcome("OOMKilled", SIGKILL_EXIT, f"{where} ran out of memory{detail}")
    if state is BackendState.NODE_FAIL:
        return _Outcome("NodeFailure", SIGKILL_EXIT, f"{where} lost its node{detail}")
    if state is BackendState.PREEMPTED:
        return _Outcome("Preempted", SIGTERM_EXIT, f"{where} was preempted{detail}")
    if state is BackendState.GONE:
        if obs.reason:  # the backend knows why, e.g. the job never started
            return _Outcome("Lost", LOST_EXIT_CODE, f"{where} is lost: {obs.reason}")
        return _Outcome(
            "Lost",
            LOST_EXIT_CODE,
            f"{where} vanished from the backend without leaving exit files",
        )
    return None


SIGKILL_UNEXPLAINED = (
    "killed by SIGKILL (exit code 137): by its memory limit or by a kill from outside; "
    "the container runtime did not say which (podman cannot report OOMKilled on every host)"
)
"""Said of a container whose own exit code is 137 when nothing tells why: guessing OOMKilled would be wrong
as often as not, and Kubernetes users read "OOMKilled" as a certainty."""


def _exit_message(code: int, reason: str) -> str:
    return SIGKILL_UNEXPLAINED if code == SIGKILL_EXIT and reason == "Error" else ""


def _not_run(name: str, init: bool, failed_init: tuple[str, int], finished: float | None) -> pb.ContainerStatus:
    """A container that never ran because an init container before it failed (as the kubelet reports it)."""
    fname, fcode = failed_init
    message = f"not run: init container {fname} failed with exit code {fcode}"
    return _terminated(name, init, fcode, None, finished, "InitContainerFailed", message)


def _terminated(
    name: str, init: bool, code: int, started: float | None, finished: float | None, reason: str, message: str = ""
) -> pb.ContainerStatus:
    return pb.ContainerStatus(
        name=name,
        init=init,
        phase=pb.ContainerPhase.TERMINATED,
        exit_code=code,
        started_at=_ts(started),
        finished_at=_ts(finished),
        reason=reason,
        message=message,
    )


def map_status(
    meta: JobMeta,
    obs: Observation | None,
    files: Mapping[str, ContainerFiles],
    *,
    now: float,
) -> pb.JobStatus:
    """Build the full status of one job.

    ``obs`` is None while the job has not reached the backend yet (queued in the submitter).
    ``now`` stands in for a finish time the backend did not give (only used once, when the
    job turns terminal, so statuses stay stable between polls).
    """
    outcome = job_outcome(obs, meta) if obs is not None and obs.state.terminal else None
    all_names = (*meta.init_containers, *meta.containers)
    all_exited = bool(all_names) and all(files.get(n, NO_FILES).exit_code is not None for n in all_names)
    if outcome is not None and obs is not None and obs.state is BackendState.GONE and all_exited:
        outcome = _Outcome("Completed", 0, "")  # the files tell the whole story
    running = obs is not None and obs.state is BackendState.RUNNING
    finished_fallback = (obs.finished_at if obs is not None and obs.finished_at else None) or now

    statuses: list[pb.ContainerStatus] = []
    failed_init: tuple[str, int] | None = None
    for name in meta.init_containers:
        f = files.get(name, NO_FILES)
        if f.exit_code is not None:
            reason = "Completed" if f.exit_code == 0 else "Error"
            message = _exit_message(f.exit_code, reason)
            statuses.append(_terminated(name, True, f.exit_code, f.started_at, f.finished_at, reason, message))
            if f.exit_code != 0 and failed_init is None:
                failed_init = (name, f.exit_code)
        elif failed_init is not None:
            statuses.append(_not_run(name, True, failed_init, finished_fallback))
        elif outcome is not None:
            statuses.append(
                _terminated(
                    name, True, outcome.exit_code, f.started_at, finished_fallback, outcome.reason, outcome.message
                )
            )
        elif f.started_at is not None:
            statuses.append(
                pb.ContainerStatus(name=name, init=True, phase=pb.ContainerPhase.RUNNING, started_at=_ts(f.started_at))
            )
        else:
            statuses.append(_waiting(name, True, obs, running))

    for name in meta.containers:
        f = files.get(name, NO_FILES)
        if f.exit_code is not None:
            reason = (
                "Completed"
                if f.exit_code == 0
                else (
                    outcome.reason if outcome is not None and outcome.reason not in ("Completed", "Lost") else "Error"
                )
            )
            message = _exit_message(f.exit_code, reason)
            if f.reason:  # the script knows better: a hook stopped it
                reason, message = f.reason, f.message
            statuses.append(_terminated(name, False, f.exit_code, f.started_at, f.finished_at, reason, message))
        elif failed_init is not None:
            statuses.append(_not_run(name, False, failed_init, finished_fallback))
        elif outcome is not None:
            statuses.append(
                _terminated(
                    name,
                    False,
                    outcome.exit_code,
                    f.started_at,
                    finished_fallback,
                    outcome.reason,
                    outcome.message or "the job ended before the container did",
                )
            )
        elif f.started_at is not None:
            statuses.append(
                pb.ContainerStatus(
                    name=name, init=False, phase=pb.ContainerPhase.RUNNING, started_at=_ts(f.started_at), ready=f.ready
                )
            )
        else:
            statuses.append(_waiting(name, False, obs, running))

    state, reason, message = _job_state(meta, obs, outcome, statuses, failed_init)
    return _job_status(meta, state, statuses, reason, message)


def _job_status(
    meta: JobMeta,
    state: pb.JobState,
    containers: list[pb.ContainerStatus],
    reason: str,
    message: str,
    *,
    deleted: bool = False,
) -> pb.JobStatus:
    """The status of ``meta``'s job, every field but its containers' from ``meta`` and the decision."""
    return pb.JobStatus(
        pod=pb.PodRef(uid=meta.uid, namespace=meta.namespace, name=meta.name),
        pool=meta.pool,
        job_id=meta.job_id,
        state=state,
        containers=containers,
        reason=reason,
        message=message,
        deleted=deleted,
    )


def _waiting(name: str, init: bool, obs: Observation | None, running: bool) -> pb.ContainerStatus:
    if running:
        reason, message = ("PodInitializing" if not init else "Waiting"), ""
    elif obs is None:
        reason, message = "Queued", "waiting for the submitter to start the job"
    else:
        reason, message = "Queued", obs.reason or "queued in the batch system"
    return pb.ContainerStatus(name=name, init=init, phase=pb.ContainerPhase.WAITING, reason=reason, message=message)


def _job_state(
    meta: JobMeta,
    obs: Observation | None,
    outcome: _Outcome | None,
    statuses: list[pb.ContainerStatus],
    failed_init: tuple[str, int] | None,
) -> tuple[pb.JobState, str, str]:
    if obs is None:
        return pb.JobState.PENDING, "Queued", "waiting for the submitter to start the job"
    if obs.state is BackendState.QUEUED:
        return pb.JobState.PENDING, "Queued", obs.reason
    if obs.state is BackendState.RUNNING:
        return pb.JobState.RUNNING, "Running", ""
    assert outcome is not None
    if obs.state is BackendState.CANCELLED:
        return pb.JobState.CANCELLED, outcome.reason, outcome.message
    if outcome.reason == "Lost":
        return pb.JobState.LOST, outcome.reason, outcome.message
    failing = next((s for s in statuses if s.exit_code not in (None, 0)), None)
    if failing is None and outcome.reason == "Completed":
        return pb.JobState.SUCCEEDED, "Completed", ""
    if failed_init is not None:
        name, code = failed_init
        return pb.JobState.FAILED, "InitContainerFailed", f"init container {name} failed with exit code {code}"
    if outcome.reason not in ("Completed", "Error"):
        return pb.JobState.FAILED, outcome.reason, outcome.message
    if failing is not None and not (failing.message and failing.message == outcome.message):
        return pb.JobState.FAILED, "Error", f"container {failing.name} exited with {failing.exit_code}"
    return pb.JobState.FAILED, outcome.reason, outcome.message or "the job failed"


def is_terminal(state: pb.JobState) -> bool:
    return state in (pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST)


def submit_failed_status(meta: JobMeta, message: str, *, now: float) -> pb.JobStatus:
    """Status of a job the backend refused: every container terminated, so the pod fails at once."""
    statuses = [
        _terminated(n, i, 1, None, now, "SubmitFailed", message)
        for i, names in ((True, meta.init_containers), (False, meta.containers))
        for n in names
    ]
    return pb.JobStatus(
        pod=pb.PodRef(uid=meta.uid, namespace=meta.namespace, name=meta.name),
        pool=meta.pool,
        job_id=meta.job_id,
        state=pb.JobState.FAILED,
        containers=statuses,
        reason="SubmitFailed",
        message=message,
    )


def cancelled_status(
    meta: JobMeta, previous: pb.JobStatus | None, *, now: float, started_at: float | None = None
) -> pb.JobStatus:
    """Status after a Cancel request: finished containers keep their codes, the rest are terminated. A job still
    running (``started_at``: when the backend saw it start) carries its usage up to ``now``."""
    old = {c.name: c for c in (previous.containers if previous is not None else [])}
    statuses = []
    for init, names in ((True, meta.init_containers), (False, meta.containers)):
        for n in names:
            c = old.get(n)
            if c is not None and c.phase == pb.ContainerPhase.TERMINATED:
                statuses.append(c)
            else:
                started = c.started_at.timestamp() if c is not None and c.started_at is not None else None
                statuses.append(_terminated(n, init, SIGTERM_EXIT, started, now, "Cancelled", "cancelled by request"))
    if previous is not None and is_terminal(previous.state):
        state, reason, message = previous.state, previous.reason, previous.message
    else:
        state, reason, message = pb.JobState.CANCELLED, "Cancelled", "cancelled by request"
    status = _job_status(meta, state, statuses, reason, message, deleted=True)
    status.usage = deleted_usage(requested(meta.spec), previous, now=now, started_at=started_at)
    return status


# Encoding ----------------------------------------------------------------------------------------


def encode_status(s: pb.JobStatus) -> bytes:
    """``bytes(s)``, byte for byte, by the codec generated from proto/ (``gen/.../fastwire.py``).

    Why: betterproto2 spends ~150 µs on one JobStatus (reflection, and a warnings filter per field),
    so a poll in which 100 of 10,000 jobs changed spent most of its CPU there; this costs ~20 µs.
    """
    return fastwire.encode_job_status(s)


_with_updated_at = fastwire.job_status_with("updated_at")


def stamp_status(raw: bytes, status: pb.JobStatus) -> bytes:
    """``encode_status(status)`` once its ``updated_at`` is set, from ``raw``, its bytes without ``updated_at``.

    Why: a poll encodes each new status to compare it with the stored one, then stamps and publishes it;
    putting the stamp into those bytes saves encoding the status a second time (~15 µs per event). The stamp
    goes last, unless the status is ``deleted`` or carries ``usage`` (declared after ``updated_at``; the last
    status of every job that ran has usage): then it goes before them, found by walking the top-level fields."""
    stamp = fastwire.job_status_updated_at_field(status.updated_at)
    if status.usage is None and not status.deleted:
        return raw + stamp
    return _with_updated_at(raw, stamp)


def event_bytes(status: bytes | None, revision: int, instance_id: str) -> bytes:
    """``bytes(JobEvent(status, revision, instance_id))`` of a status already encoded (``encode_status``):
    every status change is published as one, and betterproto2 would encode its status again at ~150 µs.
    The fields are put in the order betterproto2 writes them (the proto's)."""
    return (
        fastwire.job_event_status_field(status)
        + fastwire.job_event_revision_field(revision)
        + fastwire.job_event_instance_id_field(instance_id)
    )
