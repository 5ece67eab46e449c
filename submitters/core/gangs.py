"""Pod groups (gangs) as pure decisions: a request's validity, what a SubmitGroup does after its
claims, what recovery does with a gang's rows, and each member's own observation of the gang's one job.

Why pure (like :mod:`.lifecycle`): a gang is several registry rows sharing one backend job, so a crash can
leave them in mixed phases; deciding here keeps "never submit a member alone, never submit a gang twice"
testable without I/O. The engine (``engine.gangs``) gathers the inputs and executes the plans.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_label_value, is_pod_uid
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.core.requests import shown

NOT_RUN_REASONS: dict[str, str] = {
    "htcondor": "no CE route for parallel-universe jobs yet, and a gang's members must start together",
}
"""Why a backend without ``RunsGangs`` refuses SubmitGroup (the refusal says it): one entry for each registered
backend without it, and none for another (tests/conformance/test_registry.py)."""


def refusal(backend: str) -> str:
    why = NOT_RUN_REASONS.get(backend, "it cannot start several pods as one job")
    return f"the {backend} backend does not run pod groups (SubmitGroup): {why}"


def validate_group(members: Sequence[pb.JobScript]) -> str:
    """The gang's group uid when ``members`` form one gang in rank order; else ValueError naming the field."""
    if not members:
        raise ValueError("members: a pod group needs at least one member")
    group_uid = group_name = ""
    seen: set[str] = set()
    for i, job in enumerate(members):
        gang = job.gang
        if gang is None:
            raise ValueError(f"members[{i}].gang is missing: every member of a pod group carries it")
        if i == 0:
            group_uid = gang.group_uid
            if not is_pod_uid(group_uid):
                raise ValueError(
                    f"members[0].gang.group_uid {group_uid!r} is invalid: letters, digits, '.', '_' and '-' only"
                )
        elif gang.group_uid != group_uid:
            raise ValueError(f"members[{i}].gang.group_uid {gang.group_uid!r} differs from members[0]'s {group_uid!r}")
        if not gang.group_name or not is_label_value(gang.group_name):
            raise ValueError(
                f"members[{i}].gang.group_name {shown(gang.group_name)} is not a Kubernetes label value "
                "(letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most 63)"
            )
        if i == 0:
            group_name = gang.group_name
        elif gang.group_name != group_name:
            raise ValueError(f"members[{i}].gang.group_name {shown(gang.group_name)} differs from members[0]'s")
        if gang.size != len(members):
            raise ValueError(f"members[{i}].gang.size is {gang.size}, but the request has {len(members)} members")
        if gang.rank != i:
            raise ValueError(f"members[{i}].gang.rank is {gang.rank}: members are sent in rank order (rank = index)")
        uid = job.pod.uid if job.pod is not None else ""
        if uid in seen:
            raise ValueError(f"members[{i}].pod.uid {uid!r} appears twice in the pod group")
        if uid == group_uid:
            raise ValueError(f"members[{i}].pod.uid equals gang.group_uid {group_uid!r}: the group needs its own uid")
        seen.add(uid)
    return group_uid


def failure_policy(gang: pb.GangMember | None) -> pb.GangFailurePolicy:
    """UNSPECIFIED is FAIL_GANG (the proto's default)."""
    policy = gang.failure_policy if gang is not None else pb.GangFailurePolicy.UNSPECIFIED
    return pb.GangFailurePolicy.CONTINUE if policy == pb.GangFailurePolicy.CONTINUE else pb.GangFailurePolicy.FAIL_GANG


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One member's registry row, as the plans need it."""

    uid: str
    phase: Phase
    job_id: str
    gang: str


class GroupPlan(enum.Enum):
    """What a SubmitGroup does after claiming every member."""

    SUBMIT = "submit"
    """Every claim is new: hand the gang to the backend."""
    ANSWER = "answer"
    """Every member is past its submission (a retry of a submitted gang): answer with the stored statuses."""
    RECORD = "record"
    """Some members have the gang's job id, the others not yet (a crash between the marks): record it for all."""
    FIND_THEN_SUBMIT = "find_then_submit"
    """An interrupted submission: ask the backend for the gang (``find_gang``) before submitting it."""


def plan_group(rows: Sequence[MemberRow], created: Sequence[bool]) -> GroupPlan:
    if all(created):
        return GroupPlan.SUBMIT
    if any(r.job_id for r in rows):
        waiting = any(r.phase is Phase.SUBMITTING for r in rows)
        return GroupPlan.RECORD if waiting else GroupPlan.ANSWER
    if all(r.phase is not Phase.SUBMITTING for r in rows):
        return GroupPlan.ANSWER  # refused or cancelled before the backend had it: the stored statuses say so
    return GroupPlan.FIND_THEN_SUBMIT


def known_job_id(rows: Sequence[MemberRow]) -> str:
    return next((r.job_id for r in rows if r.job_id), "")


@dataclass(frozen=True, slots=True)
class GangRecovery:
    """Recovery's decision for one gang's live rows after a restart."""

    job_id: str
    """The gang's job id when some member already recorded it ('' otherwise)."""
    find: bool
    """No member recorded the job: ask the backend (``find_gang``)."""
    may_submit: bool
    """Not found: every one of the ``size`` members is claimed with its script stored, so submit the gang once.
    False: wait for the gateway's retry of SubmitGroup (it carries every member)."""


def plan_gang_recovery(rows: Sequence[MemberRow], *, size: int, scripts_stored: bool) -> GangRecovery:
    job_id = known_job_id(rows)
    if job_id:
        return GangRecovery(job_id, find=False, may_submit=False)
    complete = len(rows) == size and all(r.phase is Phase.SUBMITTING for r in rows)
    return GangRecovery("", find=True, may_submit=complete and scripts_stored)


def member_observation(gang: Observation, exit_code: int | None, stopped: bool, group: str) -> Observation:
    """One member's view of the gang's job: the gang's, except once the job ended and the launcher recorded the
    member's own exit code (``layout.GANG_MEMBER_EXIT``): then that code, so a member that succeeded reads
    as succeeded although another failed, and one stopped for another's failure says so."""
    if exit_code is None or gang.state not in (BackendState.COMPLETED, BackendState.FAILED):
        return gang if gang.accounted is None else replace(gang, accounted=None)
    if exit_code == 0:
        return Observation(BackendState.COMPLETED, 0, started_at=gang.started_at, finished_at=gang.finished_at)
    sig = exit_code - 128 if 128 < exit_code < 160 else None
    if stopped:
        why = f"stopped by SIGTERM because another member of pod group {group} failed (failure policy FailGang)"
        return Observation(
            BackendState.FAILED,
            exit_code,
            sig,
            reason=why,
            started_at=gang.started_at,
            finished_at=gang.finished_at,
            gang_stopped=True,
        )
    return Observation(BackendState.FAILED, exit_code, sig, started_at=gang.started_at, finished_at=gang.finished_at)
