"""What the unary calls of one NATS connection share: one reply inbox, one failover watch.

Kept apart from ``channel`` because it is per *connection* state (one instance per client, gone with
it), while ``channel`` is per call.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import nats.errors

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

RECONNECT_CHECK_S = 0.2
"""How often a connection with waiting calls is checked for a failover (a counter read, nothing more)."""


def expire(reply: asyncio.Future[Msg]) -> None:
    if not reply.done():
        reply.set_exception(nats.errors.TimeoutError())


_Shared = TypeVar("_Shared")
_SHARED: weakref.WeakKeyDictionary[Any, dict[object, Any]] = weakref.WeakKeyDictionary()
"""Per connection, one instance of each helper class its calls share (gone with the connection)."""


def _per_client(kind: Callable[[NATS], _Shared], nc: NATS) -> _Shared:
    """The one ``kind`` of ``nc``, made on first use.

    It gets a weak proxy of ``nc``: a value holding its own key strongly would keep every
    connection (and its helpers) alive for good.
    """
    shared = _SHARED.setdefault(nc, {})
    found = shared.get(kind)
    if found is None:
        found = shared[kind] = kind(cast("NATS", weakref.proxy(nc)))
    return cast(_Shared, found)


class Replies:
    """The unary calls' reply inbox of one connection: one wildcard subscription, a token per call.

    What ``nc.request`` does too, minus what it adds per call (a random token from the OS, a
    ``wait_for``); a counter is enough for the token, since the subscription's own prefix is random.
    nats-py subscribes it again after a reconnect.
    """

    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._prefix = ""
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._count = 0
        self._subscribing = asyncio.Lock()

    @classmethod
    def of(cls, nc: NATS) -> Replies:
        return _per_client(cls, nc)

    async def open(self) -> tuple[str, str, asyncio.Future[Msg]]:
        """A new call's reply subject, its token (for :meth:`close`) and the future its reply resolves."""
        if not self._prefix:
            async with self._subscribing:
                if not self._prefix:
                    inbox = self._nc.new_inbox()
                    await self._nc.subscribe(inbox + ".*", cb=self._on_reply)
                    self._prefix = inbox + "."
        self._count += 1
        token = f"{self._count:x}"
        reply: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[token] = reply
        return self._prefix + token, token, reply

    def close(self, token: str) -> None:
        """The call is over (answered or not): a late reply for it is dropped."""
        self._waiting.pop(token, None)

    async def _on_reply(self, msg: Msg) -> None:
        reply = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if reply is not None and not reply.done():
            reply.set_result(msg)


class FailoverWatch:
    """Resolves a shared future on a connection's next reconnect, for every call waiting on it.

    nats-py offers no per-client hook after connecting, so one timer per connection reads its
    reconnect counter (only while calls wait), instead of one timer per call. A timer, not a task:
    with one call at a time the watch starts and stops with every call, and a task costs far more
    to start and cancel than a timer handle.
    """

    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._seen = nc.stats["reconnects"]
        self._next: asyncio.Future[None] | None = None
        self._waiting = 0
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, nc: NATS) -> FailoverWatch:
        return _per_client(cls, nc)

    def next(self) -> asyncio.Future[None]:
        self._waiting += 1
        if self._next is None or self._next.done():
            self._next = asyncio.get_running_loop().create_future()
            self._seen = self._nc.stats["reconnects"]
        elif self._waiting == 1:  # nobody was waiting: count from now
            self._seen = self._nc.stats["reconnects"]
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RECONNECT_CHECK_S, self._check)
        return self._next

    def release(self) -> None:
        """The last waiting call stops the timer at once: nothing outlives the calls it watches for."""
        self._waiting -= 1
        if self._waiting == 0 and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._waiting <= 0:
            return
        count = self._nc.stats["reconnects"]
        if count != self._seen and self._next is not None and not self._next.done():
            self._seen = count
            self._next.set_result(None)
        self._timer = asyncio.get_running_loop().call_later(RECONNECT_CHECK_S, self._check)
