"""How every interlink-nats process connects to NATS: one settings model, one ``connect``.

Sites dial out only, over ``nats://``, ``tls://`` or ``wss://`` (WebSocket through a TLS
terminating proxy); auth by user/password, token, nkey seed or creds file. Reconnection is
forever with back-off: a site that loses its network must come back by itself.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import nats
from nats.aio.client import Client as NatsClient
from pydantic import BaseModel, Field, SecretStr
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, stop_never, wait_exponential

log = logging.getLogger(__name__)


class NatsConnectionSettings(BaseModel):
    """Where and how to reach NATS. Secrets are ``SecretStr`` so they never print."""

    url: str = Field(
        "nats://127.0.0.1:4222", description="nats://, tls://, ws:// or wss:// URL (comma-separated for a cluster)"
    )
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: Path | None = Field(None, description="file holding an nkey seed (SU...)")
    creds_file: Path | None = Field(None, description="a .creds file (JWT + seed)")
    tls_ca_file: Path | None = Field(None, description="CA bundle to verify the server (tls:// and wss://)")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    inbox_prefix: str = Field(
        "_INBOX", description="reply inbox prefix; with `nats-config` permissions each identity has its own"
    )
    connect_timeout_s: float = 5.0
    reconnect_wait_s: float = 2.0
    max_reconnect_wait_s: float = 30.0

    def servers(self) -> list[str]:
        return [part.strip() for part in self.url.split(",") if part.strip()]

    def ssl_context(self) -> ssl.SSLContext | None:
        if not any(s.startswith(("tls://", "wss://")) for s in self.servers()) and self.tls_ca_file is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls_ca_file) if self.tls_ca_file else None)
        if self.tls_cert_file and self.tls_key_file:
            context.load_cert_chain(str(self.tls_cert_file), str(self.tls_key_file))
        return context


async def connect(settings: NatsConnectionSettings, name: str, *, first_connect_retries: int = -1) -> NatsClient:
    """Connect with infinite reconnects; ``first_connect_retries=-1`` keeps trying at start too."""
    async def on_error(exc: Exception) -> None:
        log.warning("nats (%s): %s", name, exc)

    async def on_disconnected() -> None:
        log.warning("nats (%s): disconnected", name)

    async def on_reconnected() -> None:
        log.info("nats (%s): reconnected", name)

    options: dict[str, object] = {
        "servers": settings.servers(),
        "name": name,
        "connect_timeout": settings.connect_timeout_s,
        "reconnect_time_wait": settings.reconnect_wait_s,
        "max_reconnect_attempts": -1,
        "allow_reconnect": True,
        "error_cb": on_error,
        "inbox_prefix": settings.inbox_prefix,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
    }
    if settings.user:
        options["user"] = settings.user
        options["password"] = settings.password.get_secret_value() if settings.password else ""
    if settings.token:
        options["token"] = settings.token.get_secret_value()
    if settings.nkey_seed_file:
        options["nkeys_seed"] = str(settings.nkey_seed_file)
    if settings.creds_file:
        options["user_credentials"] = str(settings.creds_file)
    context = settings.ssl_context()
    if context is not None:
        options["tls"] = context
    retrying = AsyncRetrying(
        retry=retry_if_exception_type((OSError, nats.errors.NoServersError, TimeoutError)),
        wait=wait_exponential(multiplier=settings.reconnect_wait_s / 2, max=settings.max_reconnect_wait_s),
        stop=stop_never if first_connect_retries < 0 else stop_after_attempt(first_connect_retries + 1),
        before_sleep=lambda state: log.warning(
            "nats (%s): cannot connect yet (%s), retrying", name, state.outcome.exception() if state.outcome else ""
        ),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await nats.connect(**options)  # type: ignore[arg-type]
    raise AssertionError("unreachable")  # pragma: no cover
