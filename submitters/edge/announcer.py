"""Announcements: the pool's BuildConfig and ResourceReport, at start, periodically and on change.

Core NATS, not JetStream: listeners only want the latest, and a missed one is repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

import nats.errors
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import quantities
from interlink_nats.kernel.backend_options import with_legacy_fields
from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.subjects import config_subject, resources_subject
from interlink_nats.submitters.core.backend import Backend, BackendError, Capacity, ReportsFree, RunsArrays
from interlink_nats.submitters.core.errors import SubmitterError
from interlink_nats.submitters.core.load import FailureWindow, HeldTally, QueueLoad
from interlink_nats.submitters.core.usage import EndedUsage
from interlink_nats.submitters.settings import SubmitterSettings
from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)

_MEASURED = frozenset({"cpu", "memory", "nvidia.com/gpu"})
"""What ``Backend.free`` measures: absent from its answer means none free."""


def _no_queue(now: float) -> QueueLoad:
    return QueueLoad()


CONFIG_CHECK_INTERVAL = 2.0
USAGE_WINDOW_S = 3600
"""The pool's recent usage (``ResourceReport.usage_recent``) adds up the jobs that ended within this: the last hour."""


class Announcer:
    """Owns the BuildConfig in force and the capacity last discovered."""

    def __init__(self, settings: SubmitterSettings, backend: Backend, clock: Clock) -> None:
        self.settings = settings
        self.pool = settings.pool
        self.backend = backend
        self.clock = clock
        self.build_config = pb.BuildConfig()
        self.capacity = Capacity()
        self.free: Capacity | None = None
        """What the site had free at the last discovery; None: the backend cannot tell (or failed to)."""
        self.failures = FailureWindow(settings.failure_window_s)
        """Fed by the submission path and the poller (``runtime``); read into every report."""
        self.held = Capacity()
        self.held_specs: Callable[[], Awaitable[dict[str, bytes]]] | None = None
        """The stored JobScripts of the pool's unfinished jobs, by uid (the runtime reads them from the registry)."""
        self._held_tally = HeldTally()
        self.ended_statuses: Callable[[float], Awaitable[list[tuple[str, int, bytes]]]] | None = None
        """(uid, revision, last status) of the pool's jobs that ended since a time (the runtime reads them from the
        registry)."""
        self._ended_usage = EndedUsage()
        self.recent_usage = pb.JobUsage()
        """What the pool's jobs that ended within ``USAGE_WINDOW_S`` used (summed), at the last discovery."""
        self.queue_load: Callable[[float], QueueLoad] = _no_queue
        """The pool's jobs waiting at the site (the runtime sets the poller's)."""
        self._config_mtime: float | None = None
        self.nc: NATS | None = None

    def build_config_moved(self) -> bool:
        """Whether the BuildConfig file's mtime differs from the one last read (or it came or went)."""
        return self._build_config_mtime() != self._config_mtime

    def _build_config_mtime(self) -> float | None:
        path, _ = self.settings.build_config_source()
        if path is None:
            return None
        try:
            return path.stat().st_mtime
        except OSError:
            return None

    def reload_build_config(self, *, force: bool = False) -> bool:
        """Re-read the BuildConfig when its file changed; True when it did.

        A broken file at start is fatal (nothing sensible to announce); later it is logged and
        the previous BuildConfig stays in force.
        """
        mtime = self._build_config_mtime()
        if not force and mtime == self._config_mtime:
            return False
        self._config_mtime = mtime
        try:
            config = self.settings.read_build_config()
            self.backend.configure(config)
        except ValueError as exc:  # ConfigFileError, or flags the backend refuses
            if force:
                raise SubmitterError(f"invalid BuildConfig: {exc}") from exc
            log.error("keeping the previous BuildConfig: %s", exc)
            return False
        config.runs_arrays = isinstance(self.backend, RunsArrays)  # the backend's, never the site file's to claim
        self.build_config = with_legacy_fields(config)  # an older gateway reads only the old fields
        return True

    def record_outcome(self, ok: bool) -> None:
        """One submission or job start, as the report's recent failures count it."""
        self.failures.record(ok, self.clock.monotonic())

    async def discover_capacity(self) -> Capacity:
        try:
            self.capacity = await self.backend.capacity()
        except BackendError as exc:
            log.warning("cannot discover capacity (%s); announcing the configured one", exc)
        if isinstance(self.backend, ReportsFree):
            try:
                self.free = await self.backend.free()
            except BackendError as exc:
                self.free = None
                log.warning("cannot discover free capacity (%s); reporting none", exc)
        if self.free is not None and self.held_specs is not None:
            try:
                self.held = self._held_tally.held(await self.held_specs())
            except Exception as exc:  # the registry closed under us (stopping): keep the last figure
                log.debug("cannot count what the pool's jobs hold: %s", exc)
        if self.ended_statuses is not None:
            try:
                ended = await self.ended_statuses(self.clock.time() - USAGE_WINDOW_S)
                self.recent_usage = self._ended_usage.summed(ended)
            except Exception as exc:  # the registry closed under us (stopping): keep the last figure
                log.debug("cannot add up the pool's recent usage: %s", exc)
        return self.capacity

    def free_report(self, capacity: dict[str, str]) -> dict[str, str]:
        """The free quantities, capped by (and keyed as) the announced capacity; empty when unknown.

        A resource the backend does not measure (``pods``, an override) is free as announced: the
        controller must not read its absence as "nothing free".
        """
        if self.free is None:
            return {}
        measured = self.free.quantities()
        out: dict[str, str] = {}
        for resource, total in capacity.items():
            value = measured.get(resource, "0" if resource in _MEASURED else total)
            out[resource] = quantities.minimum(value, total) if quantities.is_valid(total) else value
        return out

    def resource_report(self) -> pb.ResourceReport:
        capacity = self.capacity.quantities()
        capacity.setdefault("pods", "1000")
        capacity.update(self.settings.capacity)
        now = self.clock.time()
        waiting = self.queue_load(now)
        attempts, failures = self.failures.counts(self.clock.monotonic())
        return pb.ResourceReport(
            pool=self.pool,
            capacity=capacity,
            labels=dict(self.settings.labels),
            taints=self.settings.report_taints(),
            reported_at=self.clock.utcnow(),
            backend=self.backend.name,
            # what the loop below really does: it looks every CONFIG_CHECK_INTERVAL at best
            interval_seconds=math.ceil(max(self.settings.announce_interval_s, CONFIG_CHECK_INTERVAL)),
            free=self.free_report(capacity),
            held=self.held.quantities() if self.free is not None else {},
            queued_jobs=waiting.queued,
            oldest_pending_seconds=int(waiting.oldest_pending_s),
            recent_attempts=attempts,
            recent_failures=failures,
            failure_window_seconds=int(self.settings.failure_window_s),
            usage_recent=self.recent_usage,
            usage_window_seconds=USAGE_WINDOW_S,
        )

    async def announce(self) -> None:
        """Publish BuildConfig and ResourceReport (core NATS: listeners want the latest only)."""
        if self.nc is None or not self.nc.is_connected:
            return
        prefix = self.settings.subject_prefix
        try:
            await self.nc.publish(config_subject(self.pool, prefix), bytes(self.build_config))
            await self.nc.publish(resources_subject(self.pool, prefix), bytes(self.resource_report()))
        except nats.errors.Error as exc:
            log.warning("announcement failed: %s", exc)

    async def run(self, stop: asyncio.Event) -> None:
        """Check the BuildConfig file every few seconds; announce on change and every announce_interval."""
        last = self.clock.monotonic()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONFIG_CHECK_INTERVAL):  # not wait_for: on 3.11 it can swallow a cancel
                    await stop.wait()
            try:
                # The file's mtime is looked at here: one stat of the submitter's own configuration file, which its
                # start read on the loop too; only a change costs a thread hop (to read and check it). A hop every
                # 2 s was two to three wake-ups of an idle submitter, about a third of its idle CPU.
                changed = self.build_config_moved() and await asyncio.to_thread(self.reload_build_config)
                due = self.clock.monotonic() - last >= self.settings.announce_interval_s
                if due:
                    await self.discover_capacity()
                if changed or due:
                    await self.announce()
                    last = self.clock.monotonic()
            except Exception:
                log.exception("announcement loop error")
