"""Server side: serve generated ``ServiceBase`` implementations on their pool's subjects.

One subscription per route (queue group = pool, so each request reaches one submitter of the
pool). The subscription callback only takes a concurrency slot and starts a task; the task
parses, runs the handler under the caller's deadline and answers with a status. Nothing a
client sends can crash the server: bad bytes are INVALID_ARGUMENT, unknown handler errors are
logged here and leave as UNKNOWN with a generic message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import grpclib.const
import nats.errors
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import Deadline
from interlink_nats.kernel.subjects import route_to_subject, validate_pool
from interlink_nats.kernel.version import __version__

from . import protocol, strict
from .calls import Incoming, ServerCall, StreamGone, StreamServerCall, UnaryServerCall
from .latency import RpcLatency
from .micro import EndpointStats, MicroResponder

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

SERVICE_NAME = "interlink-submitter"


class Servable(Protocol):
    """What a generated ``XServiceBase`` subclass offers (grpclib's ``IServable``)."""

    def __mapping__(self) -> dict[str, grpclib.const.Handler]: ...


@dataclass(frozen=True)
class _Endpoint:
    route: str
    subject: str
    method: str
    handler: grpclib.const.Handler
    stats: EndpointStats


class RpcServer:
    """Serves ``services`` for one pool over NATS, with bounded concurrency and micro discovery.

    ``max_concurrency`` bounds handlers in flight (streams hold their slot until they end);
    further requests wait in the subscription. ``stream_window`` is how many stream messages
    may be in flight unacked; ``stream_idle_timeout`` ends a stream whose client stopped acking.
    ``decoders`` reads hot request types first (e.g. the generated plain decoder of the submitter's
    ``SubmitRequest``): each returns exactly what ``FromString`` would, or None for bytes it does not take;
    what it takes must be well-formed in every field (the strict wire check would pass them), since it
    stands in for that check too. What it leaves goes through the check and ``FromString``. ``encoders``
    likewise replaces ``SerializeToString`` for hot reply types of unary calls; each must return exactly the
    bytes it would. ``latency``: where each call's duration is observed, by method and status (the process's
    /metrics).
    """

    def __init__(
        self,
        nc: NATS,
        services: Iterable[Servable],
        *,
        pool: str,
        max_concurrency: int = 64,
        stream_window: int = 32,
        stream_idle_timeout: float = 30.0,
        name: str = SERVICE_NAME,
        version: str = __version__,
        description: str = "interlink-nats submitter: runs pods of one pool on a batch site",
        metadata: Mapping[str, str] | None = None,
        decoders: Mapping[type, Callable[[bytes], Any | None]] | None = None,
        encoders: Mapping[type, Callable[[Any], bytes]] | None = None,
        latency: RpcLatency | None = None,
    ) -> None:
        if max_concurrency < 1 or stream_window < 1 or stream_idle_timeout <= 0:
            raise ValueError("max_concurrency and stream_window must be ≥ 1, stream_idle_timeout > 0")
        self.nc = nc
        self.pool = validate_pool(pool)
        self.max_concurrency = max_concurrency
        self.stream_window = stream_window
        self.stream_idle_timeout = stream_idle_timeout
        self._endpoints = [self._endpoint(route, h) for svc in services for route, h in svc.__mapping__().items()]
        if not self._endpoints:
            raise ValueError("no routes to serve")
        self.micro = MicroResponder(
            nc,
            name=name,
            version=version,
            description=description,
            metadata={**(metadata or {}), "pool": self.pool},
            endpoints=[e.stats for e in self._endpoints],
        )
        self._decoders: dict[type, Callable[[bytes], Any | None]] = dict(decoders or {})
        self._encoders: dict[type, Callable[[Any], bytes]] = dict(encoders or {})
        self._latency = latency
        self._slots = asyncio.Semaphore(max_concurrency)
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0

    def _endpoint(self, route: str, handler: grpclib.const.Handler) -> _Endpoint:
        subject = route_to_subject(route, self.pool)
        method = route.rsplit("/", 1)[-1]
        stats = EndpointStats(
            name=method,
            subject=subject,
            queue_group=self.pool,
            metadata={"route": route, "cardinality": handler.cardinality.name},
        )
        return _Endpoint(route, subject, method, handler, stats)

    @property
    def subjects(self) -> list[str]:
        return [e.subject for e in self._endpoints]

    @property
    def in_flight(self) -> int:
        """Handlers running now (for tests and metrics)."""
        return self._in_flight

    async def start(self) -> None:
        """Subscribe every route and the micro subjects, then flush so the first call finds us."""
        if self._subs:
            return
        try:
            for endpoint in self._endpoints:
                self._subs.append(
                    await self.nc.subscribe(endpoint.subject, queue=self.pool, cb=self._callback(endpoint))
                )
            await self.micro.start()
            # nats-py's flush() writes its PING straight to the socket, so it can overtake SUBs still
            # queued in the pending buffer; yielding first lets the flusher send them, and a second
            # round trip makes sure the server has registered every subscription before we return.
            await asyncio.sleep(0)
            await self.nc.flush()
            await self.nc.flush()
        except nats.errors.Error:
            await self.stop(grace_s=0)
            raise
        log.info("serving %d routes for pool %s (id %s)", len(self._endpoints), self.pool, self.micro.id)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking calls, let in-flight ones finish for ``grace_s`` seconds, then cancel them."""
        subs, self._subs = self._subs, []
        await self.micro.stop()
        for sub in subs:  # drain: requests already delivered to us still get served
            with contextlib.suppress(nats.errors.Error):
                await sub.drain()  # type: ignore[no-untyped-call]  # nats-py leaves Subscription.drain unannotated
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    async def __aenter__(self) -> RpcServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _callback(self, endpoint: _Endpoint) -> Any:
        loop = asyncio.get_running_loop()

        async def on_request(msg: Msg) -> None:
            received = loop.time()
            await self._slots.acquire()  # back-pressure: the subscription waits for a free slot
            task = loop.create_task(self._serve(endpoint, msg, received))
            self._tasks.add(task)
            task.add_done_callback(self._release)

        return on_request

    def _release(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _serve(self, endpoint: _Endpoint, msg: Msg, received: float) -> None:
        """Run one call and record it in the micro stats and the latency histogram."""
        start = time.perf_counter_ns()
        self._in_flight += 1
        status, message = Status.UNKNOWN, protocol.GENERIC_ERROR
        try:
            status, message = await self._run(endpoint, msg, received)
        except asyncio.CancelledError:  # the server is stopping: what ``_handle`` told the caller
            status, message = Status.UNAVAILABLE, "server is stopping"
            raise
        finally:
            self._in_flight -= 1
            error = None if status is Status.OK else f"{status.name}:{message}"
            took = time.perf_counter_ns() - start
            endpoint.stats.record(took, error)
            if self._latency is not None:
                self._latency.observe(self.pool, endpoint.method, status, took / 1e9)

    async def _run(self, endpoint: _Endpoint, msg: Msg, received: float) -> tuple[Status, str]:
        if not msg.reply:
            log.warning("dropping a %s request without a reply subject", endpoint.method)
            return Status.INVALID_ARGUMENT, "no reply subject"
        loop = asyncio.get_running_loop()
        deadline_at: float | None = None
        raw_timeout = msg.headers.get(protocol.TIMEOUT) if msg.headers else None
        if raw_timeout is not None:
            try:
                deadline_at = received + protocol.decode_timeout(raw_timeout)
            except ValueError:
                return await self._reject(endpoint, msg, Status.INVALID_ARGUMENT, f"bad {protocol.TIMEOUT} header")
        window = self.stream_window
        raw_window = msg.headers.get(protocol.WINDOW) if msg.headers else None
        if raw_window is not None:
            try:  # a client bounds its own memory: it may ask for less, never for more
                window = min(window, protocol.decode_window(raw_window))
            except ValueError:
                return await self._reject(endpoint, msg, Status.INVALID_ARGUMENT, f"bad {protocol.WINDOW} header")
        handler = endpoint.handler
        try:
            decode = self._decoders.get(handler.request_type)
            request = None if decode is None else decode(msg.data)
            if request is None:
                strict.check(msg.data, handler.request_type)
                request = handler.request_type.FromString(msg.data)
        except Exception:
            return await self._reject(
                endpoint, msg, Status.INVALID_ARGUMENT, f"request is not a valid {handler.request_type.__name__}"
            )
        deadline = None if deadline_at is None else Deadline.from_timeout(deadline_at - loop.time())
        incoming = Incoming(self.nc, msg, request, endpoint.method, self.pool, deadline)
        call: UnaryServerCall | StreamServerCall
        if handler.cardinality is Cardinality.UNARY_STREAM:
            call = StreamServerCall(incoming, window=window, idle_timeout=self.stream_idle_timeout)
        else:
            call = UnaryServerCall(incoming, encode=self._encoders.get(handler.reply_type))
        return await self._handle(endpoint, call, deadline_at)

    async def _handle(
        self, endpoint: _Endpoint, call: UnaryServerCall | StreamServerCall, deadline_at: float | None
    ) -> tuple[Status, str]:
        """Run the handler and send its outcome; the status is returned for the stats."""
        token = call.bind()
        status, message = Status.OK, ""
        try:
            if isinstance(call, StreamServerCall):
                await call.open()
            scope = asyncio.timeout_at(deadline_at)
            try:
                async with scope:
                    await endpoint.handler.func(call)
            except TimeoutError:
                if not scope.expired():
                    raise
                status, message = Status.DEADLINE_EXCEEDED, "deadline exceeded"
        except GRPCError as exc:
            status, message = exc.status, exc.message or ""
        except StreamGone as exc:
            # The text, not the exception: a log record keeps its args (a capturing handler, a queue), and the
            # exception's traceback would keep the handler's frame, and so the service's log generator, alive: its
            # ``finally`` (closing files, following) would wait for the garbage collector.
            status, message = Status.CANCELLED, str(exc)
            log.info("%s stream ended early: %s", endpoint.method, message)
        except asyncio.CancelledError:
            if isinstance(call, StreamServerCall) and call.gone:
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # our own cancel (see StreamServerCall): handled, not propagated
                status, message = Status.CANCELLED, "cancelled by the client"
            else:  # the server is stopping: tell the caller, then let the cancellation through
                await self._finish_quietly(call, Status.UNAVAILABLE, "server is stopping")
                raise
        except Exception:
            log.exception("%s handler failed (pool %s)", endpoint.method, self.pool)
            status, message = Status.UNKNOWN, protocol.GENERIC_ERROR
        finally:
            ServerCall.unbind(token)
        await self._finish_quietly(call, status, message)
        return status, message

    async def _finish_quietly(self, call: UnaryServerCall | StreamServerCall, status: Status, message: str) -> None:
        try:
            await call.finish(status, message)
        except nats.errors.Error:
            log.warning("could not send the %s reply", call.method, exc_info=True)
        except Exception:  # e.g. a reply that does not serialize: never let it kill the task silently
            log.exception("could not send the %s reply", call.method)

    async def _reject(self, endpoint: _Endpoint, msg: Msg, status: Status, message: str) -> tuple[Status, str]:
        """Answer a request that never reached a handler exactly as a handler's failure would look.

        Unary: one reply with ``Rpc-Status`` (no ``Rpc-End``). Stream: the open message, then the end
        marker, so a client sees the same sequence whether the request or the handler failed.
        """
        with contextlib.suppress(nats.errors.Error):
            if endpoint.handler.cardinality is Cardinality.UNARY_STREAM:
                # Nothing listens on this control subject: the end marker follows at once, no ack is needed.
                control = self.nc.new_inbox()
                await self.nc.publish(msg.reply, b"", headers=protocol.open_headers(control, self.stream_window))
                await self.nc.publish(msg.reply, b"", headers=protocol.end_headers(status, message))
            else:
                await self.nc.publish(msg.reply, b"", headers=protocol.status_headers(status, message))
        return status, message
