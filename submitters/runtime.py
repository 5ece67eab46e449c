"""The submitter runtime: one process serving ``SubmitterService`` for one pool.

In-process API (what ``interlink-nats up`` uses)::

    settings = SubmitterSettings.load(config_file=None, pool="local", backend="shell",
                                      nats_url=["nats://127.0.0.1:4222"], state_dir=Path(...))
    async with Submitter(settings) as s:      # connects, recovers, serves; stops and drains on exit
        ...                                   # s.instance_id, s.describe(), await s.poll_once()
    await run_submitter(settings, stop_event) # serve until stop_event is set (or forever if None)

    Submitter(settings, *, nc=None, backend=None, clock=None)
      nc:      an already connected NATS client to use (then it is not drained/closed by us)
      backend: a Backend to use instead of the one named by settings.backend (tests, benchmarks)
      clock:   a ``kernel.clock.Clock`` used by every part, registry included

What it does, and why in this order:
1. take the instance lock (``ownership``): replicas sharing the registry judge each other
   alive by it, so a crashed replica's jobs are adopted at once;
2. open the registry, check the backend's programs (a missing ``sbatch`` stops the start: ``backends.commands``),
   start the backend, and recover every job this instance now owns (``recovery``; interrupted submissions are
   reconciled with the backend, those whose caller gave up are dropped) — ``open()``;
3. connect to NATS (forever, with back-off), look the events stream up (the gateway creates it), serve
   RPC; a refused subscription to the pool's own subjects ends the start with an error
   (``service``) — ``serve()``;
4. loop: one batched backend poll per interval (``polling``) → registry (one commit) → JobEvents
   (``outbox``: unpublished ones are retried, so events resume after a NATS outage); announce
   BuildConfig and ResourceReport at start, periodically and when the config changes
   (``announcer``).

Decisions (which phase follows which, what recovery or cancel must do) are made by the pure
``lifecycle`` module; the modules above execute them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.log_context import bind as bind_log_fields
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.kernel.version import __version__
from interlink_nats.submitters.backends import create_backend
from interlink_nats.submitters.backends.commands import CommandCheck, start_warnings
from interlink_nats.submitters.core.backend import Backend, BackendContext, BackendError
from interlink_nats.submitters.core.errors import SubmitterError, Unavailable
from interlink_nats.submitters.edge.announcer import Announcer
from interlink_nats.submitters.edge.metrics import SubmitterMetrics
from interlink_nats.submitters.edge.service import rpc_server
from interlink_nats.submitters.engine.arrays import ArraySubmissions
from interlink_nats.submitters.engine.gangs import PodGroupSubmissions
from interlink_nats.submitters.engine.polling import Poller, PollStats
from interlink_nats.submitters.engine.queries import Queries
from interlink_nats.submitters.engine.recovery import Recovery
from interlink_nats.submitters.engine.submission import Submissions
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.state.outbox import Outbox
from interlink_nats.submitters.state.ownership import InstanceLock
from interlink_nats.submitters.state.registry import Registry
from interlink_nats.submitters.state.schema import JobRow
from nats.aio.client import Client as NATS

__all__ = ["PollStats", "Submitter", "SubmitterError", "make_backend", "run_submitter"]

log = logging.getLogger(__name__)

KEPT_PERMISSION_ERRORS = 10

ADOPT_EVERY_POLLS = 3


def make_backend(settings: SubmitterSettings, clock: Clock | None = None) -> Backend:
    """The backend named by the settings, built from its section (``backends.BACKENDS``, imported lazily)."""
    context = BackendContext(
        pool=settings.pool,
        state_dir=settings.resolved_state_dir(),
        kill_grace_s=settings.kill_grace_s,
        clock=clock or SYSTEM_CLOCK,
    )
    return create_backend(settings.backend, settings.backend_config(), context)


class Submitter:
    """One pool's submitter: registry + backend + NATS. See the module docstring."""

    def __init__(
        self,
        settings: SubmitterSettings,
        *,
        nc: NATS | None = None,
        backend: Backend | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.pool = settings.pool
        self.instance_id = settings.resolved_instance_id()
        self.state_dir = settings.resolved_state_dir()
        self.clock = clock or SYSTEM_CLOCK
        self.backend: Backend = backend if backend is not None else make_backend(settings, self.clock)
        self.started_at = self.clock.utcnow()
        self.nc: NATS | None = nc
        self._own_nc = nc is None
        self.registry: Registry | None = None
        self.instance_lock = InstanceLock(self.state_dir / "instances", self.instance_id)
        self.outbox = Outbox(
            pool=self.pool,
            subject_prefix=settings.subject_prefix,
            instance_id=self.instance_id,
            clock=self.clock,
            registry=lambda: self.registry,
        )
        self.poller = Poller(
            pool=self.pool, backend=self.backend, clock=self.clock, outbox=self.outbox, registry=self._reg
        )
        self.announcer = Announcer(settings, self.backend, self.clock)
        self.commands = CommandCheck(self.backend)
        """The backend's programs: re-checked every poll and after a failed submission; /healthz reads it."""
        self.metrics = SubmitterMetrics(self.pool)  # what /metrics counts and times; its gauges read this object
        self.submissions = Submissions(
            pool=self.pool,
            state_dir=self.state_dir,
            lock=self.instance_lock,
            registry=self._reg,
            backend=self.backend,
            poller=self.poller,
            outbox=self.outbox,
            clock=self.clock,
            commands=self.commands,
            storage=lambda: self.announcer.build_config.storage,
        )
        self.submissions.on_submit = self.poller.on_start = self.announcer.record_outcome
        self.announcer.queue_load = self.poller.queue_load
        self.announcer.held_specs = lambda: self._reg().live_specs(self.instance_id)
        self.announcer.ended_statuses = lambda since: self._reg().statuses_ended_since(since)
        self.gangs = PodGroupSubmissions(self.submissions, ArraySubmissions(self.submissions))
        self.recovery = Recovery(self.submissions)
        self.queries = Queries(registry=self._reg, backend=self.backend)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._rpc: Any = None
        self.polls = 0
        self.last_poll_ok: float | None = None
        """Monotonic time of the last poll that reached the backend (the health check reads it)."""
        self.poll_error: str | None = None
        self.permission_errors: list[str] = []
        """NATS permission violations on this process's own subjects since start (newest last, a few kept)."""
        self._denied_subscriptions: list[str] = []

    # Lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Submitter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, stop: asyncio.Event | None = None) -> None:
        """Recover, connect and serve. ``stop`` aborts a connect that is still retrying."""
        await self.open()
        try:
            await self.serve(stop)
        except BaseException:
            await self._shutdown(drain=False)
            raise

    async def open(self) -> None:
        """Everything before NATS: lock, registry, BuildConfig, backend, adoption and recovery."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            jobfiles.jobs_root(self.state_dir).mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise SubmitterError(f"cannot create state dir {self.state_dir}: {exc}") from exc
        self.instance_lock.acquire()
        self._stop = asyncio.Event()
        self.metrics.time_commands()  # every batch command run from here on (the backend's loops too)
        self.submissions.reopen()
        try:
            self.registry = await Registry.open(self.settings.resolved_registry_path(), clock=self.clock)
            self.announcer.reload_build_config(force=True)
            self.commands.require()  # after the BuildConfig: it may name one (podman)
            for line in start_warnings(self.settings.backend, self.announcer.build_config):
                log.warning("%s", line)  # the jobs run it, on batch nodes maybe: said, not refused
            await self.backend.start()
            await self.recovery.adopt_dead_owners()
            await self.recover()
            left = 0
            for root in (jobfiles.jobs_root(self.state_dir), self.state_dir / layout.GANG_DIR):
                left += await asyncio.to_thread(jobfiles.sweep_removals, root)
            if left:
                log.info("removed %d job or pod-group directories an earlier run left half-removed", left)
        except BaseException:
            await self._shutdown(drain=False)
            raise

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        """Connect to NATS, serve RPC, announce, and start the poll, announce and publish loops."""
        if self.nc is None:
            from interlink_nats.kernel.nats_connection import connect
            from interlink_nats.submitters.edge.natsconn import connection_settings

            self.nc = await connect(
                connection_settings(self.settings),
                f"interlink-submitter-{self.pool}-{self.instance_id}",
                stop=stop,
                on_reconnect=self._on_reconnect,
                on_error=self._on_nats_error,
            )
        self.outbox.nc = self.announcer.nc = self.nc
        await self._probe_permissions()
        await self.outbox.ensure_stream()
        self._rpc = rpc_server(self.nc, self, max_concurrency=self.settings.max_concurrency)
        await self._rpc.start()
        await self._check_subscriptions()
        await self.announcer.discover_capacity()
        await self.announcer.announce()
        self._tasks = [
            asyncio.create_task(self._poll_loop(), name="submitter-poll"),
            asyncio.create_task(self.announcer.run(self._stop), name="submitter-announce"),
            asyncio.create_task(self.outbox.run(self._stop, self.settings.poll_interval_s), name="submitter-publish"),
        ]
        log.info(
            "submitter %s serving pool %s with backend %s (state %s)",
            self.instance_id,
            self.pool,
            self.backend.name,
            self.state_dir,
        )

    async def _on_nats_error(self, exc: Exception) -> bool:
        """Record permission errors; while starting, a refused subscription is said once by the start's error."""
        from interlink_nats.kernel.nats_connection import as_subscribed, denied_subscription

        if "permissions violation" in str(exc).lower():
            said = as_subscribed(str(exc), self.nc)
            self.permission_errors = [*self.permission_errors[-(KEPT_PERMISSION_ERRORS - 1) :], said]
        subject = denied_subscription(exc)
        subject = subject and as_subscribed(subject, self.nc)
        if subject is not None:
            self._denied_subscriptions.append(subject)
        return subject is not None and not self._tasks  # the loops start once serving

    async def _probe_permissions(self, *, queue: bool = True) -> None:
        """Subscribe to the pool's Submit subject once before anything waits (the stream lookup times out after
        5 s): credentials that cannot serve the pool fail the start at once, in one line. ``queue=False``
        (``submitter check``): outside the pool's queue group, so a running replica's requests are not taken."""
        from interlink_nats.kernel.subjects import rpc_subject

        assert self.nc is not None
        probe = await self.nc.subscribe(rpc_subject("Submit", self.pool), queue=self.pool if queue else "")
        await self._check_subscriptions()
        await probe.unsubscribe()

    async def _check_subscriptions(self) -> None:
        """Fail the start when the server refused one of our subscriptions: serving on would look healthy
        while every request to the pool gets a 503. A flush is a round trip, so any refusal is in by then."""
        assert self.nc is not None
        for _ in range(2):  # the -ERR precedes the PONG; a second round trip covers a server that sends it late
            await self.nc.flush(timeout=10)
        if self._denied_subscriptions:
            from interlink_nats.kernel.nats_connection import identity_of
            from interlink_nats.submitters.edge.natsconn import connection_settings

            raise SubmitterError(
                f"NATS refused subscribing to {', '.join(sorted(set(self._denied_subscriptions)))} for "
                f"{identity_of(connection_settings(self.settings))}: these credentials cannot serve pool "
                f"{self.pool!r} (wrong --pool, or another pool's credential file?)"
            )

    async def stop(self) -> None:
        """Stop serving (in-flight calls finish), flush events, drain NATS. Jobs keep running."""
        await self._shutdown(drain=True)

    async def _shutdown(self, *, drain: bool) -> None:
        self._stop.set()
        self.submissions.stopping = True
        if self._rpc is not None:
            with contextlib.suppress(Exception):
                await self._rpc.stop(grace_s=self.settings.nats.drain_timeout_s / 2)
            self._rpc = None
        await cancel_and_wait(*self._tasks)
        self._tasks = []
        inflight = [*self.submissions.inflight.values(), *self.gangs.inflight.values()]
        if inflight:
            await asyncio.wait(inflight, timeout=self.settings.nats.drain_timeout_s / 2)
        if drain and self.nc is not None and self.nc.is_connected and self.registry is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.publish_pending(), timeout=5)
        await self.outbox.mark_published()  # what was acked, before the registry closes
        with contextlib.suppress(Exception):
            await self.backend.close()
        with contextlib.suppress(Exception):
            await self.submissions.job_dirs.close()
        if self.nc is not None and self._own_nc:
            with contextlib.suppress(Exception):
                if drain and self.nc.is_connected:
                    await self.nc.drain()
                else:
                    await self.nc.close()
            self.nc = None
        self.outbox.nc = self.announcer.nc = self.nc
        if self.registry is not None:
            with contextlib.suppress(Exception):
                await self.registry.close()
            self.registry = None
        self.instance_lock.release()

    async def _on_reconnect(self) -> None:
        self.outbox.on_reconnect()

    def _reg(self) -> Registry:
        if self.registry is None:
            raise Unavailable("submitter is not running")
        return self.registry

    async def reload_settings(self, reread: Callable[[], SubmitterSettings]) -> None:
        """SIGHUP: re-read the configuration, apply what can change while serving (``edge.reload``), announce."""
        from interlink_nats.submitters.edge.reload import reload

        done = reload(self.settings, reread, self.announcer, self.backend)
        if done is not None:
            self.settings = done[0]
            if done[1].live and self.nc is not None and self.nc.is_connected:
                await self.announcer.announce()

    # Recovery and polling ---------------------------------------------------------------------

    async def recover(self) -> None:
        """Track every live job this instance owns that is neither tracked nor being submitted."""
        await self.recovery.recover(busy=set(self.submissions.inflight) | set(self.submissions.group_inflight))

    def track(self, row: JobRow) -> None:
        """Poll ``row``'s job from now on (benchmarks seed a registry and track its rows)."""
        self.poller.track(row)

    async def poll_once(self) -> PollStats:
        """One batched backend poll for every tracked job; store and publish what changed."""
        return await self.poller.poll_once()

    async def _poll_loop(self) -> None:
        interval = self.settings.poll_interval_s
        while not self._stop.is_set():
            started = self.clock.monotonic()
            try:
                self.commands.refresh()  # /healthz and Submit read it (a program removed after the start)
                await self.poll_once()
                self.last_poll_ok, self.poll_error = self.clock.monotonic(), None
                self.polls += 1
                if self.submissions.recover_needed:
                    self.submissions.recover_needed = False
                    await self.recover()
                if self.polls % ADOPT_EVERY_POLLS == 0:
                    if await self.recovery.adopt_dead_owners():
                        await self.recover()
                    elif self.polls % (ADOPT_EVERY_POLLS * 20) == 0:
                        await self.recover()  # picks up interrupted submissions whose retry came back
                if self.polls % 1000 == 1:
                    cutoff = self.clock.time() - self.settings.retention_days * 86400
                    await self._reg().prune(cutoff)
            except BackendError as exc:
                self.poll_error = f"{self.backend.name} poll failed: {exc}"
                log.warning("%s poll failed (%s); retrying next interval", self.backend.name, exc)
            except Exception as exc:
                self.poll_error = f"poll failed: {type(exc).__name__}: {exc}"
                log.exception("poll failed; retrying next interval")
            delay = max(0.0, interval - (self.clock.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: on 3.11 it can swallow a cancel
                    await self._stop.wait()

    # RPC-facing -------------------------------------------------------------------------------

    # Submit and cancel are ``self.submissions``' (``Submissions``), the reads ``self.queries``' (``Queries``):
    # the RPC edge calls them there.

    def describe(self) -> pb.DescribeResponse:
        return pb.DescribeResponse(
            pool=self.pool,
            build_config=self.build_config,
            resources=self.resource_report(),
            backend=self.backend.name,
            version=__version__,
            instance_id=self.instance_id,
            started_at=self.started_at,
        )

    # Events and announcements -----------------------------------------------------------------

    async def publish_pending(self) -> int:
        """Publish every unpublished event (newest revision per pod); returns how many went out."""
        return await self.outbox.publish_pending()

    async def announce(self) -> None:
        await self.announcer.announce()

    def resource_report(self) -> pb.ResourceReport:
        return self.announcer.resource_report()

    @property
    def build_config(self) -> pb.BuildConfig:
        return self.announcer.build_config

    # Introspection ----------------------------------------------------------------------------

    @property
    def tracked(self) -> int:
        return len(self.poller.tracked)

    @property
    def unpublished(self) -> int:
        return len(self.outbox.pending)

    @property
    def last_poll(self) -> PollStats | None:
        return self.poller.last_poll

    @property
    def poll_interval_s(self) -> float:
        return self.settings.poll_interval_s


async def run_submitter(
    settings: SubmitterSettings,
    stop_event: asyncio.Event | None = None,
    *,
    hangups: asyncio.Event | None = None,
    reread: Callable[[], SubmitterSettings] | None = None,
) -> None:
    """Serve until ``stop_event`` is set (forever when None), then stop gracefully.

    Each time ``hangups`` is set (SIGHUP, ``kernel.signals``) the configuration is re-read with ``reread``.

    With ``probe_port`` set, /healthz and /metrics answer from before the NATS connection is made, so a
    submitter that cannot reach NATS is visible as unhealthy rather than silent.
    """
    from interlink_nats.kernel.nats_connection import NatsConnectError

    stop_event = stop_event or asyncio.Event()
    bind_log_fields(pool=settings.pool)  # every record of this task and the tasks it starts names the pool
    submitter = Submitter(settings)
    probes = None
    if settings.probe_port is not None:
        from interlink_nats.services.ops.probes import serve_probes
        from interlink_nats.submitters.edge.observability import submitter_probes

        probes = await serve_probes(submitter_probes(submitter), settings.probe_host, settings.probe_port)
    try:
        try:
            await submitter.start(stop=stop_event)
        except NatsConnectError:
            return
        try:
            await _serve_until(submitter, stop_event, hangups, reread)
        finally:
            await submitter.stop()
    finally:
        if probes is not None:
            probes.close()


async def _serve_until(
    submitter: Submitter,
    stop: asyncio.Event,
    hangups: asyncio.Event | None,
    reread: Callable[[], SubmitterSettings] | None,
) -> None:
    """Wait for ``stop``; meanwhile each hang-up reloads the configuration."""
    while hangups is not None and reread is not None:
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(hangups.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(*waits)
        if stop.is_set():
            return
        hangups.clear()
        await submitter.reload_settings(reread)
    await stop.wait()
