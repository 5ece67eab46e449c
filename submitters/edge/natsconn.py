"""The submitter's NATS connection: its ``nats`` settings section, the one connection model every process
shares (``kernel.nats_connection``; the old flat ``nats_*`` keys are aliases, see ``settings.RENAMED``).

A pool's replies arrive under ``_INBOX.pool.<pool>``, the inbox ``interlink-nats nats-config`` grants it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from interlink_nats.kernel import nats_connection
from interlink_nats.kernel.nats_connection import NatsConnectError, backoff_delay
from interlink_nats.kernel.subjects import Role, inbox_prefix
from interlink_nats.submitters.settings import SubmitterSettings
from nats.aio.client import Client as NATS

__all__ = ["NatsConnectError", "backoff_delay", "connect", "connect_options", "connection_settings"]


def connection_settings(settings: SubmitterSettings) -> nats_connection.NatsConnectionSettings:
    """The submitter's ``nats`` section, its inbox defaulting to the pool's own (``_INBOX.pool.<pool>``)."""
    return settings.nats.with_default_inbox(inbox_prefix(Role.POOL, settings.pool))


def connect_options(
    settings: SubmitterSettings,
    *,
    name: str,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    return nats_connection.connect_options(
        connection_settings(settings), name=name, on_disconnect=on_disconnect, on_reconnect=on_reconnect
    )


async def connect(
    settings: SubmitterSettings,
    *,
    name: str,
    stop: asyncio.Event | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    on_error: Callable[[Exception], Awaitable[None]] | None = None,
) -> NATS:
    return await nats_connection.connect(
        connection_settings(settings),
        name,
        stop=stop,
        on_disconnect=on_disconnect,
        on_reconnect=on_reconnect,
        on_error=on_error,
    )
