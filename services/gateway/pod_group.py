"""A pod group at the gateway: pods submitted as one, held until their policy says to send them. No I/O.

Why the gateway holds them: a gang must start as ONE backend job (``SubmitGroup``), but interLink sends its pods
one ``/create`` at a time and needs a 200 for each at once. So each member is rendered and answered at once,
kept (in memory and in redis, by ``group_store``), and the group is sent as one when its policy
(``group_policy``) says so. What a group and a member are, the group's key and uid, the site's limits on what
is held, and the statuses a waiting or failed member shows are here; ``group_runner`` does the I/O.
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

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

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
class PodGroupMember:
    """One arrived member: what it needs to be submitted, and to answer ``/status`` after a restart."""

    uid: str
    name: str
    index: int | None
    job: pb.JobScript
    """Its rendered job, parsed once (on arrival, or when loaded from redis): never changed, the group's
    submission sends copies with their place in the group set."""
    encoded: bytes
    """The same job encoded once: what redis keeps and what the site's limits count, never encoded again."""
    images: dict[str, str] = field(default_factory=dict)

    @classmethod
    def arrived(
        cls, uid: str, name: str, index: int | None, job: pb.JobScript, images: dict[str, str]
    ) -> PodGroupMember:
        return cls(uid, name, index, job, bytes(job), images)

    @property
    def size(self) -> int:
        return len(self.encoded)

    def rank_key(self) -> tuple[bool, int, str, str]:
        """Completion index first (Indexed Jobs, JobSets), then pod name; the uid only breaks exact ties."""
        return (self.index is None, self.index or 0, self.name, self.uid)


@dataclass(slots=True)
class PodGroup:
    namespace: str
    name: str
    pool: str
    total: int
    failure_policy: int
    first_at: float
    """Wall time of the first member's arrival: the wait is counted from it, across gateway restarts."""
    members: dict[str, PodGroupMember] = field(default_factory=dict)
    last_at: float = 0.0
    """Wall time of the latest member's arrival (an array's quiet window counts from it); ``first_at`` until a
    second member comes, and for a group an older gateway stored without it."""

    def __post_init__(self) -> None:
        self.last_at = max(self.last_at, self.first_at)

    @property
    def key(self) -> str:
        return group_key(self.namespace, self.name)

    @property
    def complete(self) -> bool:
        return len(self.members) >= self.total

    def ranked(self) -> list[PodGroupMember]:
        return sorted(self.members.values(), key=PodGroupMember.rank_key)

    def header_json(self) -> str:
        """What redis keeps of the group itself; each member is kept apart (``member_json``), so an arrival
        writes one member and this header, whatever the group's size."""
        return json.dumps({**self._fields(), "last_at": self.last_at})

    def _fields(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "pool": self.pool,
            "total": self.total,
            "failure_policy": self.failure_policy,
            "first_at": self.first_at,
        }

    @classmethod
    def from_header(cls, text: str | bytes) -> tuple[PodGroup, list[dict[str, Any]] | None]:
        """A group read back from its header, without members; and the members an older gateway stored in the
        same JSON (``to_json``), or None for a header of the present format."""
        data: dict[str, Any] = json.loads(text)
        group = cls(
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            pool=str(data["pool"]),
            total=int(data["total"]),
            failure_policy=int(data["failure_policy"]),
            first_at=float(data["first_at"]),
            last_at=float(data.get("last_at") or 0.0),
        )
        old = data.get("members")
        return group, None if old is None else list(old)

    def to_json(self) -> str:
        """The format an older gateway stored: the whole group, every member's job inside, as one JSON value
        (read back by ``from_json``, and moved to the present format when loaded)."""
        return json.dumps({**self._fields(), "members": [member_data(m) for m in self.members.values()]})

    @classmethod
    def from_json(cls, text: str | bytes) -> PodGroup:
        group, members = cls.from_header(text)
        for m in members or ():
            member = member_from_data(m)
            group.members[member.uid] = member
        return group


def member_data(member: PodGroupMember) -> dict[str, Any]:
    return {
        "uid": member.uid,
        "name": member.name,
        "index": member.index,
        "job": base64.b64encode(member.encoded).decode(),
        "images": member.images,
    }


def member_json(key: str, member: PodGroupMember) -> str:
    """What redis keeps of one held member, with its group's key."""
    return json.dumps({"group": key, **member_data(member)})


def member_from_data(m: dict[str, Any]) -> PodGroupMember:
    index = m.get("index")
    encoded = base64.b64decode(m["job"])
    return PodGroupMember(
        uid=str(m["uid"]),
        name=str(m["name"]),
        index=None if index is None else int(index),
        job=pb.JobScript.parse(encoded),
        encoded=encoded,
        images={str(k): str(v) for k, v in (m.get("images") or {}).items()},
    )


def member_from_json(text: str | bytes) -> tuple[str, PodGroupMember]:
    """(its group's key, the member) of what ``member_json`` wrote."""
    data: dict[str, Any] = json.loads(text)
    return str(data["group"]), member_from_data(data)


@dataclass(frozen=True, slots=True)
class PodGroupLimits:
    """The site's bounds on what pod groups may make the gateway hold (settings ``max_group_size``,
    ``max_held_members_per_namespace``, ``max_held_bytes_per_namespace``, ``max_held_bytes``)."""

    group_size: int = GROUP_SIZE_MAX
    members_per_namespace: int = GROUP_SIZE_MAX
    bytes_per_namespace: int = 64 * 1024 * 1024
    bytes_total: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PodGroupUsage:
    members: int
    """The members one namespace's waiting groups declared (their total counts added up): a group's seats are
    taken by its first member, so a namespace at its limit can still complete every group it has."""
    bytes: int
    """Their arrived members' rendered jobs, in bytes."""
    bytes_total: int
    """Every namespace's held jobs, in bytes."""


def check_room(limits: PodGroupLimits, usage: PodGroupUsage, group: PodGroup, member: PodGroupMember) -> None:
    """A 429 when holding ``member`` would take its namespace (or the gateway) past a limit on what it holds:
    the room comes back as that namespace's groups are sent or fail, so a later create may pass. A new group
    takes all its members' seats at once (``PodGroupUsage.members``); its later members need only bytes."""
    size = member.size
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


def waiting_message(group: PodGroup) -> str:
    """What every held member's status says (it changes with each arrival)."""
    return f"waiting for pod group {group.key}: {len(group.members)} of {group.total} members have arrived"


def group_uid(group: PodGroup) -> str:
    """The gang's id: the same for the same pods (a resubmission after a crash is found again by it), another
    for a group of the same name made again of new pods. A valid job-directory name, like a pod UID."""
    digest = hashlib.sha256("\0".join([group.namespace, group.name, *sorted(group.members)]).encode())
    return "g-" + digest.hexdigest()[:40]


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
