"""The pure lifecycle core: transition table and plans, table-driven (no I/O, microseconds)."""

from __future__ import annotations

import ast
from pathlib import Path

import interlink_nats.submitters.core as pkg
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import (
    GONE,
    BackendError,
    BackendState,
    BackendUnavailable,
    CommandFailed,
    Observation,
    Reconciled,
    SubmitRejected,
)
from interlink_nats.submitters.core.lifecycle import (
    TRANSITIONS,
    Answer,
    AwaitRetry,
    CannotRun,
    ClaimPlan,
    Drop,
    FailPod,
    IllegalTransition,
    Phase,
    RecordSubmitted,
    RecoveryInput,
    Resubmit,
    RetryLater,
    SubmitAction,
    Track,
    after_resubmit,
    allowed,
    check_transition,
    later,
    needs_owner_check,
    owners_to_adopt,
    past_deadline,
    plan_cancel,
    plan_claim,
    plan_poll,
    plan_recovery,
    plan_resume,
    plan_submit,
)
from interlink_nats.submitters.core.status import ContainerFiles, JobMeta

S, A, D, X = Phase.SUBMITTING, Phase.ACTIVE, Phase.DONE, Phase.DELETED

LEGAL = {(S, A), (S, D), (S, X), (A, A), (A, D), (A, X), (D, X)}


@pytest.mark.parametrize("src", list(Phase))
@pytest.mark.parametrize("dst", list(Phase))
def test_transition_table(src: Phase, dst: Phase) -> None:
    assert allowed(src, dst) == ((src, dst) in LEGAL)
    if (src, dst) in LEGAL:
        assert check_transition(src, dst) is dst
    else:
        with pytest.raises(IllegalTransition, match=f"from {src} to {dst}"):
            check_transition(src, dst)


def test_every_phase_is_in_the_table_and_values_are_what_the_registry_stores() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert [p.value for p in Phase] == ["submitting", "active", "done", "deleted"]
    assert [p for p in Phase if p.live] == [S, A]


META = JobMeta("u-1", "ns", "pod", "pool", "42", (), ("main",), "fake")
RUNNING = Observation(BackendState.RUNNING)
DONE_OK = Observation(BackendState.COMPLETED, exit_code=0)
FAILED = Observation(BackendState.FAILED, exit_code=3)
STARTED = {"main": ContainerFiles(started_at=1.0)}
EXITED = {"main": ContainerFiles(started_at=1.0, exit_code=0, finished_at=2.0)}


@pytest.mark.parametrize(
    ("obs", "files", "phase", "state", "untrack", "finished", "remove_layout"),
    [
        (RUNNING, STARTED, A, pb.JobState.RUNNING, False, False, False),
        (DONE_OK, EXITED, D, pb.JobState.SUCCEEDED, True, True, True),
        (FAILED, STARTED, D, pb.JobState.FAILED, True, True, True),
        (Observation(BackendState.CANCELLED), STARTED, D, pb.JobState.CANCELLED, True, True, True),
        # Lost: it may still run on a node cut off from the site, so its volumes stay until the pod is deleted.
        (GONE, {}, D, pb.JobState.LOST, True, True, False),
    ],
)
def test_poll_plan_stores_a_new_revision_and_untracks_terminal_jobs(
    obs: Observation,
    files: dict[str, ContainerFiles],
    phase: Phase,
    state: pb.JobState,
    untrack: bool,
    finished: bool,
    remove_layout: bool,
) -> None:
    plan = plan_poll(META, obs, files, last_status=None, revision=4, now=100.0)
    assert plan.change is not None
    assert plan.change.phase is phase
    assert plan.change.status.state == state
    assert plan.change.revision == 5
    assert plan.change.raw == bytes(plan.change.status)
    assert plan.change.finished_at == (100.0 if finished else None)
    assert plan.untrack is untrack
    assert plan.remove_layout is remove_layout


