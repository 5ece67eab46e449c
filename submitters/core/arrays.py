"""An array (``SubmitGroup`` of kind ``GROUP_KIND_ARRAY``): its request checked, and what a resumed one does. Pure.

An array's members are ordinary single pods at the submitter (their own rows, job ids, polls and cancels); only
their submission is one. What makes it crash safe is in :mod:`submitters.engine.arrays`: the members claimed,
then the array's member list (``ARRAY_MEMBERS``) in its own directory, then ONE backend submission named by the
array uid; a resumed one asks ``find_array`` before it submits again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_pod_uid
from interlink_nats.kernel.pod_limits import GROUP_SIZE_MAX
from interlink_nats.submitters.core.lifecycle import Phase

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

ARRAY_DIR = "arrays"
"""Below the state directory, beside ``jobs`` and ``gangs``: one directory per array uid."""
ARRAY_MEMBERS = "members"
"""In an array's directory: its members' pod uids in task order, one a line, written before the submission."""


def validate_array(members: Sequence[pb.JobScript]) -> str:
    """The array uid when ``members`` form one array in task order; else ValueError naming the field."""
    if not members:
        raise ValueError("members: an array needs at least one member")
    if len(members) > GROUP_SIZE_MAX:  # any client with the pool's credential may send this, not only the gateway
        raise ValueError(f"members: {len(members)} members, more than an array may have ({GROUP_SIZE_MAX})")
    array_uid = ""
    seen: set[str] = set()
    for i, job in enumerate(members):
        array = job.array
        if array is None:
            raise ValueError(f"members[{i}].array is missing: every member of an array carries it")
        if job.gang is not None:
            raise ValueError(f"members[{i}].gang is set: a member of an array is no member of a pod group")
        if i == 0:
            array_uid = array.array_uid
            if not is_pod_uid(array_uid):
                raise ValueError(
                    f"members[0].array.array_uid {array_uid!r} is invalid: letters, digits, '.', '_' and '-' only"
                )
        elif array.array_uid != array_uid:
            raise ValueError(f"members[{i}].array.array_uid {array.array_uid!r} differs from members[0]'s")
        if array.size != len(members):
            raise ValueError(f"members[{i}].array.size is {array.size}, but the request has {len(members)} members")
        if array.task != i:
            raise ValueError(f"members[{i}].array.task is {array.task}: members are sent in task order (task = index)")
        uid = job.pod.uid if job.pod is not None else ""
        if uid in seen:
            raise ValueError(f"members[{i}].pod.uid {uid!r} appears twice")
        seen.add(uid)
    return array_uid


@dataclass(frozen=True, slots=True)
class MemberState:
    """What the array's submission needs of one member's registry row."""

    uid: str
    phase: Phase
    job_id: str


def waiting(rows: Sequence[MemberState]) -> list[int]:
    """The members still waiting for the backend (claimed, never recorded as submitted), by task."""
    return [i for i, r in enumerate(rows) if r.phase is Phase.SUBMITTING and not r.job_id]


def to_cancel(rows: Sequence[MemberState]) -> list[int]:
    """The members whose pod was deleted (or that ended) before the array's submission was recorded: once the
    backend has their tasks, those tasks are cancelled (a deleted pod must never run)."""
    return [i for i, r in enumerate(rows) if r.phase is not Phase.SUBMITTING and r.phase is not Phase.ACTIVE]


def settle(rows: Sequence[MemberState], waited: Sequence[int], recorded: Sequence[bool]) -> tuple[list[int], list[int]]:
    """Once the backend has the array and each member in ``waited`` was offered its id (``recorded[k]``: whether
    ``waited[k]``'s row was still submitting and took it): the members to track, and those whose task to cancel.

    Cancelled: every member whose pod was deleted (or that ended) before the submission without an id of its own
    (``to_cancel``), and every waiting member whose id could not be recorded because its pod was deleted while
    the backend submitted (a Cancel that found it still submitting: no task to stop yet). A deleted member that
    had an id stopped its task with its own cancel."""
    track = [i for i, ok in zip(waited, recorded, strict=True) if ok]
    lost = [i for i, ok in zip(waited, recorded, strict=True) if not ok]
    return track, sorted({*(i for i in to_cancel(rows) if not rows[i].job_id), *lost})


def member_ids(answered: Sequence[str], size: int) -> tuple[str, ...]:
    """The backend's member ids, checked: one per member, none empty (else the array cannot be followed)."""
    if len(answered) != size or not all(answered):
        raise ValueError(f"the backend answered {len(answered)} member job ids for an array of {size}")
    return tuple(answered)
