"""The submitter's NATS connection: its flat settings (``--nats-url``, ``INTERLINK_SUBMITTER_NATS_*``)
mapped onto the one connection model every process shares (``kernel.nats_connection``).

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
    return nats_connection.NatsConnectionSettings(
        url=",".join(settings.nats_url),
        user=settings.nats_user,
        password=settings.nats_password,
        token=settings.nats_token,
        nkey_seed_file=settings.nats_nkey_seed_file,
        creds_file=settings.nats_creds_file,
        tls_ca_file=settings.tls_ca_file,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
        inbox_prefix=settings.nats_inbox_prefix or inbox_prefix(Role.POOL, settings.pool),
        connect_timeout_s=settings.nats_connect_timeout,
        reconnect_wait_max_s=settings.reconnect_wait_max,
        drain_timeout_s=settings.drain_timeout,
    )


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
