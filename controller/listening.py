"""NATS side of the controller: one connection per connector, one subscription per (connector, subject).

Reports land in a ``ReportStore`` that the reconcile loop reads; every change wakes it. When a
source is first subscribed (and after every reconnect) the pools are asked to ``Describe``
themselves, so a restarted controller knows the live pools at once instead of after the next
announcement period (which made the original controller drop to Hold at every restart).

Which pools to ask: the ones named in ``pools``; for ``poolRegExp`` groups, every pool that answers
the NATS micro discovery request ``$SRV.INFO.interlink-submitter`` (each submitter's RPC server
answers with ``metadata.pool``), filtered by the regexp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
from interlink_nats.controller import model
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import nats_connection
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.names import is_dns_label
from interlink_nats.kernel.reported import DEFAULT_MAXIMA, Maxima
from interlink_nats.kernel.subjects import Role, inbox_prefix, validate_pool
from interlink_nats.kernel.tasks import cancel_and_wait
from nats.aio.client import Client as NATS
from nats.aio.client import RawCredentials
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

DEFAULT_INBOX_PREFIX = inbox_prefix(Role.CONTROLLER)


def default_nats_settings() -> nats_connection.NatsConnectionSettings:
    """The controller's ``nats`` settings: the shared model, replies on the inbox ``nats-config`` grants it."""
    return nats_connection.NatsConnectionSettings(inbox_prefix=DEFAULT_INBOX_PREFIX)


DISCOVERY_SUBJECT = "$SRV.INFO.interlink-submitter"

SecretReader = Callable[[str, str], Awaitable[dict[str, str]]]


