"""When a pod group goes to its pool: the policies of the one mechanism "hold, then submit as one". No I/O.

A policy is asked two questions, with the members arrived so far, what the arriving pod declares, the site's
limits and the time: may this pod join (``admit``: the group to add it to, or a 4xx naming what the pod got
wrong), and what now (``decide``: go on holding, submit the group as one, or refuse it, failing its members).
``submission`` is the group as sent. ``group_runner`` does every I/O around these answers, the same for every
policy: the gang below is the first; coalescing a Job's pods into one array within a time or count window is the
second (``array_policy``: it submits, never refuses, when its window closes), with no second copy of the holding.
``name_for`` says which group of a pod's declared name it joins (a gang: that one; a Job: its array still forming).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.gateway.pod_group import (
    INCOMPLETE_REASON,
    PodGroup,
    PodGroupLimits,
    PodGroupMember,
    group_key,
    group_uid,
    waiting_message,
)
from interlink_nats.services.scripts.pod_group import FAILURE_POLICY_ANNOTATION as POLICY_ANNOTATION
from interlink_nats.services.scripts.pod_group import GROUP_NAME_LABEL as NAME_LABEL
from interlink_nats.services.scripts.pod_group import GROUP_TOTAL_ANNOTATION as TOTAL_ANNOTATION
from interlink_nats.services.scripts.pod_group import PodGroupSpec

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the members waiting; ``message`` is what each member's status says meanwhile."""

    message: str


@dataclass(frozen=True, slots=True)
class SubmitAsOne:
    """Send the members as one submission now."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Give the group up: every member fails with ``reason`` and ``message``."""

    reason: str
    message: str


Decision = Hold | SubmitAsOne | Refuse


class GroupPolicy(Protocol):
    """What ``group_runner`` asks of a kind of pod group; everything else about holding is the same for all."""

    @property
    def kind(self) -> pb.GroupKind:
        """What ``SubmitGroupRequest.kind`` says of its groups."""
        ...

    def name_for(
        self,
        held: Callable[[str], PodGroup | None],
        namespace: str,
        spec: PodGroupSpec,
        now: float,
        fits: Callable[[PodGroup], bool] = ...,
    ) -> str: ...

    def admit(
        self,
        group: PodGroup | None,
        member: PodGroupMember,
        spec: PodGroupSpec,
        *,
        namespace: str,
        pool: str,
        now: float,
    ) -> PodGroup: ...

    def decide(self, group: PodGroup, now: float) -> Decision: ...

    def submission(self, group: PodGroup) -> list[pb.JobScript]: ...


@dataclass(frozen=True, slots=True)
class GangPolicy:
    """A gang: every declared member must arrive (within ``wait_s`` of the first) before any is sent, and all
    start as ONE backend job; a group incomplete after ``wait_s`` is refused (``PodGroupIncomplete``)."""

    wait_s: float
    limits: PodGroupLimits = field(default_factory=PodGroupLimits)

    @property
    def kind(self) -> pb.GroupKind:
        return pb.GroupKind.UNSPECIFIED  # a gang, as every submitter reads a request without the field

    def name_for(
        self,
        held: Callable[[str], PodGroup | None],
        namespace: str,
        spec: PodGroupSpec,
        now: float,
        fits: Callable[[PodGroup], bool] = lambda _: True,
    ) -> str:
        """A gang is the group its pods name (whether it fits one message is the pool's to answer)."""
        return spec.name

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
        """The group ``member`` may join (a new group for its first member), as the member's pod declares it
        (``spec``, ``namespace``, ``pool``): a 422 naming the annotation when the group is larger than the site
        runs as one gang (retrying never helps), or naming both pods when it does not fit the members already
        there (another pool, count or failure policy), a 409 when it comes after the group is complete. A
        member arriving again (interLink retries) is the same member. The caller adds it."""
        if group is None:
            self._check_size(spec, namespace)
            return PodGroup(namespace, spec.name, pool, spec.total, int(spec.failure_policy), now)
        if member.uid in group.members:
            return group
        other = next(iter(group.members.values())).name if group.members else "?"
        where = f"pod group {group.key}"
        if pool != group.pool:
            raise GatewayError(
                422,
                f"spec.tolerations: {where}: pod {member.name} is for pool {pool!r} but pod {other} of the "
                f"same group is for pool {group.pool!r}; a pod group runs in one pool",
            )
        if spec.total != group.total:
            raise GatewayError(
                422,
                f'metadata.annotations["{TOTAL_ANNOTATION}"]: {where}: pod {member.name} says {spec.total} members '
                f"but pod {other} of the same group says {group.total}",
            )
        if int(spec.failure_policy) != group.failure_policy:
            raise GatewayError(
                422,
                f'metadata.annotations["{POLICY_ANNOTATION}"]: {where}: pod {member.name}\'s policy differs from pod '
                f"{other}'s",
            )
        if group.complete:
            raise GatewayError(
                409,
                f'metadata.labels["{NAME_LABEL}"]: {where}: all {group.total} members have arrived already; '
                f"pod {member.name} is one more",
            )
        self._check_size(spec, namespace)
        return group

    def _check_size(self, spec: PodGroupSpec, namespace: str) -> None:
        if spec.total > self.limits.group_size:
            raise GatewayError(
                422,
                f'metadata.annotations["{TOTAL_ANNOTATION}"]: pod group {group_key(namespace, spec.name)} has '
                f"{spec.total} members, more than this site's limit of {self.limits.group_size} (gateway setting "
                "max_group_size)",
            )

    def decide(self, group: PodGroup, now: float) -> Decision:
        """Complete: submit. Its first member came ``wait_s`` ago or more: refuse. Else hold."""
        if group.complete:
            return SubmitAsOne()
        if now - group.first_at >= self.wait_s:
            return Refuse(
                INCOMPLETE_REASON,
                f"pod group {group.key}: only {len(group.members)} of {group.total} members arrived within "
                f"{self.wait_s:g} s",
            )
        return Hold(waiting_message(group))

    def submission(self, group: PodGroup) -> list[pb.JobScript]:
        """The members' jobs in rank order, each a copy with its place in the gang (``SubmitGroupRequest.members``):
        the held jobs stay as they arrived, so a group that loses a member and completes again ranks afresh."""
        uid = group_uid(group)
        jobs = []
        for rank, member in enumerate(group.ranked()):
            job = copy.copy(member.job)
            job.gang = pb.GangMember(
                group_uid=uid,
                group_name=group.name,
                rank=rank,
                size=len(group.members),
                failure_policy=pb.GangFailurePolicy(group.failure_policy),
            )
            jobs.append(job)
        return jobs
