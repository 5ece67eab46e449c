"""The controller loop: MasterQueue watch + NATS reports → pure reconcile → server-side apply of differences.

Level-based: every tick (and on every report or MasterQueue change) each MasterQueue is reconciled
from scratch by ``reconcile.reconcile``; only objects whose desired form differs from what we last
applied (or, after a restart, from what the cluster holds) are written, so a quiet tick makes no
API call. Order of writes: flavors, queues, then deletion of queues and flavors no longer wanted
(a ClusterQueue stops naming a flavor before the flavor goes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interlink_nats.controller import capacity, model, reconcile
from interlink_nats.controller.capacity import Admission, Memory, Policy
from interlink_nats.controller.kube import KubeApi, KubeError
from interlink_nats.controller.listening import NatsHub, ReportStore, default_nats_settings
from interlink_nats.controller.reconcile import (
    KUEUE_GROUP,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MASTERQUEUE_LABEL,
    PoolState,
)
from interlink_nats.controller.status import parse_time, rfc3339, status_of, without_volatile
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.nats_connection import NatsConnectionSettings
from interlink_nats.kernel.reported import DEFAULT_MAXIMA, Maxima
from interlink_nats.kernel.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (kind, name)


@dataclass
class Settings:
    """Knobs of the loop; times in seconds."""

    kueue_api: str | None = None
    """Kueue API version to write; None: discovery (v1beta2 when served, else v1beta1)."""
    nats: NatsConnectionSettings = field(default_factory=default_nats_settings)
    """What every NATS connection shares (inbox, timeouts, back-off); the URL and credentials come from
    each MasterQueue's flavor and its Secret."""
    tick_s: float = 2.0
    """How often liveness is re-evaluated without any event (a pool's timeout is seen within one tick)."""
    describe_timeout_s: float = 5.0
    """Per-pool Describe deadline at start; a MasterQueue waits at most twice that for its sources."""
    debounce_s: float = 0.05
    """Coalesce bursts of reports into one reconcile."""
    status_refresh_s: float = 30.0
    """Refresh ``lastReport`` times in status at most this often (state changes are written at once)."""
    usage_refresh_s: float = 1.0
    """Read Kueue's reservation of a MasterQueue's queues (``capacity: Free``, holds) at most this often."""
    resync_s: float = 300.0
    """Re-read the owned objects this often, so edits by others are corrected."""
    maxima: Maxima = DEFAULT_MAXIMA
    """The most a pool may report of each resource; a larger figure is refused, never a quota."""
    clock: Clock = SYSTEM_CLOCK


@dataclass
class _MQ:
    body: dict[str, Any]
    parsed: model.MasterQueue | None = None
    error: str | None = None
    status_written: dict[str, Any] | None = None
    status_at: float = 0.0
    pool_states: dict[str, str] = field(default_factory=dict)
    seen_warnings: set[tuple[str, str]] = field(default_factory=set)
    ready_after: float = 0.0
    capacity: dict[str, Memory] = field(default_factory=dict)
    """Each live pool's capacity-policy memory (smoothing, hysteresis, back-off), by flavor name."""
    usage: dict[str, dict[str, str]] = field(default_factory=dict)
    usage_at: float = -1e18
    admissions: dict[str, str] = field(default_factory=dict)
    """Each pool's last admission state (Open, Saturated…): a change is a Kubernetes Event."""


