"""The pod groups the gateway holds, in memory and mirrored to redis, so held members survive a restart.

One redis hash (``REDIS_GROUPS_KEY``), one field per group (its ``groups.group_key``) holding the whole group as
JSON, rendered jobs included: a group changes as one value, so a restart never finds half of an arrival.
Like the pod table, memory is authoritative while the gateway runs: a redis failure is logged, not raised
(the member was answered already); the next change of that group writes it whole again.
"""

from __future__ import annotations

import logging

from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupUsage
from interlink_nats.services.gateway.store import RedisLike

log = logging.getLogger(__name__)

REDIS_GROUPS_KEY = "interlink-nats:pod-groups"
REDIS_ARRAYS_KEY = "interlink-nats:pod-arrays"
"""The arrays being coalesced (``array_policy``): the same store, another hash."""


class PodGroupStore:
    def __init__(self, redis: RedisLike | None = None, *, key: str = REDIS_GROUPS_KEY) -> None:
        self.redis = redis
        self.key = key
        self.groups: dict[str, PodGroup] = {}
        self.by_member: dict[str, str] = {}
        """Pod uid -> its group's key."""
        self._counted: dict[str, tuple[str, int, int]] = {}
        """Group key -> (namespace, total count, bytes) as counted below (a group changes in place)."""
        self._members: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self.bytes_total = 0
        """The held members' rendered jobs, in bytes: what the site limits bound (``groups.PodGroupLimits``)."""

    async def load(self) -> int:
        """The groups redis holds; returns how many."""
        if self.redis is None:
            return 0
        for key, text in (await self.redis.hgetall(self.key)).items():
            try:
                group = PodGroup.from_json(text)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable pod group %s in redis: %s", key.decode(errors="replace"), exc)
                continue
            self._remember(group)
            if key != group.key.encode():  # stored under an older, ambiguous key: moved to its own
                await self._move(key, group)
        return len(self.groups)

    async def _move(self, old: bytes, group: PodGroup) -> None:
        """A group an older gateway stored under the field ``<namespace>/<name>`` unescaped: written again under
        its key, the old field removed (a valid name's key is unchanged, so only odd names ever move)."""
        assert self.redis is not None
        try:
            await self.redis.hset(self.key, group.key, group.to_json())
            await self.redis.hdel(self.key, old)
        except Exception as exc:
            log.warning("could not move pod group %s in redis: %s", group.key, exc)

    def get(self, key: str) -> PodGroup | None:
        return self.groups.get(key)

    def group_of(self, uid: str) -> PodGroup | None:
        key = self.by_member.get(uid)
        return None if key is None else self.groups.get(key)

    def members(self) -> int:
        return len(self.by_member)

    def usage(self, namespace: str) -> PodGroupUsage:
        """What ``namespace`` holds now, and all namespaces together."""
        return PodGroupUsage(self._members.get(namespace, 0), self._bytes.get(namespace, 0), self.bytes_total)

    async def put(self, group: PodGroup) -> None:
        """Keep ``group`` as it is now (after a member arrived or left)."""
        old = self.groups.get(group.key)
        if old is not None:
            for uid in old.members:
                self.by_member.pop(uid, None)
        self._remember(group)
        if self.redis is not None:
            try:
                await self.redis.hset(self.key, group.key, group.to_json())
            except Exception as exc:  # memory stays right; the group's next change rewrites it
                log.warning("could not save pod group %s to redis: %s", group.key, exc)

    async def release(self, uid: str) -> PodGroup | None:
        """Take member ``uid`` out of its group (its pod was deleted); the group as it is left, ``None`` when
        it is left empty and so forgotten."""
        key = self.by_member.pop(uid, None)
        group = None if key is None else self.groups.get(key)
        if group is None:
            return None
        group.members.pop(uid, None)
        if not group.members:
            await self.drop(group.key)
            return None
        await self.put(group)
        return group

    async def drop(self, key: str) -> None:
        """Forget a group: submitted, or failed."""
        group = self.groups.pop(key, None)
        if group is not None:
            for uid in group.members:
                self.by_member.pop(uid, None)
        self._uncount(key)
        if self.redis is not None:
            try:
                await self.redis.hdel(self.key, key)
            except Exception as exc:
                log.warning("could not remove pod group %s from redis: %s", key, exc)

    def _remember(self, group: PodGroup) -> None:
        self.groups[group.key] = group
        for uid in group.members:
            self.by_member[uid] = group.key
        self._uncount(group.key)
        size = sum(m.size for m in group.members.values())
        self._counted[group.key] = (group.namespace, group.total, size)
        self._members[group.namespace] = self._members.get(group.namespace, 0) + group.total
        self._bytes[group.namespace] = self._bytes.get(group.namespace, 0) + size
        self.bytes_total += size

    def _uncount(self, key: str) -> None:
        counted = self._counted.pop(key, None)
        if counted is None:
            return
        namespace, members, size = counted
        self._members[namespace] -= members
        self._bytes[namespace] -= size
        self.bytes_total -= size
        if not self._members[namespace]:
            del self._members[namespace], self._bytes[namespace]
