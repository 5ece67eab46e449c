"""Client side: a grpclib-``Channel`` look-alike, so generated betterproto2 stubs run over NATS unchanged.

``ServiceStub`` only ever does ``async with channel.request(...) as stream`` followed by
``send_message(msg, end=True)`` and ``recv_message()`` (unary) or ``async for`` (server stream);
that is the whole surface implemented here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import nats.errors
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import Deadline
from interlink_nats.kernel.subjects import route_to_subject, validate_pool

from . import protocol
from .connection_shared import FailoverWatch, Replies, expire

if TYPE_CHECKING:
    from interlink_nats.gen.interlink_nats.v1 import SubmitterServiceStub
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

log = logging.getLogger(__name__)

_FOREVER = 365 * 24 * 3600.0
"""nats-py's request() needs a number; a call with no deadline waits this long."""


class Message(Protocol):
    """What the channel needs of a message: betterproto2 and google-protobuf both fit."""

    def SerializeToString(self) -> bytes: ...


R = TypeVar("R")


class NatsChannel:
    """Stands in for ``grpclib.client.Channel``: ``SubmitterServiceStub(NatsChannel(nc, pool="a"))``.

    Every call goes to ``<route with / → .>.<pool>``, where the pool's submitters listen in one
    queue group. ``timeout`` is the default deadline (seconds) of calls that pass neither
    ``timeout=`` nor ``deadline=``; ``None`` means calls wait forever. The NATS connection stays
    the caller's to close.
    """

    def __init__(self, nc: NATS, pool: str, *, timeout: float | None = 10.0, stream_window: int | None = None) -> None:
        if stream_window is not None and stream_window < 1:
            raise ValueError("stream_window must be ≥ 1")
        self.nc = nc
        self.pool = validate_pool(pool)
        self.timeout = timeout
        self.stream_window = stream_window
        """Most stream messages the server may send ahead of what our caller consumed (None: the server's)."""
        self._subjects: dict[str, str] = {}

    def subject(self, route: str) -> str:
        """Subject of one route for this pool (cached: it is computed on every call otherwise)."""
        subject = self._subjects.get(route)
        if subject is None:
            subject = self._subjects[route] = route_to_subject(route, self.pool)
        return subject

    def request(
        self,
        name: str,
        cardinality: Cardinality,
        request_type: type[Any],
        reply_type: type[R],
        *,
        timeout: float | None = None,
        deadline: Deadline | None = None,
        metadata: protocol.MetadataLike | None = None,
    ) -> UnaryCall[R] | StreamCall[R]:
        """Open one call; the signature is grpclib's, so stubs pass their kwargs straight through."""
        remaining = self._remaining(timeout, deadline)
        headers: protocol.Headers = {}
        if remaining is not None:
            headers[protocol.TIMEOUT] = protocol.encode_timeout(remaining)
        protocol.encode_metadata(metadata, headers)
        subject = self.subject(name)
        if cardinality is Cardinality.UNARY_UNARY:
            return UnaryCall(self, subject, reply_type, remaining, headers or None)
        if cardinality is Cardinality.UNARY_STREAM:
            if self.stream_window is not None:
                headers[protocol.WINDOW] = str(self.stream_window)
            return StreamCall(self, subject, reply_type, remaining, headers or None)
        raise GRPCError(Status.UNIMPLEMENTED, f"{cardinality.name} calls are not supported over NATS")

    async def unary(
        self,
        name: str,
        payload: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the call's deadline, sent to the server (as the stubs')
        resend_every_s: float | None = None,
    ) -> bytes:
        """One unary call with the request already encoded; the reply's bytes, errors raised as by the stubs.

        For a hot path that writes and reads its few fields itself rather than through betterproto2
        (the gateway's Submit, see ``services/gateway/submit_wire.py``): the same subject, headers and
        retries as ``stub.method(request)``, so the wire cannot tell the two apart.

        ``resend_every_s``: a request not answered this long is sent again, to the same reply subject, until
        its deadline (see :class:`UnaryCall`). Only for a method whose repeat joins the call in progress.
        """
        remaining = self._remaining(timeout, None)
        headers = {protocol.TIMEOUT: protocol.encode_timeout(remaining)} if remaining is not None else None
        call: UnaryCall[bytes] = UnaryCall(self, self.subject(name), bytes, remaining, headers)
        call._payload = payload
        call._resend_every_s = resend_every_s
        return await call.recv_bytes()

    def _remaining(self, timeout: float | None, deadline: Deadline | None) -> float | None:
        """Seconds left for the call: the tighter of timeout and deadline, else the channel default."""
        if deadline is not None:
            left = deadline.time_remaining()
            return left if timeout is None else min(left, timeout)
        return self.timeout if timeout is None else timeout

    def close(self) -> None:
        """grpclib's Channel has it; the NATS connection belongs to the caller, so nothing to do."""

    def __repr__(self) -> str:
        return f"NatsChannel(pool={self.pool!r}, timeout={self.timeout!r})"