def covers(desired: Any, live: Any) -> bool:
    """Whether ``live`` already holds everything ``desired`` says (server-added fields are ignored)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and covers(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(covers, desired, live))
    return bool(desired == live)


class Controller:
    """Runs until cancelled; ``step()`` runs one reconcile pass (tests and the benchmark drive it directly)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        settings: Settings | None = None,
        store: ReportStore | None = None,
        hub: NatsHub | None = None,
    ) -> None:
        self.api = api
        self.settings = settings or Settings()
        self.store = store or ReportStore(self.settings.clock, self.settings.maxima)
        self.hub = hub or NatsHub(
            self.store,
            secret_reader=api.read_secret,
            nats=self.settings.nats,
            describe_timeout_s=self.settings.describe_timeout_s,
        )
        self.version: str | None = self.settings.kueue_api
        self.mqs: dict[str, _MQ] = {}
        self.live: dict[Key, dict[str, Any]] = {}
        self.applied: dict[Key, dict[str, Any]] = {}
        self.writes = 0
        self.passes = 0
        self.last_error: str | None = None
        """The last reconcile pass's Kubernetes error (None once a pass succeeds): the health check reads it."""
        self.synced = asyncio.Event()
        self._wake = self.store.changed
        self._last_resync = 0.0

    # -- start-up ---------------------------------------------------------------------------------

    async def detect_version(self) -> str:
        """Kueue v1beta2 by default, v1beta1 when discovery shows only that; waits for Kueue to appear."""
        if self.version is not None:
            return self.version
        delay = 1.0
        while True:
            try:
                served = await self.api.served_versions(KUEUE_GROUP)
            except KubeError as exc:
                served, reason = [], str(exc)
            else:
                reason = f"served versions {served}"
            for candidate in reconcile.KUEUE_VERSIONS:
                if candidate in served:
                    self.version = candidate
                    log.info("writing Kueue %s (%s)", candidate, reason)
                    return candidate
            log.warning("Kueue API not available (%s); retrying in %.0fs", reason, delay)
            await self.settings.clock.sleep(delay)
            delay = min(60.0, delay * 2)

    async def load_owned(self) -> None:
        """Read every object we own into the live cache (what "nothing changed" is measured against)."""
        assert self.version is not None
        live: dict[Key, dict[str, Any]] = {}
        for kind in ("ResourceFlavor", "ClusterQueue"):
            for obj in await self.api.list_objects(kind, self.version, {MANAGED_BY_LABEL: MANAGED_BY}):
                live[(kind, obj["metadata"]["name"])] = obj
        self.live = live
        self._last_resync = self.settings.clock.time()

    async def run(self) -> None:
        await self.detect_version()
        await self.load_owned()
        watcher = asyncio.ensure_future(self.watch())
        try:
            await self.loop()
        finally:
            await cancel_and_wait(watcher)
            await self.hub.close()

    async def watch(self) -> None:
        async for event, body in self.api.watch_masterqueues():
            await self.on_masterqueue(event, body)

    async def loop(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancel that arrives as the
            # event is set, and the controller would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.tick_s):
                    await self._wake.wait()
            await self.settings.clock.sleep(self.settings.debounce_s)
            self._wake.clear()
            try:
                await self.step()
            except Exception as exc:
                self.last_error = f"reconcile pass failed: {type(exc).__name__}: {exc}"
                log.exception("reconcile pass failed; retrying next tick")

    # -- MasterQueue events -----------------------------------------------------------------------

    async def on_masterqueue(self, event: str, body: dict[str, Any]) -> None:
        name = body.get("metadata", {}).get("name", "")
        if event == "DELETED":
            state = self.mqs.pop(name, None)
            await self._sync_sources()
            await self._delete_owned(name, keep=set())
            if state is not None and state.parsed is not None:
                log.info("MasterQueue %s deleted; its queues and flavors removed", name)
            return
        state = self.mqs.get(name)
        if state is None:
            state = self.mqs[name] = _MQ(body=body)
            self._seed_from_status(body, state)
        state.body = body
        try:
            state.parsed, state.error = model.parse_masterqueue(body), None
        except model.MasterQueueError as exc:
            if state.error != str(exc):
                log.warning("MasterQueue %s invalid: %s", name, exc)
            state.parsed, state.error = None, str(exc)
        await self._sync_sources()
        if state.parsed is not None and not state.ready_after:
            state.ready_after = self.settings.clock.time() + 2 * self.settings.describe_timeout_s
        self._wake.set()

    def _seed_from_status(self, body: Mapping[str, Any], state: _MQ) -> None:
        """Pools live before a restart stay live until their recorded lastReport + poolTimeout; held ones stay held."""
        status = body.get("status") or {}
        state.status_written = dict(status) if status else None
        try:
            mq = model.parse_masterqueue(body)
        except model.MasterQueueError:
            return
        groups = {g.name: g for g in mq.flavors if g.nats is not None}
        for row in status.get("pools") or []:
            group = groups.get(row.get("flavorGroup", ""))
            received = parse_time(row.get("lastReport"))
            if group is None or group.nats is None or received is None or not row.get("name"):
                continue
            state.pool_states[row["name"]] = row.get("state", "")
            memory = capacity.remembered(row, group.nats.capacity, self.settings.clock.time())
            if memory is not None and isinstance(row.get("resourceFlavor"), str):
                state.capacity[row["resourceFlavor"]] = memory
                state.admissions[row["name"]] = str(memory.admission)
            taints = tuple(
                model.Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "")) for t in row.get("taints") or []
            )
            self.store.seed(
                group.nats.source,
                model.PoolReport(
                    pool=row["name"],
                    capacity=model.remembered_capacity(row.get("capacity"), self.store.maxima),
                    received_at=received,
                    labels=dict(row.get("labels") or {}),
                    taints=taints,
                ),
            )

    async def _sync_sources(self) -> None:
        wanted: dict[model.NatsSource, set[str] | None] = {}
        for state in self.mqs.values():
            if state.parsed is None:
                continue
            for group in state.parsed.flavors:
                if group.nats is None:
                    continue
                src = group.nats.source
                if group.nats.pools is None:
                    wanted[src] = wanted.get(src) or set()
                else:
                    wanted[src] = (wanted.get(src) or set()) | set(group.nats.pools)
        await self.hub.ensure(wanted)

    # -- one pass ---------------------------------------------------------------------------------

    async def step(self) -> int:
        """Reconcile every MasterQueue once; returns the number of API writes made."""
        before = self.writes
        now = self.settings.clock.time()
        if self.version is None:
            await self.detect_version()
        if now - self._last_resync >= self.settings.resync_s:
            await self.load_owned()
            self.applied.clear()
        horizon = max(
            (
                g.nats.pool_timeout + g.nats.flavor_retention
                for s in self.mqs.values()
                if s.parsed
                for g in s.parsed.flavors
                if g.nats is not None
            ),
            default=0.0,
        )
        self.store.prune(now - horizon - 60.0)
        error: str | None = None
        for name in sorted(self.mqs):
            state = self.mqs[name]
            try:
                await self._reconcile_one(name, state, now)
            except KubeError as exc:
                error = f"MasterQueue {name}: {exc}"
                log.warning("MasterQueue %s: %s", name, exc, extra={"masterqueue": name})
                await self._event_once(state, "Warning", "ApplyFailed", str(exc))
        self.last_error = error
        self.passes += 1
        self.synced.set()
        return self.writes - before

    async def _reconcile_one(self, name: str, state: _MQ, now: float) -> None:
        assert self.version is not None
        mq = state.parsed
        if mq is None:
            await self._write_status(state, name, None, now)
            if state.error:
                await self._event_once(state, "Warning", "InvalidSpec", state.error)
            return
        sources = mq.sources()
        if not all(self.hub.primed(s) for s in sources) and now < state.ready_after:
            return  # the first Describe round is still running: do not judge pools yet
        if not self._needs_usage(mq):
            state.usage = {}
        elif now - state.usage_at >= self.settings.usage_refresh_s:
            state.usage, state.usage_at = await self._usage(mq), now
        usage = state.usage
        desired = reconcile.reconcile(mq, self.store.view(), self.version, now=now, usage=usage, memory=state.capacity)
        state.capacity = desired.memory
        for warning in desired.warnings:
            await self._event_once(state, "Warning", "Reconcile", warning)
        wanted: set[Key] = set()
        for obj in desired.objects():
            key = (obj["kind"], obj["metadata"]["name"])
            if await self._conflict(state, mq, key):
                continue
            wanted.add(key)
            await self._apply(key, obj)
        await self._delete_owned(name, keep=wanted)
        await self._pool_events(state, mq, desired)
        await self._write_status(state, name, desired, now)

    def _needs_usage(self, mq: model.MasterQueue) -> bool:
        """Kueue's reservation matters under ``capacity: Free``, and when a pool may be held at what it uses."""
        for group in mq.flavors:
            if group.nats is None:
                continue
            if group.nats.capacity.policy is Policy.FREE:
                return True
            reports = self.store.view().get(group.nats.source, {})
            if any(r.queued_jobs or r.failures for r in reports.values() if group.nats.selects(r.pool)):
                return True
        return False

    async def _usage(self, mq: model.MasterQueue) -> dict[str, dict[str, str]]:
        """What admitted workloads hold per flavor, read from Kueue's status of this MasterQueue's queues."""
        assert self.version is not None
        queues = []
        for name in reconcile.queue_names(mq):
            if ("ClusterQueue", name) in self.live:
                found = await self.api.get_object("ClusterQueue", self.version, name)
                if found is not None:
                    queues.append(found)
        return reconcile.kueue_usage(queues)

    async def _conflict(self, state: _MQ, mq: model.MasterQueue, key: Key) -> bool:
        """A ClusterQueue of that name that someone else (or another MasterQueue) owns is left alone."""
        live = self.live.get(key)
        if live is None and key[0] == "ClusterQueue":
            assert self.version is not None
            found = await self.api.get_object(key[0], self.version, key[1])
            if found is not None:
                self.live[key] = live = found
        if live is None:
            return False
        owner = (live.get("metadata", {}).get("labels") or {}).get(MASTERQUEUE_LABEL)
        if owner == mq.name:
            return False
        await self._event_once(
            state,
            "Warning",
            "QueueConflict",
            f"{key[0]} {key[1]} exists and is not managed by this MasterQueue (owner: {owner or 'none'}); left alone",
        )
        return True

    async def _apply(self, key: Key, obj: dict[str, Any]) -> None:
        live = self.live.get(key)
        last = self.applied.get(key)
        if live is not None and (obj == last if last is not None else covers(obj, live)):
            self.applied[key] = obj
            return
        self.writes += 1
        self.live[key] = await self.api.apply(obj)
        self.applied[key] = obj
        log.info("applied %s %s", *key)

    async def _delete_owned(self, mq_name: str, keep: set[Key]) -> None:
        assert self.version is not None or not self.live
        stale = [
            key
            for key, obj in self.live.items()
            if key not in keep and (obj.get("metadata", {}).get("labels") or {}).get(MASTERQUEUE_LABEL) == mq_name
        ]
        for key in sorted(stale, key=lambda k: k[0] != "ClusterQueue"):  # queues first, then flavors
            self.writes += 1
            await self.api.delete(key[0], self.version or reconcile.DEFAULT_KUEUE_VERSION, key[1])
            self.live.pop(key, None)
            self.applied.pop(key, None)
            log.info("deleted %s %s", *key)
            state = self.mqs.get(mq_name)
            if state is not None and state.parsed is not None and key[0] == "ResourceFlavor":
                await self._event(state.parsed, "Normal", "FlavorDeleted", f"ResourceFlavor {key[1]} deleted")

    # -- status and events ------------------------------------------------------------------------

    async def _write_status(self, state: _MQ, name: str, desired: reconcile.Desired | None, now: float) -> None:
        status = status_of(
            state.body, self.version or reconcile.DEFAULT_KUEUE_VERSION, state.error, state.parsed is not None, desired
        )
        previous = state.status_written
        same_shape = without_volatile(status) == without_volatile(previous)
        if same_shape and (status == previous or now - state.status_at < self.settings.status_refresh_s):
            return
        old_condition = ((previous or {}).get("conditions") or [{}])[0]
        new_condition = status["conditions"][0]
        keep_time = old_condition.get("status") == new_condition["status"] and old_condition.get("lastTransitionTime")
        new_condition["lastTransitionTime"] = keep_time or rfc3339(now)
        if status == previous:
            return
        self.writes += 1
        await self.api.patch_masterqueue_status(name, status)
        state.status_written, state.status_at = status, now

    async def _pool_events(self, state: _MQ, mq: model.MasterQueue, desired: reconcile.Desired) -> None:
        current = {p.pool: str(p.state) for p in desired.pools}
        for pool, now_state in current.items():
            if state.pool_states.get(pool) != now_state:
                reason = {
                    PoolState.LIVE: "PoolLive",
                    PoolState.TIMED_OUT: "PoolTimedOut",
                    PoolState.EXCLUDED: "PoolExcluded",
                }[PoolState(now_state)]
                kind = "Normal" if now_state == PoolState.LIVE else "Warning"
                await self._event(mq, kind, reason, f"pool {pool}: {now_state}")
        state.pool_states = current
        admissions = {p.pool: p for p in desired.pools if p.state is PoolState.LIVE}
        for pool, p in admissions.items():
            before = state.admissions.get(pool, str(Admission.OPEN))
            if before == p.admission:
                continue
            if p.admission is Admission.OPEN:
                await self._event(mq, "Normal", "PoolOpen", f"pool {pool}: Open again (was {before})")
            else:
                await self._event(mq, "Warning", f"Pool{p.admission}", f"pool {pool}: {p.admission}: {p.reason}")
        state.admissions = {pool: str(p.admission) for pool, p in admissions.items()}

    async def _event_once(self, state: _MQ, kind: str, reason: str, message: str) -> None:
        if (reason, message) in state.seen_warnings:
            return
        state.seen_warnings.add((reason, message))
        mq = state.parsed or model.MasterQueue(
            name=state.body.get("metadata", {}).get("name", ""),
            uid=state.body.get("metadata", {}).get("uid", ""),
            template={},
            covered_resources=(),
            flavors=(),
        )
        await self._event(mq, kind, reason, message)

    async def _event(self, mq: model.MasterQueue, kind: str, reason: str, message: str) -> None:
        with contextlib.suppress(Exception):
            await self.api.emit_event(mq, kind, reason, message)
