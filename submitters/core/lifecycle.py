"""The job lifecycle of a submitter as pure data and decisions: phases, legal moves and plans.

Why pure: crash recovery, adoption and cancel races are where a submitter could lose or
duplicate a job. Deciding them here (no I/O, no asyncio, no SQLite, no NATS) lets table-driven
tests cover every case in microseconds; the runtime gathers the inputs (registry rows, what the
backend reports, whether a script is on disk), asks a plan function, and executes the actions.

Phases of a job (one registry row per pod UID)::

    submitting ──► active ──► done ──► deleted
        │  └──────────────────▲          ▲
        └────────────────────────────────┘

``submitting``: the intent is recorded, the backend has not confirmed; ``active``: the backend
has it; ``done``: a terminal status is stored; ``deleted``: cancelled, files removed, kept as a
tombstone so the same UID never runs again.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import (
    BackendError,
    BackendUnavailable,
    Observation,
    Reconciled,
    SubmitRejected,
)
from interlink_nats.submitters.core.status import ContainerFiles, JobMeta, encode_status, is_terminal, map_status
from interlink_nats.submitters.core.usage import ended_usage, requested


class Phase(enum.StrEnum):
    """Where a job is in its life; the values are what the registry stores."""

    SUBMITTING = "submitting"
    ACTIVE = "active"
    DONE = "done"
    DELETED = "deleted"

    @property
    def live(self) -> bool:
        """Still the batch system's business: tracked, polled, cancellable."""
        return self in LIVE_PHASES


LIVE_PHASES: tuple[Phase, ...] = (Phase.SUBMITTING, Phase.ACTIVE)

TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    # accepted by the backend / refused by it (SubmitFailed) / cancelled before it answered
    Phase.SUBMITTING: frozenset({Phase.ACTIVE, Phase.DONE, Phase.DELETED}),
    # a new status while running / a terminal one / cancelled
    Phase.ACTIVE: frozenset({Phase.ACTIVE, Phase.DONE, Phase.DELETED}),
    # a finished pod's files are removed on cancel (DeletePod after completion)
    Phase.DONE: frozenset({Phase.DELETED}),
    # a tombstone never changes again: the pod UID may not run twice
    Phase.DELETED: frozenset(),
}
"""Which phase may follow which; the registry's SQL guards enforce the same table."""


class IllegalTransition(ValueError):
    def __init__(self, src: Phase, dst: Phase) -> None:
        super().__init__(f"a job may not go from {src} to {dst}")
        self.src = src
        self.dst = dst


def allowed(src: Phase, dst: Phase) -> bool:
    return dst in TRANSITIONS[src]


def check_transition(src: Phase, dst: Phase) -> Phase:
    """``dst`` when the move is legal; raises :class:`IllegalTransition` otherwise."""
    if not allowed(src, dst):
        raise IllegalTransition(src, dst)
    return dst


# Poll -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A new status to store and publish (one registry write, one JobEvent)."""

    status: pb.JobStatus
    raw: bytes
    phase: Phase
    revision: int
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class PollPlan:
    change: StatusChange | None
    """None: the stored status still holds (nothing to write or publish)."""
    untrack: bool
    """The job reached a terminal state: stop polling it."""
    remove_layout: bool = False
    """The job ended where the site says so: its layout goes (``layout.ENDED_JOB_LAYOUT``). Not for a job the
    backend lost (it may still run on a node cut off from the site): its volumes stay until the pod is deleted."""


def plan_poll(
    meta: JobMeta,
    observation: Observation,
    files: Mapping[str, ContainerFiles],
    *,
    last_status: bytes | None,
    revision: int,
    now: float,
) -> PollPlan:
    """One tracked job's poll snapshot → what to do: store a new revision, untrack, or nothing."""
    status = map_status(meta, observation, files, now=now)
    terminal = is_terminal(status.state)
    if terminal:  # once: the job is untracked with this status
        ran = files.values()
        starts, ends = (f.started_at for f in ran), (f.finished_at for f in ran)
        status.usage = ended_usage(observation, requested(meta.spec), starts, ends, now=now)
    raw = encode_status(status)  # == bytes(status), without betterproto2's cost
    remove_layout = terminal and status.state is not pb.JobState.LOST
    if raw == last_status:
        return PollPlan(None, terminal, remove_layout)
    phase = Phase.DONE if terminal else Phase.ACTIVE
    change = StatusChange(status, raw, phase, revision + 1, now if terminal else None)
    return PollPlan(change, terminal, remove_layout)


