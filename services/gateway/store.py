"""Pod records and their last status: answered from memory, mirrored to redis.

``/status`` must be answerable at thousands of calls per second, so reads come from the
in-memory table only. Redis makes the table survive a gateway restart; if redis itself is
lost, the gateway rebuilds the table from the pools' ``ListJobs``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.usage import usage_in_status
from interlink_nats.services.gateway.record import FINAL_STATES, STATE_NAMES, PodRecord, heard_now

log = logging.getLogger(__name__)

REDIS_PODS_KEY = "interlink-nats:pods"
REDIS_BUILD_CONFIGS_KEY = "interlink-nats:build-configs"
LOAD_PAGE = 2000
"""Pod records per HSCAN page when restoring from redis."""


class RedisLike(Protocol):
    """The few async redis calls the store uses (redis.asyncio.Redis satisfies it)."""

    async def hset(self, name: str, key: str, value: str | bytes) -> Any: ...
    async def hdel(self, name: str, *keys: str | bytes) -> Any: ...
    async def hgetall(self, name: str) -> dict[bytes, bytes]: ...
    async def hscan(self, name: str, cursor: int = 0, count: int | None = None) -> tuple[int, dict[bytes, bytes]]: ...
    async def get(self, name: str) -> bytes | None: ...
    async def set(self, name: str, value: str) -> Any: ...
    async def ping(self) -> Any: ...
    def pipeline(self, transaction: bool = True) -> Any: ...


RESYNC_CHUNK = 1000
"""Records per HSET of a full rewrite: 100k pods go in 100 commands of one transaction."""


class PodStore:
    """In-memory pod table with a best-effort, exact redis mirror.

    Redis failures never fail a request: the memory table stays authoritative while the gateway
    runs, ``redis_ok`` turns false (``/healthz`` shows it), and :meth:`resync_redis` repairs the
    mirror once redis answers again: only the pods whose write failed or raced, or everything when
    redis lost the table (its epoch key is gone: flushed, or restarted without persistence).

    Exact under concurrency: a resync waits for mirror writes in flight and holds new ones until it
    is done, so a ``delete`` can never be overwritten by a stale copy; and a write that finishes
    after memory moved on (a delete racing a create) marks its pod for the next resync.
    """

    def __init__(self, redis: RedisLike | None = None, *, key: str = REDIS_PODS_KEY) -> None:
        self.redis = redis
        self.key = key
        self.epoch_key = f"{key}:epoch"
        self.pods: dict[str, PodRecord] = {}
        self.redis_ok = redis is not None
        self._epoch = uuid.uuid4().hex
        self._unsynced: set[str] = set()
        """Pods whose redis copy may differ from memory (a failed or raced write)."""
        self._lost = True
        """Redis may not hold the table at all: the next resync rewrites it whole."""
        self._writes = 0
        self._drained: asyncio.Event | None = None
        self._resync_done: asyncio.Event | None = None
        self.on_usage: Callable[[PodRecord, pb.JobUsage], None] | None = None
        """Called once per pod with the usage its ended status carries (the gateway bills it)."""

    async def load(self) -> int:
        """Fill memory from redis; returns how many pods were loaded. Redis then mirrors memory exactly.

        Read in pages (HSCAN) rather than one HGETALL: at 100,000 pods a single reply is ~50 MB of
        transient bytes, which the allocator keeps as RSS long after the records are built. Nothing
        writes the hash while the gateway loads it, so the pages add up to the whole table.
        """
        if self.redis is None:
            return 0
        cursor, before = 0, len(self.pods)
        while True:  # HSCAN may repeat a key across pages; the table keeps one record per uid
            cursor, page = await self.redis.hscan(self.key, cursor, count=LOAD_PAGE)
            for uid, text in page.items():
                try:
                    record = PodRecord.from_json(text)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a record of the wrong shape
                    log.warning("skipping unreadable pod record %s in redis: %s", uid, exc)
                    continue
                self.pods[record.uid] = record
            if not cursor:
                break
        await self.redis.set(self.epoch_key, self._epoch)
        self._lost = False
        return len(self.pods) - before

    def get(self, uid: str) -> PodRecord | None:
        return self.pods.get(uid)

    async def put(self, record: PodRecord) -> None:
        record._status_json = None
        self.pods[record.uid] = record
        await self._mirror(record)

    def apply_status(
        self, uid: str, status: pb.JobStatus, revision: int, *, encoded: bytes | None = None
    ) -> PodRecord | None:
        """Keep ``status`` if it is newer than what we have; returns the record when it changed.

        ``encoded``: the status's protobuf bytes when the caller has them (an event), spared an encode.

        Revisions are per pod and monotonic at the submitter; a revision of 0 (a pulled status,
        not an event) is applied unless we already hold a final state.
        """
        return self._apply(uid, int(status.state), status.job_id, revision, encoded, status)

    def apply_encoded(self, uid: str, encoded: bytes, state: int, job_id: str, revision: int) -> PodRecord | None:
        """:meth:`apply_status` for a status known only by its bytes and the few fields read from them
        (an event read by ``event_wire``): it is kept encoded, never decoded here."""
        return self._apply(uid, state, job_id, revision, encoded, None)

    def _apply(
        self, uid: str, state: int, job_id: str, revision: int, encoded: bytes | None, status: pb.JobStatus | None
    ) -> PodRecord | None:
        record = self.pods.get(uid)
        if record is None:
            return None
        record.heard_at = heard_now()
        if revision and revision <= record.revision:
            return None
        if not revision and record.is_final():
            return None
        if record.is_final() and state not in FINAL_STATES:
            # A status pulled from ListJobs carries no revision, so an older event still in the stream
            # (a restart with redis lost) would pass the check above; a finished job never runs again.
            return None
        if encoded is None:
            assert status is not None, "a status comes encoded or as a message"
            encoded = bytes(status)
        if state in FINAL_STATES and self.on_usage is not None:
            self._bill(record, encoded)
        record._set_status(encoded, state)
        if job_id:
            record.job_id = job_id
        record.revision = max(record.revision, revision)
        return record

    def _bill(self, record: PodRecord, encoded: bytes) -> None:
        """Hand on the usage of an ended pod the first time its record holds any: the record (mirrored to redis)
        is the memory of what was billed, so a status delivered again, or after a restart, is not billed twice."""
        assert self.on_usage is not None
        usage = usage_in_status(encoded)
        if usage is None or (record._status is not None and usage_in_status(record._status) is not None):
            return
        try:
            self.on_usage(record, usage)
        except Exception:  # billing must never stop a status from being applied
            log.exception("counting the usage of pod %s failed", record.uid)

    async def save(self, record: PodRecord) -> None:
        """Mirror a record changed in place (its job id, say): its cached PodStatus is dropped too."""
        record._status_json = None
        await self._mirror(record)

    async def delete(self, uid: str) -> PodRecord | None:
        record = self.pods.pop(uid, None)
        if self.redis is not None:
            redis = self.redis
            await self._write(uid, None, lambda: redis.hdel(self.key, uid))
        return record

    async def _mirror(self, record: PodRecord) -> None:
        if self.redis is not None:
            redis = self.redis
            await self._write(record.uid, record, lambda: redis.hset(self.key, record.uid, record.to_json()))

    async def _write(self, uid: str, expected: PodRecord | None, op: Callable[[], Awaitable[Any]]) -> None:
        """One mirror write, after any resync in progress; ``expected`` is what memory held for it."""
        while self._resync_done is not None:
            await self._resync_done.wait()
        self._writes += 1
        try:
            await op()
            self.redis_ok = True
        except Exception as exc:  # redis down: memory stays right, the resync catches up later
            self._unsynced.add(uid)
            self._redis_failed(exc)
        finally:
            self._writes -= 1
            if not self._writes and self._drained is not None:
                self._drained.set()
        if self.pods.get(uid) is not expected:
            self._unsynced.add(uid)  # memory changed while we wrote (e.g. a delete racing a create)

    def _redis_failed(self, exc: Exception) -> None:
        if self.redis_ok:
            log.warning("redis unavailable, serving from memory: %s", exc)
        self.redis_ok = False

    async def resync_redis(self) -> bool:
        """Make redis mirror memory again if it lost the table or missed writes; True if it wrote anything."""
        if self.redis is None:
            return False
        try:
            epoch = await self.redis.get(self.epoch_key)
        except Exception as exc:
            self._redis_failed(exc)
            return False
        if epoch is None or epoch.decode() != self._epoch:
            self._lost = True
        if not self._lost and not self._unsynced:
            self.redis_ok = True
            return False
        done = self._resync_done = asyncio.Event()
        unsynced, self._unsynced = self._unsynced, set()
        full = self._lost
        try:
            while self._writes:  # writes already under way finish first; new ones wait for `done`
                self._drained = asyncio.Event()
                await self._drained.wait()
            self._drained = None
            # From here to execute() memory is read without an await: the transaction is one snapshot.
            if full:
                records = list(self.pods.values())
                remove: list[str] = []
            else:
                records = [r for r in (self.pods.get(uid) for uid in unsynced) if r is not None]
                remove = [uid for uid in unsynced if uid not in self.pods]
            async with self.redis.pipeline(transaction=True) as pipe:
                if full:
                    pipe.delete(self.key)
                for i in range(0, len(records), RESYNC_CHUNK):
                    pipe.hset(self.key, mapping={r.uid: r.to_json() for r in records[i : i + RESYNC_CHUNK]})
                if remove:
                    pipe.hdel(self.key, *remove)
                pipe.set(self.epoch_key, self._epoch)
                await pipe.execute()
        except Exception as exc:
            self._unsynced |= unsynced
            self._redis_failed(exc)
            return False
        finally:
            self._drained = None
            self._resync_done = None
            done.set()
        self._lost = False
        self.redis_ok = True
        if full:
            log.info("rewrote all %d pod records to redis", len(records))
        else:
            log.info("resynced %d pod records to redis (%d removed)", len(records), len(remove))
        return True

    def stale(self, older_than_s: float) -> list[PodRecord]:
        """Live pods no event has mentioned for a while: candidates for a pulled status."""
        cutoff = time.monotonic() - older_than_s
        return [r for r in self.pods.values() if r.job_id and not r.is_final() and r.heard_at < cutoff]

    def counts_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.pods.values():
            state = STATE_NAMES[record._state] if record._state is not None else "PENDING"
            counts[state] = counts.get(state, 0) + 1
        return counts
