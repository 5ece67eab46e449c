"""The second policy of the pod-group mechanism: the pods of one Kubernetes Job coalesced into arrays. No I/O.

A gang holds until every member has arrived; an array never waits for the whole Job. The pods of one Job that
reach the gateway for one pool are sent as ONE ``SubmitGroup`` of kind ``GROUP_KIND_ARRAY`` once none of them
arrived for ``window_s`` (a quiet window: a Job whose pods come steadily, however long its burst, forms one
array), or ``max_wait_s`` after its first pod, or when it holds ``max_count``, whichever comes first; a pod
arriving after that opens the next array of that Job, so a Job's pods never deadlock and none waits longer than
``max_wait_s``. Pods of a Job
whose batch options differ (resources, backend flags, account, storage: what one array's tasks must share, as
Slurm's ``--array`` gives every task the same options) form separate arrays. ``group_runner`` does the I/O,
the same as for gangs; this module only answers its questions.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.gateway.group_policy import Decision, Hold, SubmitAsOne
from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupMember, group_key
from interlink_nats.services.scripts.job_array import JobOfPod
from interlink_nats.services.scripts.pod_group import PodGroupSpec

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

ARRAY_UID_PREFIX = "a-"
SEPARATOR = ":"
"""Between the parts of an array's group name: in none of them (a Job name, a label value, a pool name)."""
NAME_GAP = 8
"""Free array numbers in a row after which no array of the Job is still forming (``ArrayPolicy.name_for``)."""


def batch_shape(job: pb.JobScript) -> str:
    """What the tasks of one array must share, as a short digest: pods differing in it go to different arrays."""
    parts = pb.JobScript(
        resources=job.resources,
        backend_flags=job.backend_flags,
        run_as_user=job.run_as_user,
        run_as_group=job.run_as_group,
        storage=job.storage,
    )
    return hashlib.sha256(bytes(parts)).hexdigest()[:12]


def array_spec(owner: JobOfPod, pool: str, job: pb.JobScript, max_count: int) -> PodGroupSpec:
    """The group a Job's pod offers to join (its name names the Job, the pool and the batch shape; the runner
    asks :meth:`ArrayPolicy.name_for` which array of it that is now)."""
    name = SEPARATOR.join((owner.name, owner.uid, pool, batch_shape(job)))
    return PodGroupSpec(name, max_count, pb.GangFailurePolicy.UNSPECIFIED, owner.index)


def _utc(at: float) -> str:
    when = dt.datetime.fromtimestamp(at, dt.UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 100_000}Z"


def array_uid(group: PodGroup) -> str:
    """The array's id: the same for the same pods (found again after a crash), another for the Job's next array."""
    digest = hashlib.sha256("\0".join([group.namespace, group.name, *sorted(group.members)]).encode())
    return ARRAY_UID_PREFIX + digest.hexdigest()[:40]


def job_of_group(group: PodGroup) -> tuple[str, str]:
    """(Job name, Job uid) of an array, from its group name."""
    parts = group.name.split(SEPARATOR)
    return (parts[0], parts[1]) if len(parts) >= 2 else ("", "")


@dataclass(frozen=True, slots=True)
class ArrayPolicy:
    """Coalesce a Job's pods for one pool: submit once none arrived for ``window_s``, or ``max_wait_s`` after
    the first, or once ``max_count`` have; never refuse (a pod that cannot join goes into the next array)."""

    window_s: float
    max_count: int
    max_wait_s: float = 30.0

    @property
    def kind(self) -> pb.GroupKind:
        return pb.GroupKind.ARRAY

    def name_for(
        self,
        held: Callable[[str], PodGroup | None],
        namespace: str,
        spec: PodGroupSpec,
        now: float,
        fits: Callable[[PodGroup], bool] = lambda _: True,
    ) -> str:
        """The array a pod joins: the Job's array still forming that it ``fits`` (the caller's word: one more
        member keeps the array's ``SubmitGroup`` within NATS's max_payload), else a new one (the first free
        number). An array sent and forgotten leaves its number free while a later one may still form, so the
        search goes past free numbers (up to ``NAME_GAP`` in a row: as many of a Job's arrays in flight at once)
        before it decides that none is forming. An array the pod does not fit takes no more members and is sent
        when its quiet window or its longest wait ends."""
        free: str | None = None
        gap, n = 0, 0
        while gap < NAME_GAP:
            name = f"{spec.name}{SEPARATOR}{n}"
            group = held(group_key(namespace, name))
            if group is None:
                free = free or name
                gap += 1
            elif isinstance(self.decide(group, now), Hold) and fits(group):
                return name
            else:
                gap = 0
            n += 1
        assert free is not None
        return free

    def admit(
        self,
        group: PodGroup | None,
        member: PodGroupMember,
        spec: PodGroupSpec,
        *,
        namespace: str,
        pool: str,
        now: float,
    ) -> PodGroup:
        """Any pod of the Job may join its forming array (``name_for`` chose one that is); a new array starts
        its window now."""
        if group is None:
            return PodGroup(namespace, spec.name, pool, self.max_count, 0, now)
        if pool != group.pool:  # name_for's names carry the pool: only a caller's mistake gets here
            raise GatewayError(500, f"array {group.key}: pod {member.name} is for another pool ({pool!r})")
        return group

    def send_at(self, group: PodGroup) -> float:
        """When the array is sent unless another pod arrives first: a quiet ``window_s`` after the last
        arrival, never later than ``max_wait_s`` after the first (wall time)."""
        return min(group.last_at + self.window_s, group.first_at + self.max_wait_s)

    def decide(self, group: PodGroup, now: float) -> Decision:
        """Full, quiet for the window, or held for the longest wait: submit. Else hold (the status says until
        when at most)."""
        if len(group.members) >= self.max_count or now >= self.send_at(group):
            return SubmitAsOne()
        job_name, _ = job_of_group(group)
        return Hold(
            f"coalescing the pods of Job {group.namespace}/{job_name or '?'} into one array: {len(group.members)} "
            f"so far; sent at {_utc(self.send_at(group))} unless more arrive within {self.window_s:g} s, at "
            f"{_utc(group.first_at + self.max_wait_s)} at the latest"
        )

    def submission(self, group: PodGroup) -> list[pb.JobScript]:
        """The members' jobs in task order (completion index, then pod name), each a copy with its place in the
        array (``SubmitGroupRequest.members``); the held jobs stay as they arrived."""
        uid = array_uid(group)
        job_name, job_uid = job_of_group(group)
        ranked = group.ranked()
        jobs = []
        for task, member in enumerate(ranked):
            job = copy.copy(member.job)
            job.array = pb.ArrayMember(
                array_uid=uid,
                job_name=job_name,
                job_uid=job_uid,
                task=task,
                size=len(ranked),
                completion_index=member.index,
            )
            jobs.append(job)
        return jobs