@pytest.mark.parametrize(("obs", "files"), [(RUNNING, STARTED), (DONE_OK, EXITED)])
def test_poll_plan_for_an_unchanged_status_writes_nothing(obs: Observation, files: dict[str, ContainerFiles]) -> None:
    first = plan_poll(META, obs, files, last_status=None, revision=1, now=100.0)
    assert first.change is not None
    again = plan_poll(META, obs, files, last_status=first.change.raw, revision=2, now=100.0)
    assert again.change is None
    assert again.untrack == first.untrack
    assert again.remove_layout == first.remove_layout


@pytest.mark.parametrize(
    ("created", "phase", "owner", "dead", "plan"),
    [
        (True, S, "me", False, ClaimPlan.SUBMIT),
        (False, A, "me", False, ClaimPlan.ANSWER),
        (False, D, "other", True, ClaimPlan.ANSWER),
        (False, X, "me", False, ClaimPlan.ANSWER),
        (False, S, "me", False, ClaimPlan.RESUME),
        (False, S, "other", False, ClaimPlan.ANSWER),
        (False, S, "other", True, ClaimPlan.ADOPT_AND_RESUME),
    ],
)
def test_claim_plan(created: bool, phase: Phase, owner: str, dead: bool, plan: ClaimPlan) -> None:
    assert plan_claim(created=created, phase=phase, owner=owner, me="me", owner_dead=dead) is plan


@pytest.mark.parametrize(
    ("phase", "owner", "needed"), [(S, "other", True), (S, "me", False), (A, "other", False), (D, "other", False)]
)
def test_owner_liveness_is_only_checked_for_someone_elses_interrupted_submission(
    phase: Phase, owner: str, needed: bool
) -> None:
    assert needs_owner_check(phase, owner, "me") is needed


SLURM_DOWN = CommandFailed(["sbatch"], 1, "sbatch: error: Unable to contact slurm controller")


@pytest.mark.parametrize(
    ("outcome", "created", "action"),
    [
        # accepted: record the id; a new claim answers "created", a resumed one its pending status
        ("42", True, RecordSubmitted("42", Answer.CREATED)),
        ("42", False, RecordSubmitted("42", Answer.PENDING)),
        # refused for good: the pod fails with the batch system's words, the caller is refused
        (
            SubmitRejected("sbatch: error: invalid partition specified: gpu"),
            True,
            FailPod(
                "sbatch: error: invalid partition specified: gpu",
                "slurm refused the job: sbatch: error: invalid partition specified: gpu",
            ),
        ),
        # transient, or an error the backend did not classify: keep the intent, the caller retries
        (BackendUnavailable("slurmctld down"), True, RetryLater("slurm is unavailable: slurmctld down")),
        (BackendUnavailable("slurmctld down"), False, RetryLater("slurm is unavailable: slurmctld down")),
        (SLURM_DOWN, True, RetryLater(f"slurm submission failed: {SLURM_DOWN}")),
        (BackendError("odd"), False, RetryLater("slurm submission failed: odd")),
    ],
)
def test_submit_plan(outcome: str | BackendError, created: bool, action: SubmitAction) -> None:
    assert plan_submit("slurm", outcome, created=created) == action


MISSING = "sbatch is not on PATH (/usr/bin) or not executable: set its path with slurm.sbatch"


@pytest.mark.parametrize(
    ("outcome", "action"),
    [
        # a program is missing: refused at once naming it, not a transient failure the caller waits out
        (BackendUnavailable("command not found: sbatch"), CannotRun(f"slurm cannot submit: {MISSING}")),
        (SLURM_DOWN, CannotRun(f"slurm cannot submit: {MISSING}")),
        # accepted, or refused by the batch system itself: as without the check
        ("42", RecordSubmitted("42", Answer.CREATED)),
        (SubmitRejected("invalid partition"), FailPod("invalid partition", "slurm refused the job: invalid partition")),
    ],
)
def test_submit_plan_when_a_program_is_missing(outcome: str | BackendError, action: SubmitAction) -> None:
    assert plan_submit("slurm", outcome, created=True, unusable=MISSING) == action


def test_deadlines() -> None:
    """None is no deadline: never past, and the later of any two."""
    assert past_deadline(10.0, 10.0) and past_deadline(10.0, 11.0) and not past_deadline(10.0, 9.9)
    assert not past_deadline(None, 1e12)
    assert later(1.0, 2.0) == later(2.0, 1.0) == 2.0
    assert later(None, 2.0) is None and later(2.0, None) is None