class ReportStore:
    """Latest report per (source, pool); ``changed`` is set on every accepted report."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, maxima: Maxima = DEFAULT_MAXIMA) -> None:
        self.clock = clock
        self.maxima = maxima
        """The most a pool may report of each resource: a larger figure is refused (``kernel.reported``)."""
        self._reports: dict[model.NatsSource, dict[str, model.PoolReport]] = {}
        self.changed = asyncio.Event()
        self.received = 0

    def view(self) -> dict[model.NatsSource, dict[str, model.PoolReport]]:
        return self._reports

    def put(self, source: model.NatsSource, report: model.PoolReport) -> None:
        self._reports.setdefault(source, {})[report.pool] = report
        self.received += 1
        self.changed.set()

    def seed(self, source: model.NatsSource, report: model.PoolReport) -> None:
        """Keep a report remembered elsewhere (the MasterQueue status) unless a fresher one is known."""
        known = self._reports.setdefault(source, {}).get(report.pool)
        if known is None or known.received_at < report.received_at:
            self._reports[source][report.pool] = report

    def accept(self, source: model.NatsSource, data: bytes, subject_pool: str | None = None) -> bool:
        """Decode a ResourceReport announcement; reject garbage and reports whose pool contradicts the subject."""
        try:
            message = pb.ResourceReport.parse(data)
        except Exception:  # betterproto2 raises several kinds for bad bytes
            log.warning("undecodable resource report on %s (%d bytes)", source.subject, len(data))
            return False
        pool = message.pool or subject_pool or ""
        if subject_pool is not None and pool != subject_pool:
            log.warning("report for pool %r arrived on the subject of pool %r; ignored", pool, subject_pool)
            return False
        if not pool:
            log.warning("report without a pool name on %s ignored", source.subject)
            return False
        if not is_dns_label(pool):
            # Kept, so the MasterQueue that selects it says so in a Kubernetes event (reconcile leaves it out).
            log.warning("report with invalid pool name %r: not a DNS label, no flavor will be made for it", pool[:80])
        message.pool = pool
        self.put(source, model.report_from_proto(message, self.clock.time(), self.maxima))
        return True

    def prune(self, older_than: float) -> None:
        """Forget reports older than ``older_than`` (epoch seconds): pools gone for good."""
        for pools in self._reports.values():
            for pool in [p for p, r in pools.items() if r.received_at < older_than]:
                del pools[pool]


@dataclass
class _Connection:
    key: tuple[str, model.SecretRef | None]
    nc: NATS | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    sources: dict[model.NatsSource, Subscription | None] = field(default_factory=dict)


class NatsHub:
    """Keeps exactly the subscriptions the current MasterQueues need, sharing them between MasterQueues."""

    def __init__(
        self,
        store: ReportStore,
        *,
        secret_reader: SecretReader | None = None,
        nats: nats_connection.NatsConnectionSettings | None = None,
        describe_timeout_s: float = 5.0,
        discovery_window_s: float = 0.5,
    ) -> None:
        self.store = store
        self.secret_reader = secret_reader
        self.nats = nats or default_nats_settings()
        """Every connection's settings but its URL (the MasterQueue's) and what its Secret adds."""
        self.describe_timeout_s = describe_timeout_s
        self.discovery_window_s = discovery_window_s
        self._connections: dict[tuple[str, model.SecretRef | None], _Connection] = {}
        self._primed: dict[model.NatsSource, asyncio.Event] = {}
        self._pools_hint: dict[model.NatsSource, set[str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def connections(self) -> dict[str, str | None]:
        """Each NATS connector in use → the server it is connected to (None while it is not connected)."""
        return {
            key[0]: (
                str(conn.nc.connected_url.netloc)
                if conn.nc and conn.nc.is_connected and conn.nc.connected_url
                else None
            )
            for key, conn in self._connections.items()
        }

    def primed(self, source: model.NatsSource) -> bool:
        """True once the source's first Describe round is over (answered or timed out)."""
        event = self._primed.get(source)
        return event is not None and event.is_set()

    async def ensure(self, wanted: dict[model.NatsSource, set[str] | None]) -> None:
        """Subscribe sources newly wanted and drop the ones no MasterQueue uses.

        ``wanted`` maps each source to the pools named explicitly (asked to Describe at once);
        pools of ``poolRegExp`` groups are found through micro-services discovery.
        """
        for source, pools in wanted.items():
            self._pools_hint[source] = set(pools) if pools is not None else set()
            key = (source.connector, source.secret)
            conn = self._connections.get(key)
            if conn is None:
                conn = self._connections[key] = _Connection(key)
                conn.task = self._spawn(self._connect(conn))
            if source not in conn.sources:
                conn.sources[source] = None
                self._primed[source] = asyncio.Event()
                if conn.ready.is_set():
                    self._spawn(self._subscribe(conn, source))
        for key, conn in list(self._connections.items()):
            for source in [s for s in conn.sources if s not in wanted]:
                sub = conn.sources.pop(source)
                self._primed.pop(source, None)
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
            if not conn.sources:
                del self._connections[key]
                await self._close(conn)

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await self._close(conn)
        self._connections.clear()
        await cancel_and_wait(*self._tasks)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _close(self, conn: _Connection) -> None:
        await cancel_and_wait(conn.task)
        if conn.nc is not None:
            with contextlib.suppress(Exception):
                await conn.nc.close()

    async def _options(self, conn: _Connection) -> dict[str, Any]:
        """The shared connection options (``kernel.nats_connection``) plus what a Secret adds.

        The generated NATS permissions (`interlink-nats nats-config`) let the controller read
        replies only on its own inbox prefix, so another identity cannot read Describe answers.
        """
        url, secret = conn.key

        async def reconnected() -> None:
            log.info("NATS %s reconnected; asking its pools to describe themselves", url)
            for source in list(conn.sources):
                self._spawn(self._describe_all(conn, source))

        settings = self.nats.model_copy(update={"url": url})
        data = await self.secret_reader(secret.namespace, secret.name) if secret and self.secret_reader else {}
        if data.get("url"):
            settings.url = data["url"]
        if data.get("inboxPrefix"):
            settings.inbox_prefix = data["inboxPrefix"]
        options = nats_connection.connect_options(
            settings, name="kueue-nats", on_reconnect=reconnected, client=lambda: conn.nc
        )  # ``client``: a close we asked for logs no "disconnected" line
        if data.get("username"):
            options["user"], options["password"] = data["username"], data.get("password", "")
        if data.get("token"):
            options["token"] = data["token"]
        if data.get("nkey"):
            options["nkeys_seed_str"] = data["nkey"]
        if data.get("creds"):
            options["user_credentials"] = RawCredentials(data["creds"])
        if data.get("ca.crt"):
            options["tls"] = nats_connection.client_tls_context(ca_data=data["ca.crt"])
        return options

    async def _connect(self, conn: _Connection) -> None:
        """Connect with exponential back-off, re-reading the Secret each time (it may appear later);
        nats-py then reconnects by itself (forever)."""
        delay = 0.5
        while True:
            try:
                conn.nc = await nats.connect(**await self._options(conn))
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("NATS %s: connect failed (%s); retrying in %.1fs", conn.key[0], exc, delay)
                await self.store.clock.sleep(delay)
                delay = min(self.nats.reconnect_wait_max_s, delay * 2)
        conn.ready.set()
        for source in list(conn.sources):
            await self._subscribe(conn, source)

    async def _subscribe(self, conn: _Connection, source: model.NatsSource) -> None:
        assert conn.nc is not None
        if conn.sources.get(source) is not None or source not in conn.sources:
            return

        async def on_report(msg: Msg) -> None:
            self.store.accept(source, msg.data, msg.subject.rsplit(".", 1)[-1])

        conn.sources[source] = await conn.nc.subscribe(f"{source.subject}.*", cb=on_report)
        await conn.nc.flush()
        await self._describe_all(conn, source)
        primed = self._primed.get(source)
        if primed is not None:
            primed.set()

    async def discover(self, nc: NATS) -> set[str]:
        """Pools that answer the micro-services INFO request within the discovery window."""
        inbox = nc.new_inbox()
        found: set[str] = set()
        sub = await nc.subscribe(inbox)
        try:
            await nc.publish(DISCOVERY_SUBJECT, b"", reply=inbox)
            deadline = asyncio.get_running_loop().time() + self.discovery_window_s
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                try:
                    msg = await sub.next_msg(timeout=left)
                except (nats.errors.TimeoutError, TimeoutError):
                    break
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    pool = (json.loads(msg.data).get("metadata") or {}).get("pool")
                    if pool:
                        found.add(validate_pool(pool))
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return found

    async def _describe_all(self, conn: _Connection, source: model.NatsSource) -> None:
        """Ask each known pool for its current report; a silent pool is simply left to its announcements."""
        if conn.nc is None:
            return
        pools = set(self._pools_hint.get(source) or ())
        try:
            pools |= await self.discover(conn.nc)
        except Exception as exc:
            log.warning("pool discovery on %s failed: %s", conn.key[0], exc)
        if pools:
            await asyncio.gather(*(self._describe(conn.nc, source, pool) for pool in sorted(pools)))

    async def _describe(self, nc: NATS, source: model.NatsSource, pool: str) -> None:
        from interlink_nats.services.bus.rpc import submitter_client

        try:
            answer = await submitter_client(nc, pool, timeout=self.describe_timeout_s).describe(pb.DescribeRequest())
        except Exception as exc:  # GRPCError (UNAVAILABLE, DEADLINE_EXCEEDED, …) or a transport error
            log.info("pool %s did not describe itself: %s", pool, exc)
            return
        report = answer.resources
        if report is None:
            return
        report.pool = report.pool or answer.pool or pool
        if report.pool == pool:
            self.store.put(source, model.report_from_proto(report, self.store.clock.time(), self.store.maxima))