# Submit -----------------------------------------------------------------------------------------


class ClaimPlan(enum.Enum):
    """What a Submit does after its claim, given the row it found or created."""

    SUBMIT = "submit"
    """The claim is new: write the job directory and hand the job to the backend."""
    ANSWER = "answer"
    """Someone else's submission, alive or finished: answer with the stored job (idempotent retry)."""
    RESUME = "resume"
    """Our own interrupted submission: ask the backend whether it got the job before submitting again."""
    ADOPT_AND_RESUME = "adopt_and_resume"
    """A stopped replica's interrupted submission: take its jobs, then resume as ours."""


def needs_owner_check(phase: Phase, owner: str, me: str) -> bool:
    """Whether :func:`plan_claim` needs to know if ``owner`` is still alive (an I/O check)."""
    return phase is Phase.SUBMITTING and owner != me


def plan_claim(*, created: bool, phase: Phase, owner: str, me: str, owner_dead: bool = False) -> ClaimPlan:
    if created:
        return ClaimPlan.SUBMIT
    if phase is not Phase.SUBMITTING:
        return ClaimPlan.ANSWER
    if owner == me:
        return ClaimPlan.RESUME
    return ClaimPlan.ADOPT_AND_RESUME if owner_dead else ClaimPlan.ANSWER


class Answer(enum.Enum):
    """What a Submit answers once the job's id is recorded."""

    CREATED = "created"
    """A new job: created, no status (the caller knows the containers; it is pending)."""
    PENDING = "pending"
    """A resumed submission the backend took just now: a pending status naming the new id."""
    STORED = "stored"
    """A resumed submission the backend already had: the status stored with the claim."""


@dataclass(frozen=True, slots=True)
class RecordSubmitted:
    """The backend has the job: record its id (SUBMITTING → ACTIVE), track it, answer."""

    job_id: str
    answer: Answer


@dataclass(frozen=True, slots=True)
class FailPod:
    """Permanent: store a terminal SubmitFailed status saying ``reason`` (DONE), refuse with ``message``."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RetryLater:
    """Transient: keep the intent (SUBMITTING); answer unavailable with ``message``. The caller's
    retry, or recovery, submits again."""

    message: str


@dataclass(frozen=True, slots=True)
class CannotRun:
    """A program the backend needs cannot be run (``backends.commands``): keep the intent (SUBMITTING) and
    refuse at once, naming it. Not :class:`RetryLater`: no retry helps before the site fixes it."""

    message: str


SubmitAction = RecordSubmitted | FailPod | RetryLater | CannotRun


def past_deadline(deadline: float | None, now: float) -> bool:
    """Whether the caller of a submission has stopped waiting (``deadline`` None: it never does)."""
    return deadline is not None and now >= deadline


def later(a: float | None, b: float | None) -> float | None:
    """The later of two callers' deadlines: a submission is waited for while either waits (None: forever)."""
    return None if a is None or b is None else max(a, b)


def gave_up(backend: str) -> str:
    """The failed status's message of a submission dropped at its deadline: nobody waits for it any more (the
    gateway has answered the pod's create with an error), so it must not run behind the gateway's back."""
    return (
        f"the gateway gave up waiting for this Submit (its deadline passed) before the job reached {backend}: "
        "it was never submitted"
    )


def plan_resume(backend: str, found: Reconciled | BackendError | None) -> RecordSubmitted | RetryLater | None:
    """A resumed submission, after asking the backend whether it got the job: record the job it has,
    wait when it could not say (submitting again might run the pod twice), or (None) submit again."""
    if isinstance(found, BackendError):
        return RetryLater(f"{backend} is unavailable: {found}")
    if found is None or found.job_id is None:
        return None
    return RecordSubmitted(found.job_id, Answer.STORED)


