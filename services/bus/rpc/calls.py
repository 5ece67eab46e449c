"""Server side of one call: the stream object a generated ``__rpc_*`` handler talks to.

Generated handlers only use ``recv_message()`` and ``send_message()``. Service code that needs
the caller's deadline or metadata reads ``current_call()`` (set for the handler's task).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import Deadline

from . import protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

_current: contextvars.ContextVar[ServerCall] = contextvars.ContextVar("interlink_nats_rpc_call")


def current_call() -> ServerCall:
    """The call being handled by this task; raises LookupError outside a handler."""
    return _current.get()


class StreamGone(Exception):
    """The client of a server stream cancelled, vanished or stopped acking: stop producing."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """One request as the server received it, before it knows whether the reply is unary or a stream."""

    nc: NATS
    msg: Msg
    request: Any
    method: str
    pool: str
    deadline: Deadline | None


class ServerCall:
    """What every call exposes to handlers: the request, the caller's metadata and deadline."""

    def __init__(self, incoming: Incoming) -> None:
        self._nc = incoming.nc
        self._reply = incoming.msg.reply
        self._request = incoming.request
        self._headers = incoming.msg.headers
        self.method = incoming.method
        self.pool = incoming.pool
        self.deadline = incoming.deadline
        self._metadata: dict[str, str | bytes] | None = None

    @property
    def metadata(self) -> dict[str, str | bytes]:
        """The caller's metadata (decoded on first use: most handlers never look)."""
        if self._metadata is None:
            self._metadata = protocol.decode_metadata(self._headers)
        return self._metadata

    def time_remaining(self) -> float | None:
        """Seconds until the caller gives up, to pass on to subprocesses and I/O; None = no deadline."""
        return None if self.deadline is None else self.deadline.time_remaining()

    async def recv_message(self) -> Any:
        return self._request

    def bind(self) -> contextvars.Token[ServerCall]:
        return _current.set(self)

    @staticmethod
    def unbind(token: contextvars.Token[ServerCall]) -> None:
        _current.reset(token)


class UnaryServerCall(ServerCall):
    """Keeps the reply until the handler returns, so a handler can never answer twice.

    ``encode``: the reply type's hand-coded encoder (``RpcServer(encoders=...)``), else ``SerializeToString``.
    """

    reply: bytes | None = None

    def __init__(self, incoming: Incoming, *, encode: Callable[[Any], bytes] | None = None) -> None:
        super().__init__(incoming)
        self._encode = encode

    async def send_message(self, message: Any) -> None:
        if self.reply is not None:
            raise GRPCError(Status.INTERNAL, "a unary handler sent two replies")
        self.reply = message.SerializeToString() if self._encode is None else self._encode(message)

    async def finish(self, status: Status, message: str | None) -> None:
        """Publish the reply, or the status when the handler failed."""
        if status is Status.OK and self.reply is None:
            status, message = Status.INTERNAL, "handler sent no reply"
        if status is Status.OK:
            await self._nc.publish(self._reply, self.reply or b"")
        else:
            await self._nc.publish(self._reply, b"", headers=protocol.status_headers(status, message))


class StreamServerCall(ServerCall):
    """Server stream with credit flow control.

    The server announces a private control subject and a window; it sends at most ``window``
    data messages beyond what the client has acked, then waits (up to ``idle_timeout``) for
    more credit. A cancel from the client, or a no-responders bounce when its inbox is gone,
    cancels the handler task.
    """

    def __init__(self, incoming: Incoming, *, window: int, idle_timeout: float) -> None:
        super().__init__(incoming)
        self._window = window
        self._idle_timeout = idle_timeout
        self._sent = 0
        self._acked = 0
        self._credit = asyncio.Event()
        self._control = ""
        self._control_sub: Any = None
        self._task: asyncio.Task[Any] | None = None
        self.gone = False
        """True once the client cancelled or vanished: nothing more should be sent to it."""

    async def open(self) -> None:
        """Listen for acks and cancel, then tell the client where to send them."""
        self._task = asyncio.current_task()
        self._control = self._nc.new_inbox()
        self._control_sub = await self._nc.subscribe(self._control, cb=self._on_control)
        # reply=control: if the client's inbox is already gone, nats-server bounces a 503 there.
        await self._nc.publish(
            self._reply,
            b"",
            reply=self._control,
            headers=protocol.open_headers(self._control, self._window),
        )

    async def _on_control(self, msg: Msg) -> None:
        headers = msg.headers or {}
        ack = headers.get(protocol.ACK)
        if ack is not None:
            with contextlib.suppress(ValueError):
                self._acked = max(self._acked, int(ack))
                self._credit.set()
        elif protocol.CANCEL in headers or headers.get(protocol.NATS_STATUS) == protocol.NO_RESPONDERS:
            self._client_gone()

    def _client_gone(self) -> None:
        if not self.gone:
            self.gone = True
            if self._task is not None and not self._task.done():
                self._task.cancel()

    async def send_message(self, message: Any) -> None:
        if self.gone:
            raise StreamGone("client went away")
        payload = message.SerializeToString()
        while self._sent >= self._acked + self._window:
            self._credit.clear()
            try:
                async with asyncio.timeout(self._idle_timeout):
                    await self._credit.wait()
            except TimeoutError:
                self.gone = True
                raise StreamGone(f"no credit from the client for {self._idle_timeout}s") from None
        await self._nc.publish(self._reply, payload, reply=self._control)
        self._sent += 1

    async def finish(self, status: Status, message: str | None) -> None:
        """Send the end marker (unless the client is gone) and stop listening for control."""
        self._task = None  # a late cancel must not hit the end marker
        try:
            if not self.gone:
                await self._nc.publish(self._reply, b"", headers=protocol.end_headers(status, message))
        finally:
            await self.close()

    async def close(self) -> None:
        self._task = None
        sub, self._control_sub = self._control_sub, None
        if sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