@pytest.mark.parametrize(
    ("found", "action"),
    [
        # the backend has it (the crash came after its answer): record that id, never submit twice
        (Reconciled("7"), RecordSubmitted("7", Answer.STORED)),
        # it ran, its id is unknown (the batch system forgot it): record it as found
        (Reconciled(""), RecordSubmitted("", Answer.STORED)),
        # the backend never got it: submit again
        (Reconciled(None), None),
        (None, None),
        # the backend cannot say: submitting now might run the pod twice, so wait for a retry
        (BackendUnavailable("squeue timed out"), RetryLater("slurm is unavailable: squeue timed out")),
    ],
)
def test_resume_plan(found: Reconciled | BackendError | None, action: RecordSubmitted | RetryLater | None) -> None:
    assert plan_resume("slurm", found) == action


@pytest.mark.parametrize(
    ("row", "action"),
    [
        # the backend got it before the crash, id never recorded: record it, do not submit again
        (RecoveryInput("u", S, "", "7", False), Track("u", "7", record=True)),
        (RecoveryInput("u", S, "", "", True), Track("u", "", record=True)),
        # steady state after a restart: nothing to write
        (RecoveryInput("u", A, "7", "7", True), Track("u", "7", record=False)),
        # the backend reports another id (resubmitted elsewhere): follow it
        (RecoveryInput("u", A, "7", "9", True), Track("u", "9", record=True)),
        # never reached the backend, script stored: submit again
        (RecoveryInput("u", S, "", None, True), Resubmit("u")),
        # never reached the backend, no script: only the caller's retry can go on
        (RecoveryInput("u", S, "", None, False), AwaitRetry("u")),
        # never reached the backend and its caller gave up (deadline passed): never submitted, script or not
        (RecoveryInput("u", S, "", None, True, expired=True), Drop("u")),
        (RecoveryInput("u", S, "", None, False, expired=True), Drop("u")),
        # the backend has it already: followed whatever the deadline (it was handed over before it)
        (RecoveryInput("u", S, "", "7", True, expired=True), Track("u", "7", record=True)),
    ],
)
def test_recovery_plan(row: RecoveryInput, action: object) -> None:
    assert plan_recovery([row]) == [action]


def test_a_resubmitted_job_is_recorded_under_its_new_id() -> None:
    row = RecoveryInput("u", S, "", None, True)
    assert after_resubmit(row, "11") == Track("u", "11", record=True)


def test_only_dead_other_owners_are_adopted() -> None:
    assert owners_to_adopt({"me", "a", "b", "c"}, "me", {"c", "a", "me"}) == ["a", "c"]
    assert owners_to_adopt({"me"}, "me", {"me"}) == []


@pytest.mark.parametrize(
    ("phase", "found", "untrack", "stop_backend", "tombstone"),
    [
        (None, False, False, False, False),
        (S, True, True, True, True),
        (A, True, True, True, True),
        (D, True, True, False, True),
        (X, True, False, False, False),
    ],
)
def test_cancel_plan(phase: Phase | None, found: bool, untrack: bool, stop_backend: bool, tombstone: bool) -> None:
    plan = plan_cancel(phase)
    assert (plan.found, plan.untrack, plan.stop_backend, plan.tombstone) == (found, untrack, stop_backend, tombstone)


PURE_IMPORTS = {
    "__future__",
    "enum",
    "collections.abc",
    "dataclasses",
    "datetime",
    "interlink_nats.gen.interlink_nats",
    "interlink_nats.submitters.core.backend",
    "interlink_nats.submitters.core.status",
    "interlink_nats.submitters.core.usage",
    "interlink_nats.gen.interlink_nats.v1",
}


@pytest.mark.parametrize("module", ["lifecycle", "status", "errors"])
def test_the_core_imports_no_io(module: str) -> None:
    """The decisions stay pure: no asyncio, sqlite, subprocess, NATS or RPC library in the core modules."""
    tree = ast.parse((Path(pkg.__file__).parent / f"{module}.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert imported <= PURE_IMPORTS, imported - PURE_IMPORTS