def plan_submit(
    backend: str, outcome: str | BackendError, *, created: bool, unusable: str | None = None
) -> SubmitAction:
    """The backend's answer to a submission (its job id, or the error it raised) → what to do. ``unusable``: why
    the backend's programs cannot be run, as checked after the error (None: they can)."""
    if isinstance(outcome, str):
        return RecordSubmitted(outcome, Answer.CREATED if created else Answer.PENDING)
    if isinstance(outcome, SubmitRejected):
        return FailPod(str(outcome), f"{backend} refused the job: {outcome}")
    if unusable is not None:
        return CannotRun(f"{backend} cannot submit: {unusable}")
    if isinstance(outcome, BackendUnavailable):
        return RetryLater(f"{backend} is unavailable: {outcome}")
    return RetryLater(f"{backend} submission failed: {outcome}")


# Recovery ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveryInput:
    """One live registry row after a restart, and what the world says about it."""

    uid: str
    phase: Phase
    job_id: str
    found: str | None
    """The backend's id for the job (``""``: it ran, id unknown); None: the backend never got it."""
    script_stored: bool
    """The job script is in the job directory (so the job can be submitted again)."""
    expired: bool = False
    """Its caller's deadline has passed (``past_deadline``): nobody waits for it any more."""


@dataclass(frozen=True, slots=True)
class Track:
    """Poll the job under ``job_id``; first record the id when ``record`` is set."""

    uid: str
    job_id: str
    record: bool


@dataclass(frozen=True, slots=True)
class Resubmit:
    """The backend never got the job, but its script is stored: submit it again, then :func:`after_resubmit`."""

    uid: str


@dataclass(frozen=True, slots=True)
class AwaitRetry:
    """Interrupted before its script was stored: only the caller's retry (which carries the script) can go on."""

    uid: str


@dataclass(frozen=True, slots=True)
class Drop:
    """The backend never got the job and nobody waits for it any more: store a failed status (``gave_up``),
    never submit it (the gateway has told Kubernetes the pod failed)."""

    uid: str


RecoveryAction = Track | Resubmit | AwaitRetry | Drop


def _track(uid: str, phase: Phase, job_id: str, stored_id: str) -> Track:
    return Track(uid, job_id, record=phase is Phase.SUBMITTING or stored_id != job_id)


def plan_recovery(rows: Iterable[RecoveryInput]) -> list[RecoveryAction]:
    """Restart after a crash (or adoption): registry rows + what the backend reports → actions."""
    out: list[RecoveryAction] = []
    for row in rows:
        if row.found is not None:
            out.append(_track(row.uid, row.phase, row.found, row.job_id))
        elif row.expired:
            out.append(Drop(row.uid))
        elif row.script_stored:
            out.append(Resubmit(row.uid))
        else:
            out.append(AwaitRetry(row.uid))
    return out


def after_resubmit(row: RecoveryInput, job_id: str) -> Track:
    return _track(row.uid, row.phase, job_id, row.job_id)


def owners_to_adopt(owners: Collection[str], me: str, dead: Collection[str]) -> list[str]:
    """Replicas whose jobs this instance takes over: every other owner that is no longer alive."""
    return sorted(o for o in owners if o != me and o in dead)


# Cancel -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CancelPlan:
    found: bool
    untrack: bool
    """Stop polling it first, so a poll in flight cannot overwrite the tombstone."""
    stop_backend: bool
    """The batch system may still run it: cancel it there."""
    tombstone: bool
    """Store the cancelled status (DELETED), remove the files, publish the event."""


NOT_FOUND = CancelPlan(found=False, untrack=False, stop_backend=False, tombstone=False)
ALREADY_CANCELLED = CancelPlan(found=True, untrack=False, stop_backend=False, tombstone=False)


def plan_cancel(phase: Phase | None) -> CancelPlan:
    """Cancel is idempotent: a tombstone answers as it is; anything else becomes one."""
    if phase is None:
        return NOT_FOUND
    if phase is Phase.DELETED:
        return ALREADY_CANCELLED
    check_transition(phase, Phase.DELETED)
    return CancelPlan(found=True, untrack=True, stop_backend=phase.live, tombstone=True)


def unique_in_order(items: Sequence[str]) -> list[str]:
    """``items`` without repeats, first occurrence kept (GetStatus answers each pod once)."""
    return list(dict.fromkeys(items))
