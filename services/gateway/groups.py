"""Pod groups held by the gateway until every member has arrived: the decisions, with no I/O.

Why the gateway holds them: a gang must start as ONE backend job (``SubmitGroup``), but interLink sends its pods
one ``/create`` at a time and needs a 200 for each at once. So each member is rendered and answered at once,
kept here (and in redis, by ``held``), and the whole group is sent when the last one arrives. What a held group
is, who may join it, the members' ranks, the group's uid and the statuses a waiting or failed member shows
are decided here; ``gangs`` does the I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.pod_limits import GROUP_SIZE_MAX
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.scripts.pod_group import FAILURE_POLICY_ANNOTATION as POLICY_ANNOTATION
from interlink_nats.services.scripts.pod_group import GROUP_NAME_LABEL as NAME_LABEL
from interlink_nats.services.scripts.pod_group import GROUP_TOTAL_ANNOTATION as TOTAL_ANNOTATION
from interlink_nats.services.scripts.pod_group import PodGroup

WAITING_REASON = "PodGroupWaiting"
INCOMPLETE_REASON = "PodGroupIncomplete"
REJECTED_REASON = "PodGroupRejected"
UNAVAILABLE_REASON = "PodGroupUnavailable"
HELD_JID_PREFIX = "held:"
"""A held member's ``PodJID``: interLink needs a non-empty one at once (the VK writes it on the pod as its
``JobID``); the pod's status carries the gang's real job id once the group was submitted."""


def group_key(namespace: str, name: str) -> str:
    """Kueue's pod groups are named per namespace: ``<namespace>/<name>``, each part with ``%`` and ``/``
    percent-encoded, so no two (namespace, name) pairs share a key (``x`` + ``y/z`` and ``x/y`` + ``z`` once
    did, and ran as one gang). A valid namespace and group name contain neither, so their key is spelled as
    it always was (and as the member's ``PodJID`` shows it)."""
    return f"{quote(namespace, safe='', errors='surrogatepass')}/{quote(name, safe='', errors='surrogatepass')}"


def held_jid(key: str) -> str:
    return HELD_JID_PREFIX + key


@dataclass(slots=True)
class HeldMember:
    """One arrived member: what it needs to be submitted, and to answer ``/status`` after a restart."""

    uid: str
    name: str
    index: int | None
    job: bytes
    """Its rendered ``JobScript``, encoded (sent as is, with ``gang`` set, in ``SubmitGroup``)."""
    images: dict[str, str] = field(default_factory=dict)

    def rank_key(self) -> tuple[bool, int, str, str]:
        """Completion index first (Indexed Jobs, JobSets), then pod name; the uid only breaks exact ties."""
        return (self.index is None, self.index or 0, self.name, self.uid)


@dataclass(slots=True)
class HeldGroup:
    namespace: str
    name: str
    pool: str
    total: int
    failure_policy: int
    first_at: float
    """Wall time of the first member's arrival: the wait is counted from it, across gateway restarts."""
    members: dict[str, HeldMember] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return group_key(self.namespace, self.name)

    @property
    def complete(self) -> bool:
        return len(self.members) >= self.total

    def ranked(self) -> list[HeldMember]:
        return sorted(self.members.values(), key=HeldMember.rank_key)

    def to_json(self) -> str:
        return json.dumps(
            {
                "namespace": self.namespace,
                "name": self.name,
                "pool": self.pool,
                "total": self.total,
                "failure_policy": self.failure_policy,
                "first_at": self.first_at,
                "members": [
                    {
                        "uid": m.uid,
                        "name": m.name,
                        "index": m.index,
                        "job": base64.b64encode(m.job).decode(),
                        "images": m.images,
                    }
                    for m in self.members.values()
                ],
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> HeldGroup:
        data: dict[str, Any] = json.loads(text)
        group = cls(
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            pool=str(data["pool"]),
            total=int(data["total"]),
            failure_policy=int(data["failure_policy"]),
            first_at=float(data["first_at"]),
        )
        for m in data["members"]:
            index = m.get("index")
            group.members[str(m["uid"])] = HeldMember(
                uid=str(m["uid"]),
                name=str(m["name"]),
                index=None if index is None else int(index),
                job=base64.b64decode(m["job"]),
                images={str(k): str(v) for k, v in (m.get("images") or {}).items()},
            )
        return group


def admit(
    group: HeldGroup | None, member: HeldMember, view: PodGroup, *, namespace: str, pool: str, now: float
) -> HeldGroup:
    """The group ``member`` may join (a new group for its first member), as the member's pod sees it (``view``,
    ``namespace``, ``pool``): a 422 naming both pods when it does not fit the members already there (another
    pool, count or failure policy), or comes after the group is already complete. A member arriving again
    (interLink retries) is the same member. The caller adds it."""
    if group is None:
        return HeldGroup(namespace, view.name, pool, view.total, int(view.failure_policy), now)
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
    if view.total != group.total:
        raise GatewayError(
            422,
            f'metadata.annotations["{TOTAL_ANNOTATION}"]: {where}: pod {member.name} says {view.total} members '
            f"but pod {other} of the same group says {group.total}",
        )
    if int(view.failure_policy) != group.failure_policy:
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
    return group


@dataclass(frozen=True, slots=True)
class HeldLimits:
    """The site's bounds on what pod groups may make the gateway hold (settings ``max_group_size``,
    ``max_held_members_per_namespace``, ``max_held_bytes_per_namespace``, ``max_held_bytes``)."""

    group_size: int = GROUP_SIZE_MAX
    members_per_namespace: int = GROUP_SIZE_MAX
    bytes_per_namespace: int = 64 * 1024 * 1024
    bytes_total: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HeldUsage:
    members: int
    """The members one namespace's waiting groups declared (their total counts added up): a group's seats are
    taken by its first member, so a namespace at its limit can still complete every group it has."""
    bytes: int
    """Their arrived members' rendered jobs, in bytes."""
    bytes_total: int
    """Every namespace's held jobs, in bytes."""


def check_size(view: PodGroup, limits: HeldLimits, namespace: str) -> None:
    """A 422 naming the annotation when the group declares more members than the site runs as one gang:
    retrying never helps."""
    if view.total > limits.group_size:
        raise GatewayError(
            422,
            f'metadata.annotations["{TOTAL_ANNOTATION}"]: pod group {group_key(namespace, view.name)} has '
            f"{view.total} members, more than this site's limit of {limits.group_size} (gateway setting "
            "max_group_size)",
        )


def check_room(limits: HeldLimits, usage: HeldUsage, group: HeldGroup, member: HeldMember) -> None:
    """A 429 when holding ``member`` would take its namespace (or the gateway) past a limit on what it holds:
    the room comes back as that namespace's groups are sent or fail, so a later create may pass. A new group
    takes all its members' seats at once (``HeldUsage.members``); its later members need only bytes."""
    size = len(member.job)
    where = f"pod group {group.key}: pod {member.name} ({size} bytes) cannot be held"
    later = "; it can be once groups now waiting are sent or fail"
    if not group.members and usage.members + group.total > limits.members_per_namespace:
        raise GatewayError(
            429,
            f"{where}: namespace {group.namespace} has groups of {usage.members} members waiting already; with "
            f"this group's {group.total} that is more than the {limits.members_per_namespace} a namespace may have "
            f"waiting (setting max_held_members_per_namespace){later}",
        )
    if usage.bytes + size > limits.bytes_per_namespace:
        raise GatewayError(
            429,
            f"{where}: namespace {group.namespace} holds {usage.bytes} bytes of waiting pod-group members, and "
            f"{limits.bytes_per_namespace} is the most per namespace (setting max_held_bytes_per_namespace){later}",
        )
    if usage.bytes_total + size > limits.bytes_total:
        raise GatewayError(
            429,
            f"{where}: the gateway holds {usage.bytes_total} bytes of waiting pod-group members, and "
            f"{limits.bytes_total} is the most (setting max_held_bytes){later}",
        )


def group_uid(group: HeldGroup) -> str:
    """The gang's id: the same for the same pods (a resubmission after a crash is found again by it), another
    for a group of the same name made again of new pods. A valid job-directory name, like a pod UID."""
    digest = hashlib.sha256("\0".join([group.namespace, group.name, *sorted(group.members)]).encode())
    return "g-" + digest.hexdigest()[:40]


def gang_jobs(group: HeldGroup) -> list[pb.JobScript]:
    """The members' jobs in rank order, each with its place in the gang (``SubmitGroupRequest.members``)."""
    uid = group_uid(group)
    jobs = []
    for rank, member in enumerate(group.ranked()):
        job = pb.JobScript.parse(member.job)
        job.gang = pb.GangMember(
            group_uid=uid,
            group_name=group.name,
            rank=rank,
            size=len(group.members),
            failure_policy=pb.GangFailurePolicy(group.failure_policy),
        )
        jobs.append(job)
    return jobs


def waiting_message(group: HeldGroup) -> str:
    return f"waiting for pod group {group.key}: {len(group.members)} of {group.total} members have arrived"


def incomplete_message(group: HeldGroup, wait_s: float) -> str:
    return f"pod group {group.key}: only {len(group.members)} of {group.total} members arrived within {wait_s:g} s"


def expired(groups: list[HeldGroup], now: float, wait_s: float) -> list[HeldGroup]:
    """Incomplete groups whose first member came ``wait_s`` ago or more (a complete one is being submitted)."""
    return [g for g in groups if not g.complete and now - g.first_at >= wait_s]


TRANSIENT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN", "INTERNAL"})
"""RPC status names of a ``SubmitGroup`` worth trying again; any other is the pool refusing the group."""


def member_status(
    init_containers: tuple[str, ...], containers: tuple[str, ...], *, final: bool, reason: str, message: str
) -> pb.JobStatus:
    """A held member's status: every container waiting (``final``: terminated, the pod failed) with the reason."""
    phase = pb.ContainerPhase.TERMINATED if final else pb.ContainerPhase.WAITING
    exit_code = 1 if final else None
    statuses = [
        pb.ContainerStatus(name=n, init=init, phase=phase, reason=reason, message=message, exit_code=exit_code)
        for init, names in ((True, init_containers), (False, containers))
        for n in names
    ]
    state = pb.JobState.FAILED if final else pb.JobState.PENDING
    return pb.JobStatus(state=state, containers=statuses, reason=reason, message=message)