class _Call:
    """What unary and stream calls share: the async-context shape the stub expects."""

    def __init__(
        self,
        channel: NatsChannel,
        subject: str,
        reply_type: type[R],
        timeout: float | None,
        headers: protocol.Headers | None,
    ) -> None:
        self._channel = channel
        self._nc = channel.nc
        self._subject = subject
        self._reply_type: Any = reply_type
        self._timeout = timeout
        self._headers = headers
        self._started()

    def _started(self) -> None:
        """Per-call state of a subclass (a stream's queue and credit), set when the call opens."""

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def _parse(self, data: bytes) -> Any:
        try:
            return self._reply_type.FromString(data)
        except Exception:
            protocol.protocol_error(f"reply is not a valid {self._reply_type.__name__}")

    async def send_request(self, *, end: bool = False) -> None:
        """grpclib sends headers separately; here they travel with the request message."""

    async def end(self) -> None:
        """Client-streaming is not supported, so there is nothing to half-close."""


class _ServerLost(Exception):
    """Our connection moved to another server while the call waited: its reply will never come."""


class UnaryCall(_Call, Generic[R]):
    """One request-reply through the connection's shared reply inbox (no per-call subscription).

    When the connection fails over to another server while the call waits (its server was lost),
    the reply is gone with that server, so the request is sent again at once rather than waiting out
    the deadline. That is safe because every unary SubmitterService method is idempotent (``Submit``
    by pod UID, joining a Submit still in progress; ``Cancel`` of a cancelled job; the reads). A
    request or reply lost with the *pool's* node is not seen here: only a call given ``_resend_every_s``
    (the gateway's Submit, whose repeat joins the submission in progress and costs the pool a lookup) is
    sent again while it waits, so such a loss costs that long rather than the whole deadline. Other calls
    wait out their deadline (the caller retries, as interLink does): resending a slow read on a loaded pool
    would double its work.
    """

    _payload: bytes | None = None
    _resend_every_s: float | None = None

    async def send_message(self, message: Message, *, end: bool = False) -> None:
        # Serialize now, send in recv_message: nc.request() does both halves in one step.
        self._payload = message.SerializeToString()

    async def recv_message(self) -> R:
        result: R = self._parse(await self.recv_bytes())
        return result

    async def recv_bytes(self) -> bytes:
        """The reply's body, once it came with no error status."""
        if self._payload is None:
            raise GRPCError(Status.INTERNAL, "recv_message() before send_message()")
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + (_FOREVER if self._timeout is None else self._timeout)
        retried = False
        while True:
            timeout = deadline_at - loop.time()
            if timeout <= 0:
                raise protocol.deadline_exceeded()
            try:
                msg = await self._request(budget=timeout)
                break
            except _ServerLost:
                log.info("%s: NATS connection failed over while waiting; sending again", self._subject)
                continue
            except nats.errors.NoRespondersError as exc:
                if retried:
                    raise protocol.unavailable(self._channel.pool) from exc
                retried = True
                await _settle(self._nc, deadline_at - loop.time(), self._channel.pool)
            except nats.errors.Error as exc:
                raise protocol.translate_nats_error(exc, self._channel.pool) from exc
        if msg.headers:
            protocol.raise_for_status(msg.headers)
        return msg.data

    async def _request(self, *, budget: float) -> Msg:
        """Publish and wait for the reply on the connection's shared inbox; abandoned with :class:`_ServerLost`
        when our connection reconnects meanwhile, with nats-py's TimeoutError when ``budget`` runs out.

        One future, one timer and two callbacks per call: no task of its own, no ``asyncio.wait`` and no
        ``wait_for`` (what ``nc.request`` plus a race against the failover cost, P1).
        """
        assert self._payload is not None
        replies = Replies.of(self._nc)
        inbox, token, reply = await replies.open()
        watch = FailoverWatch.of(self._nc)
        failover = watch.next()  # taken with the send, in one step: a reconnect after it resolves it

        def lost(_: asyncio.Future[None]) -> None:
            if not reply.done():
                reply.set_exception(_ServerLost())

        failover.add_done_callback(lost)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(budget, expire, reply)
        every = self._resend_every_s
        resend = None if every is None or every >= budget else _Resend(self, inbox, loop.time() + budget, every)
        try:
            await self._nc.publish(self._subject, self._payload, reply=inbox, headers=self._headers)
            msg = await reply
        finally:
            timer.cancel()
            if resend is not None:
                resend.stop()
            failover.remove_done_callback(lost)
            replies.close(token)
            watch.release()
        if msg.headers and msg.headers.get(protocol.NATS_STATUS) == protocol.NO_RESPONDERS:
            raise nats.errors.NoRespondersError
        return msg


