"""Connect to NATS the way a site must: any transport, any auth, and never give up.

- ``nats://``, ``tls://`` and ``wss://`` (WebSocket through a TLS-terminating proxy); TLS uses
  the system CAs or ``tls_ca_file``, with an optional client certificate.
- user/password (settings or URL), token, nkey seed file or creds file (JWT + nkey).
- The first connection is retried forever (a site may boot before the central NATS is
  reachable); reconnects after a loss use capped, jittered exponential back-off through
  nats-py's ``reconnect_to_server_handler``, with ``max_reconnect_attempts=-1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from interlink_nats.services.security.config import Role, inbox_prefix
from interlink_nats.submitters.settings import SubmitterSettings
from nats.aio.client import Client as NATS

log = logging.getLogger(__name__)


class NatsConnectError(Exception):
    """Connecting was abandoned (only when the caller asked to stop)."""


def backoff_delay(attempt: int, cap: float, base: float = 0.5) -> float:
    """Full-jitter exponential back-off: uniform in [base/2, min(cap, base·2^attempt)]."""
    ceiling = min(cap, base * (2 ** min(attempt, 16)))
    return random.uniform(min(base / 2, ceiling), ceiling)


def tls_context(settings: SubmitterSettings) -> ssl.SSLContext | None:
    needs = any(u.lower().startswith(("tls://", "wss://")) for u in settings.nats_url) or settings.tls_ca_file
    if not needs and not settings.tls_cert_file:
        return None
    ctx = ssl.create_default_context(cafile=str(settings.tls_ca_file) if settings.tls_ca_file else None)
    if settings.tls_cert_file:
        ctx.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file) if settings.tls_key_file else None)
    return ctx


def connect_options(
    settings: SubmitterSettings,
    *,
    name: str,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` (pure, so it is tested without a server)."""
    cap = settings.reconnect_wait_max

    def pick(servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        server = min(servers, key=lambda s: s.reconnects)
        return server, backoff_delay(server.reconnects, cap)

    async def error_cb(exc: Exception) -> None:
        log.warning("NATS: %s: %s", type(exc).__name__, exc)

    async def disconnected_cb() -> None:
        log.info("NATS disconnected (reconnecting with back-off unless closing)")
        if on_disconnect is not None:
            await on_disconnect()

    async def reconnected_cb() -> None:
        log.info("NATS reconnected")
        if on_reconnect is not None:
            await on_reconnect()

    opts: dict[str, Any] = {
        "servers": list(settings.nats_url),
        "name": name,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_to_server_handler": pick,
        "connect_timeout": settings.nats_connect_timeout,
        "drain_timeout": settings.drain_timeout,
        "error_cb": error_cb,
        "disconnected_cb": disconnected_cb,
        "reconnected_cb": reconnected_cb,
        "ping_interval": 20,
        "max_outstanding_pings": 3,
    }
    ctx = tls_context(settings)
    if ctx is not None:
        opts["tls"] = ctx
    opts["inbox_prefix"] = settings.nats_inbox_prefix or inbox_prefix(Role.POOL, settings.pool)
    if settings.nats_user:
        opts["user"] = settings.nats_user
        if settings.nats_password is not None:
            opts["password"] = settings.nats_password.get_secret_value()
    if settings.nats_token is not None:
        opts["token"] = settings.nats_token.get_secret_value()
    if settings.nats_nkey_seed_file is not None:
        opts["nkeys_seed"] = str(settings.nats_nkey_seed_file)
    if settings.nats_creds_file is not None:
        opts["user_credentials"] = str(settings.nats_creds_file)
    return opts


async def connect(
    settings: SubmitterSettings,
    *,
    name: str,
    stop: asyncio.Event | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> NATS:
    """Connect, retrying forever (nats-py loops itself with ``max_reconnect_attempts=-1``).

    Returns once connected; raises NatsConnectError if ``stop`` is set first. Errors that
    retrying cannot fix (a malformed URL, an unreadable creds file) are raised at once.
    """
    opts = connect_options(settings, name=name, on_disconnect=on_disconnect, on_reconnect=on_reconnect)
    opts["reconnect_time_wait"] = 2
    task = asyncio.ensure_future(nats.connect(**opts))
    if stop is None:
        return await task
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise NatsConnectError("stopped before NATS was reachable")
