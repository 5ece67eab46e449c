"""The pod groups the gateway holds, in memory and mirrored to redis, so held members survive a restart.

Two redis hashes per store: ``<key>`` holds each group's header (namespace, name, pool, total, failure policy,
first and last arrival) under its ``group_key``; ``<key>:members`` holds each held member (its rendered job
and its group's key) under its pod uid. An arrival writes its member and the group's new header in one
MULTI/EXEC transaction, so a restart never finds half of an arrival, and what it writes does not grow with
the group (an array of 1,000 interLink pods once rewrote the whole group, every job in it, on each arrival).
A group is forgotten (sent, failed) in one transaction too. Groups an older gateway stored as one JSON value
each, members inside, are read and moved to this layout when loaded.

Like the pod table, memory is authoritative while the gateway runs: a redis failure is logged, not raised
(the member was answered already); the next change of that group writes it whole again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interlink_nats.services.gateway.pod_group import (
    PodGroup,
    PodGroupMember,
    PodGroupUsage,
    member_from_data,
    member_from_json,
    member_json,
)
from interlink_nats.services.gateway.store import LOAD_PAGE, RedisLike

log = logging.getLogger(__name__)

REDIS_GROUPS_KEY = "interlink-nats:pod-groups"
REDIS_ARRAYS_KEY = "interlink-nats:pod-arrays"
"""The arrays being coalesced (``array_policy``): the same store, other hashes."""
MEMBERS_SUFFIX = ":members"


@dataclass(slots=True)
class _Counted:
    namespace: str
    seats: int
    bytes: int


class PodGroupStore:
    def __init__(self, redis: RedisLike | None = None, *, key: str = REDIS_GROUPS_KEY) -> None:
        self.redis = redis
        self.key = key
        self.members_key = key + MEMBERS_SUFFIX
        self.groups: dict[str, PodGroup] = {}
        self.by_member: dict[str, str] = {}
        """Pod uid -> its group's key."""
        self._counted: dict[str, _Counted] = {}
        """Group key -> what it adds to the usage below, kept up to date member by member."""
        self._members: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self.bytes_total = 0
        """The held members' rendered jobs, in bytes: what the site limits bound (``groups.PodGroupLimits``)."""
        self._unsynced: dict[str, set[str]] = {}
        """Group key -> members released from it whose removal from redis may have failed: a failed write
        puts the group here, and its next change writes it whole (and removes those)."""

    # --- loading -------------------------------------------------------------------------------
    async def load(self) -> int:
        """The groups redis holds; returns how many. Groups of the older one-JSON-per-group format are moved
        to the present layout (header and members apart), each in one transaction."""
        if self.redis is None:
            return 0
        moved: list[tuple[bytes, PodGroup]] = []
        for field, text in (await self.redis.hgetall(self.key)).items():
            try:
                group, old = PodGroup.from_header(text)
                members = [member_from_data(m) for m in old or ()]
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("skipping unreadable pod group %s in redis: %s", field.decode(errors="replace"), exc)
                continue
            self._remember(group)
            for member in members:
                self._attach(group, member)
            if old is not None or field != group.key.encode():
                moved.append((field, group))
        orphans = await self._load_members()
        for field, group in moved:
            await self._move(field, group)
        for key in [k for k, g in self.groups.items() if not g.members]:
            await self.drop(key)  # a header left without members (written by hand, or by a crash of an old gateway)
        if orphans:
            await self._write(lambda pipe: pipe.hdel(self.members_key, *orphans), "forget orphan members")
        return len(self.groups)

    async def _load_members(self) -> list[str]:
        """Attach the stored members to their groups, in pages; returns the uids whose group is not stored."""
        assert self.redis is not None
        orphans: list[str] = []
        cursor = 0
        while True:  # HSCAN may repeat a field across pages: a member is attached once
            cursor, page = await self.redis.hscan(self.members_key, cursor, count=LOAD_PAGE)
            for uid, text in page.items():
                try:
                    key, member = member_from_json(text)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    log.warning("skipping unreadable held member %s in redis: %s", uid.decode(errors="replace"), exc)
                    continue
                group = self.groups.get(key)
                if group is None:
                    log.warning("forgetting held member %s in redis: its group %s is not stored", member.uid, key)
                    orphans.append(uid.decode(errors="replace"))
                elif member.uid not in group.members:
                    self._attach(group, member)
            if not cursor:
                return orphans

    async def _move(self, old: bytes, group: PodGroup) -> None:
        """A group an older gateway stored as one JSON value (and perhaps under the field ``<namespace>/<name>``
        unescaped): written again as a header and its members under its key, the old value removed, at once."""

        def move(pipe: Any) -> None:
            self._queue_whole(pipe, group)
            if old != group.key.encode():
                pipe.hdel(self.key, old)

        await self._write(move, f"move pod group {group.key}")

    # --- reading -------------------------------------------------------------------------------
    def get(self, key: str) -> PodGroup | None:
        return self.groups.get(key)

    def group_of(self, uid: str) -> PodGroup | None:
        key = self.by_member.get(uid)
        return None if key is None else self.groups.get(key)

    def members(self) -> int:
        return len(self.by_member)

    def group_bytes(self, key: str) -> int:
        """The rendered jobs of ``key``'s arrived members, in bytes (counted as they arrive)."""
        counted = self._counted.get(key)
        return 0 if counted is None else counted.bytes

    def usage(self, namespace: str) -> PodGroupUsage:
        """What ``namespace`` holds now, and all namespaces together."""
        return PodGroupUsage(self._members.get(namespace, 0), self._bytes.get(namespace, 0), self.bytes_total)

    # --- changes -------------------------------------------------------------------------------
    async def add(self, group: PodGroup, member: PodGroupMember, at: float) -> None:
        """``member`` arrived at ``at`` (wall time) and joins ``group`` (new, or held already): memory and
        redis take it in time and bytes that do not depend on how many members the group has."""
        if group.key not in self.groups:
            self._remember(group)
        group.last_at = max(group.last_at, at)
        self._attach(group, member)
        if self.redis is None:
            return
        if group.key in self._unsynced:
            await self._write_whole(group)
            return
        key, header, entry = group.key, group.header_json(), member_json(group.key, member)

        def arrive(pipe: Any) -> None:
            pipe.hset(self.members_key, member.uid, entry)
            pipe.hset(self.key, key, header)

        if not await self._write(arrive, f"save pod group {key}"):
            self._unsynced.setdefault(key, set())

    async def put(self, group: PodGroup) -> None:
        """Keep ``group`` as it is now, whole (its members set by the caller): for a group changed other than by
        ``add`` and ``release``; costs a write of every member."""
        old = self.groups.get(group.key)
        if old is not None:
            for uid in old.members:
                self.by_member.pop(uid, None)
            self._uncount(group.key)
        self._remember(group)
        for member in list(group.members.values()):
            self._attach(group, member)
        if self.redis is not None:
            await self._write_whole(group)

    async def release(self, uid: str) -> PodGroup | None:
        """Take member ``uid`` out of its group (its pod was deleted); the group as it is left, ``None`` when
        it is left empty and so forgotten."""
        key = self.by_member.get(uid)
        group = None if key is None else self.groups.get(key)
        if group is None:
            return None
        if len(group.members) == 1 and uid in group.members:
            await self.drop(group.key)
            return None
        self._detach(group, uid)
        if self.redis is not None:
            if group.key in self._unsynced:
                self._unsynced[group.key].add(uid)
                await self._write_whole(group)
            elif not await self._write(lambda pipe: pipe.hdel(self.members_key, uid), f"release {uid}"):
                self._unsynced.setdefault(group.key, set()).add(uid)
        return group

    async def drop(self, key: str) -> None:
        """Forget a group: submitted, or failed (its header and every member in one transaction)."""
        group = self.groups.pop(key, None)
        uids = set(self._unsynced.pop(key, ()))
        if group is not None:
            for uid in group.members:
                self.by_member.pop(uid, None)
            uids |= set(group.members)
        self._uncount(key)
        if self.redis is not None:

            def forget(pipe: Any) -> None:
                pipe.hdel(self.key, key)
                if uids:
                    pipe.hdel(self.members_key, *uids)

            await self._write(forget, f"remove pod group {key}")

    # --- redis ---------------------------------------------------------------------------------
    async def _write_whole(self, group: PodGroup) -> None:
        gone = self._unsynced.pop(group.key, set())

        def whole(pipe: Any) -> None:
            self._queue_whole(pipe, group)
            if gone:
                pipe.hdel(self.members_key, *gone)

        if not await self._write(whole, f"save pod group {group.key}"):
            self._unsynced.setdefault(group.key, set()).update(gone)

    def _queue_whole(self, pipe: Any, group: PodGroup) -> None:
        entries = {uid: member_json(group.key, m) for uid, m in group.members.items()}
        if entries:
            pipe.hset(self.members_key, mapping=entries)
        pipe.hset(self.key, group.key, group.header_json())

    async def _write(self, queue: Callable[[Any], object], what: str) -> bool:
        """One MULTI/EXEC of the commands ``queue(pipe)`` adds; False (logged) when redis failed."""
        assert self.redis is not None
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                queue(pipe)
                await pipe.execute()
        except Exception as exc:  # memory stays right; the group's next change rewrites it
            log.warning("could not %s in redis: %s", what, exc)
            return False
        return True

    # --- counting ------------------------------------------------------------------------------
    def _remember(self, group: PodGroup) -> None:
        """A group new to memory: its seats are taken at once, its bytes counted member by member."""
        self.groups[group.key] = group
        self._uncount(group.key)
        self._counted[group.key] = _Counted(group.namespace, group.total, 0)
        self._members[group.namespace] = self._members.get(group.namespace, 0) + group.total
        self._bytes.setdefault(group.namespace, 0)

    def _attach(self, group: PodGroup, member: PodGroupMember) -> None:
        previous = group.members.get(member.uid)
        if previous is not None and self.by_member.get(member.uid) == group.key:
            self._count_bytes(group.key, -previous.size)
        group.members[member.uid] = member
        self.by_member[member.uid] = group.key
        self._count_bytes(group.key, member.size)

    def _detach(self, group: PodGroup, uid: str) -> None:
        member = group.members.pop(uid, None)
        self.by_member.pop(uid, None)
        if member is not None:
            self._count_bytes(group.key, -member.size)

    def _count_bytes(self, key: str, size: int) -> None:
        counted = self._counted[key]
        counted.bytes += size
        self._bytes[counted.namespace] = self._bytes.get(counted.namespace, 0) + size
        self.bytes_total += size

    def _uncount(self, key: str) -> None:
        counted = self._counted.pop(key, None)
        if counted is None:
            return
        self._members[counted.namespace] -= counted.seats
        self._bytes[counted.namespace] -= counted.bytes
        self.bytes_total -= counted.bytes
        if not self._members[counted.namespace]:
            del self._members[counted.namespace], self._bytes[counted.namespace]