class _Resend:
    """Sends a waiting unary request again every ``every`` seconds until it is answered (or its deadline), to
    the same reply subject: the first reply resolves the call and a later one is dropped (``Replies``). Each
    copy carries the time left as its deadline. Timers, and a task only when a copy is sent (rarely)."""

    def __init__(self, call: UnaryCall[Any], inbox: str, deadline_at: float, every: float) -> None:
        self._call, self._inbox, self._deadline_at, self._every = call, inbox, deadline_at, every
        self._loop = asyncio.get_running_loop()
        self._sent: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(every, self._due)

    def _due(self) -> None:
        left = self._deadline_at - self._loop.time()
        if left <= 0:
            self._timer = None
            return
        if self._sent is None or self._sent.done():
            self._sent = asyncio.ensure_future(self._send(left))
        self._timer = self._loop.call_later(self._every, self._due) if left > self._every else None

    async def _send(self, left: float) -> None:
        call = self._call
        assert call._payload is not None
        headers = dict(call._headers or {})
        headers[protocol.TIMEOUT] = protocol.encode_timeout(left)
        log.info("%s: no reply yet; sending it again (%.1f s left)", call._subject, left)
        with contextlib.suppress(nats.errors.Error):  # the first copy still stands; the deadline decides
            await call._nc.publish(call._subject, call._payload, reply=self._inbox, headers=headers)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._sent is not None and not self._sent.done():
            self._sent.cancel()


class StreamCall(_Call, Generic[R]):
    """A server-streaming call with credit flow control (see the package docstring).

    The reply inbox is our own subscription; its callback only queues, so the server's window
    bounds how much can pile up here however slowly the caller iterates.
    """

    def _started(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline_at = None if self._timeout is None else loop.time() + self._timeout
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._sub: Any = None
        self._control: str | None = None
        self._ack_every = 1
        self._consumed = 0
        self._acked = 0
        self._done = False
        self._retried = False
        self._payload: bytes | None = None
        self._inbox = ""

    async def send_message(self, message: Message, *, end: bool = False) -> None:
        self._payload = message.SerializeToString()
        self._inbox = self._nc.new_inbox()
        try:
            self._sub = await self._nc.subscribe(self._inbox, cb=self._on_reply)
            await self._nc.publish(self._subject, self._payload, reply=self._inbox, headers=self._headers)
        except nats.errors.Error as exc:
            self._done = True
            raise protocol.translate_nats_error(exc, self._channel.pool) from exc

    async def _republish(self) -> None:
        """Second and last try after a no-responders bounce (see ``_settle``)."""
        assert self._payload is not None
        left = _FOREVER if self._deadline_at is None else self._deadline_at - asyncio.get_running_loop().time()
        await _settle(self._nc, left, self._channel.pool)
        try:
            await self._nc.publish(self._subject, self._payload, reply=self._inbox, headers=self._headers)
        except nats.errors.Error as exc:
            self._done = True
            raise protocol.translate_nats_error(exc, self._channel.pool) from exc

    async def _on_reply(self, msg: Msg) -> None:
        self._queue.put_nowait(msg)

    async def recv_message(self) -> R | None:
        """The next item, or None after the server's end marker (which may raise its status)."""
        while not self._done:
            msg = await self._next()
            headers = msg.headers
            if not headers:  # data messages carry no headers
                self._consumed += 1
                if self._control is not None and self._consumed - self._acked >= self._ack_every:
                    await self._ack()
                result: R = self._parse(msg.data)
                return result
            if protocol.END in headers:
                self._done = True
                protocol.raise_for_status(headers)
                return None
            if protocol.CONTROL in headers:
                self._opened(headers)
                continue
            if headers.get(protocol.NATS_STATUS) == protocol.NO_RESPONDERS:
                if not self._retried and self._payload is not None:
                    self._retried = True
                    await self._republish()
                    continue
                self._done = True
                raise protocol.unavailable(self._channel.pool)
            protocol.protocol_error(f"unexpected stream message with headers {sorted(headers)}")
        return None

    def _opened(self, headers: dict[str, str]) -> None:
        self._control = headers[protocol.CONTROL]
        try:
            window = int(headers.get(protocol.WINDOW, "1"))
        except ValueError:
            window = 1
        # Ack at half the window so the server rarely stalls while the caller keeps up.
        self._ack_every = max(1, window // 2)

    async def _next(self) -> Msg:
        if self._sub is None:
            raise GRPCError(Status.INTERNAL, "recv_message() before send_message()")
        try:
            async with asyncio.timeout_at(self._deadline_at):
                return await self._queue.get()
        except TimeoutError:
            await self._cancel_remote()
            raise protocol.deadline_exceeded() from None

    async def _ack(self) -> None:
        assert self._control is not None
        self._acked = self._consumed
        try:
            await self._nc.publish(self._control, b"", headers={protocol.ACK: str(self._consumed)})
        except nats.errors.Error as exc:
            self._done = True
            raise protocol.translate_nats_error(exc, self._channel.pool) from exc

    async def _cancel_remote(self) -> None:
        """Tell the server to stop; best effort (if we never learnt its control subject,
        its next publish to our vanished inbox bounces as no-responders and stops it too)."""
        if self._done:
            return
        self._done = True
        while self._control is None and not self._queue.empty():
            headers = self._queue.get_nowait().headers
            if headers and protocol.CONTROL in headers:
                self._opened(headers)
        if self._control is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._nc.publish(self._control, b"", headers={protocol.CANCEL: "1"})

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._cancel_remote()
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    def __aiter__(self) -> StreamCall[R]:
        return self

    async def __anext__(self) -> R:
        message = await self.recv_message()
        if message is None:
            raise StopAsyncIteration
        return message


async def _settle(nc: NATS, budget: float, pool: str) -> None:
    """Flush before retrying a no-responders call.

    nats-server can answer 503 for a subscription that another connection registered (and
    flushed) an instant earlier; a round trip on our own connection is enough to see it.
    Retrying is safe: a 503 means no handler received the request.
    """
    if budget <= 0:
        raise protocol.deadline_exceeded()
    try:
        await nc.flush(timeout=min(budget, 5.0))  # type: ignore[arg-type]  # nats-py annotates int; it takes seconds
    except nats.errors.Error as exc:
        raise protocol.translate_nats_error(exc, pool) from exc


def submitter_client(
    nc: NATS, pool: str, *, timeout: float | None = 10.0, stream_window: int | None = None
) -> SubmitterServiceStub:
    """A ready ``SubmitterServiceStub`` for one pool (imported lazily: gen/ is heavy to import)."""
    from interlink_nats.gen.interlink_nats.v1 import SubmitterServiceStub

    # betterproto2 types the stub's channel as grpclib's Channel class; NatsChannel provides what it calls.
    return SubmitterServiceStub(NatsChannel(nc, pool, timeout=timeout, stream_window=stream_window))  # type: ignore[arg-type]
