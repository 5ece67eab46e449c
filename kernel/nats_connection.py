"""How every interlink-nats process connects to NATS: one settings model, one TLS builder, one ``connect``.

- ``nats://``, ``tls://`` and ``wss://`` (WebSocket through a TLS-terminating proxy); TLS uses
  the system CAs or ``tls_ca_file``, with an optional client certificate.
- user/password, token, nkey seed file or creds file (JWT + nkey).
- The first connection is retried forever (a site may boot before the central NATS is
  reachable); reconnects after a loss use capped, jittered exponential back-off through
  nats-py's ``reconnect_to_server_handler``, with ``max_reconnect_attempts=-1``, trying the
  server just lost last.
- The reply inbox prefix is a setting: the permissions written by ``interlink-nats nats-config``
  let each identity read replies only under its own prefix (``kernel.subjects.inbox_prefix``).
- :func:`credential_options` turns one ``nats-config`` credential (seed file, role, CA) into the
  authentication part of the options, for clients that bring their own URL and behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # nkeys ships no type hints (no py.typed, no stubs)
from nats.aio.client import Client as NatsClient
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from .checks import FAILED, OK, Check
from .subjects import EVENTS_STREAM, INBOX_ROOT, SUBMITTER_SERVICE, Role, inbox_prefix
from .tasks import cancel_until_done

log = logging.getLogger(__name__)


class NatsConnectError(Exception):
    """Connecting was abandoned (only when the caller asked to stop)."""


class BadCredentialFile(ValueError):
    """A credential file that cannot work (no valid nkey seed): bad input, retrying cannot fix it (exit 2)."""

    exit_code = 2


def check_private(path: Path, what: str) -> None:
    """Refuse a credential file of ours that others may read or write, as ssh refuses such a private key.

    As ssh does, only a file owned by this process's user is judged: ``root:interlink 0640`` (root owns it,
    the service's group reads it) and a Kubernetes Secret volume are the admin's choice, not an accident."""
    try:
        info = path.stat()
    except OSError as exc:
        raise BadCredentialFile(f"{what} {path}: {exc.strerror or exc}") from None
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        raise BadCredentialFile(
            f"{what} {path}: permissions {info.st_mode & 0o777:04o} are too open (others may read it): "
            f"chmod 600 {path}, as ssh asks of a private key"
        )


def check_seed_file(seed_file: Path) -> None:
    """Fail at start, naming the file, when it holds no nkey seed (else nats-py fails on every reconnect)."""
    check_private(seed_file, "nkey seed file")
    try:
        _public_key(seed_file)
    except OSError as exc:
        raise BadCredentialFile(f"nkey seed file {seed_file}: {exc.strerror or exc}") from None
    except (ValueError, nkeys.NkeysError) as exc:
        raise BadCredentialFile(f"nkey seed file {seed_file}: not an nkey seed (SU…): {exc}") from None


def check_credentials(settings: NatsConnectionSettings) -> None:
    """The credential files the settings name are private and hold what they must (BadCredentialFile: exit 2)."""
    if settings.nkey_seed_file is not None:
        check_seed_file(settings.nkey_seed_file)
    if settings.creds_file is not None:
        check_private(settings.creds_file, "creds file")


def credential_problem(settings: NatsConnectionSettings) -> str | None:
    """What is now wrong with the running credential files (the NATS client reads them again at each
    reconnection, so a reload says so before a reconnect fails), else None."""
    try:
        check_credentials(settings)
    except ValueError as exc:  # BadCredentialFile
        return f"{exc}: the next reconnection to NATS will fail"
    return None


class NatsConnectionSettings(BaseModel):
    """Where and how to reach NATS: the ``nats`` section of every process's settings (flags ``--nats-*``,
    ``INTERLINK_<PROCESS>_NATS__<FIELD>``). Secrets are ``SecretStr`` so they never print."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        "nats://127.0.0.1:4222", description="nats://, tls://, ws:// or wss:// URL (comma-separated for a cluster)"
    )
    user: str | None = Field(None, description="user name (its password only from env or the config file)")
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: Path | None = Field(None, description="file holding an nkey seed (SU...)")
    creds_file: Path | None = Field(None, description="a .creds file (JWT + seed)")
    tls_ca_file: Path | None = Field(None, description="CA bundle to verify the server (tls:// and wss://)")
    tls_cert_file: Path | None = Field(None, description="client certificate, where the server asks for one")
    tls_key_file: Path | None = Field(None, description="the client certificate's key")
    inbox_prefix: str = Field(
        INBOX_ROOT, description="reply inbox prefix; with `nats-config` permissions each identity has its own"
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="deadline of one connection attempt")
    reconnect_wait_max_s: float = Field(30.0, gt=0, description="cap of the jittered reconnect back-off")
    drain_timeout_s: float = Field(20.0, gt=0, description="how long a stopping process drains its subscriptions")

    @field_validator("url", mode="before")
    @classmethod
    def _joined(cls, value: object) -> object:
        """A cluster's servers as a list (config file, repeated ``--nats-url``) or comma-separated."""
        if isinstance(value, list | tuple):
            return ",".join(str(item) for item in value)
        return value

    @field_validator("url")
    @classmethod
    def _schemes(cls, value: str) -> str:
        servers = [part.strip() for part in value.split(",") if part.strip()]
        for url in servers:
            scheme = url.split("://", 1)[0].lower() if "://" in url else ""
            if scheme not in ("nats", "tls", "ws", "wss"):
                raise ValueError(f"NATS URL {url!r} must start with nats://, tls://, ws:// or wss://")
        if not servers:
            raise ValueError("at least one NATS URL is needed")
        return ",".join(servers)

    def servers(self) -> list[str]:
        return [part.strip() for part in self.url.split(",") if part.strip()]

    def with_default_inbox(self, prefix: str) -> NatsConnectionSettings:
        """These settings with ``prefix`` as reply inbox unless one was configured (a pool's is its own)."""
        return self if "inbox_prefix" in self.model_fields_set else self.model_copy(update={"inbox_prefix": prefix})


_SUBSCRIBE_DENIED = re.compile(r'permissions violation for subscription to "?([^"\s]+)', re.IGNORECASE)


def denied_subscription(exc: Exception) -> str | None:
    """The subject of a "Permissions Violation for Subscription" the server reported, else None."""
    match = _SUBSCRIBE_DENIED.search(str(exc))
    return match.group(1) if match else None


_VIOLATION = re.compile(r'permissions violation for (subscription|publish) to "?([^"\s]+)', re.IGNORECASE)


def permission_violation(exc: Exception) -> tuple[str, str] | None:
    """("subscribing to"/"publishing to", subject) of a permissions violation the server reported, else None."""
    match = _VIOLATION.search(str(exc))
    if match is None:
        return None
    return ("subscribing to" if match.group(1).lower() == "subscription" else "publishing to"), match.group(2)


_KNOWN_NAMES = (
    *(f"$JS.API.{verb}" for verb in ("STREAM.CREATE", "STREAM.INFO", "STREAM.UPDATE", "CONSUMER.CREATE")),
    *(f"$JS.API.{verb}" for verb in ("CONSUMER.DURABLE.CREATE", "CONSUMER.INFO", "CONSUMER.MSG.NEXT", "INFO")),
    "$JS.ACK",
    *(f"$SRV.{verb}" for verb in ("PING", "INFO", "STATS")),
    EVENTS_STREAM,
    SUBMITTER_SERVICE,
)
"""Names in subjects this code publishes to (JetStream's API, the micro services' pings, the events stream):
restored as written in a refused publish too."""


def as_subscribed(text: str, nc: NatsClient | None) -> str:
    """``text`` with each of ``nc``'s subscription subjects spelled as subscribed: nats-py lower-cases the
    server's whole ``-ERR`` line, so ``...SubmitterService.Submit.a`` would print as ``...submitterservice...``."""
    subs = getattr(nc, "_subs", None) or {}  # nats-py keeps its subscriptions there (sid → Subscription)
    for subject in {*(sub.subject for sub in subs.values()), *_KNOWN_NAMES}:
        text = re.sub(re.escape(subject), subject.replace("\\", "\\\\"), text, flags=re.IGNORECASE)
    return text


_SSL_REPR = re.compile(r" ssl:(<[^>]*>|default|None|True|False)")
"""aiohttp's connection errors (wss://) end with ``ssl:<ssl.SSLContext object at 0x…>``: noise in a log line."""


def identity_of(settings: NatsConnectionSettings) -> str:
    """Who the settings authenticate as, for error messages (a public key or a name, never a secret)."""
    if settings.nkey_seed_file is not None:
        try:
            return f"nkey {_public_key(settings.nkey_seed_file)} (seed file {settings.nkey_seed_file})"
        except (OSError, ValueError, nkeys.NkeysError):
            return f"the nkey in {settings.nkey_seed_file}"
    if settings.creds_file is not None:
        return f"the creds file {settings.creds_file}"
    if settings.user:
        return f"user {settings.user!r}"
    if settings.token is not None:
        return "a token"
    return "no credentials (anonymous)"


def _public_key(seed_file: Path) -> str:
    pair = nkeys.from_seed(bytearray(seed_file.read_text().strip().encode()))
    try:
        return str(pair.public_key.decode())
    finally:
        pair.wipe()


def connected_server(nc: NatsClient | None) -> str | None:
    """The server a client is connected to now (``nats://host:port``, no credentials), for health and logs.

    With a list of servers the client fails over between them; this says which one it is on.
    """
    if nc is None or not nc.is_connected or nc.connected_url is None:
        return None
    url = nc.connected_url
    return f"{url.scheme}://{url.hostname}:{url.port}" if url.port else f"{url.scheme}://{url.hostname}"


def backoff_delay(attempt: int, cap: float, base: float = 0.5) -> float:
    """Full-jitter exponential back-off: uniform in [base/2, min(cap, base·2^attempt)]."""
    ceiling = min(cap, base * (2 ** min(attempt, 16)))
    return random.uniform(min(base / 2, ceiling), ceiling)


LEADER_RETRY_BASE_S = 0.05
LEADER_RETRY_CAP_S = 0.25
"""While a JetStream stream or consumer has no leader (its node lost, the survivors not yet through their
election), the servers answer a publish or a pull at once with "no responders": asking again every
0.05-0.25 s costs a few tiny requests a second and finds the new leader within a quarter second of its
election, where a poll interval (5 s by default) would add up to that much to every node loss."""


def leader_retry_delay(attempt: int) -> float:
    """How long to wait before the ``attempt``-th (0-based) retry of a JetStream call that found no leader."""
    return backoff_delay(attempt, LEADER_RETRY_CAP_S, LEADER_RETRY_BASE_S)


def client_tls_context(
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    *,
    ca_data: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context that verifies the server (hostname + chain), TLS 1.2 or later.

    The CA comes from ``ca_file`` or ``ca_data`` (PEM text, e.g. a Secret's ``ca.crt``); with neither,
    the system trust store is used (a public CA in front of the WebSocket listener).
    ``cert_file``/``key_file`` add a client certificate for mutual TLS.
    """
    ctx = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=str(ca_file) if ca_file else None, cadata=ca_data or None
    )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return ctx


def tls_context(settings: NatsConnectionSettings) -> ssl.SSLContext | None:
    """A verifying client context when the URL or settings ask for TLS; None for plain nats://."""
    needs = any(u.lower().startswith(("tls://", "wss://")) for u in settings.servers()) or settings.tls_ca_file
    if not needs and not settings.tls_cert_file:
        return None
    return client_tls_context(settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)


_ANY = ("0.0.0.0", "::", "")
"""The hosts a server's INFO names when it listens on every address."""


def connect_options(
    settings: NatsConnectionSettings,
    *,
    name: str,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    client: Callable[[], NatsClient | None] = lambda: None,
    on_error: Callable[[Exception], Awaitable[bool | None]] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` (pure, so it is tested without a server).

    ``client`` returns the connection once made, so the reconnect log can name the server it landed on.
    ``on_error`` sees each asynchronous error first; when it returns True it has reported it (no log line).
    """
    cap = settings.reconnect_wait_max_s

    def pick(servers: list[Any], info: dict[str, Any]) -> tuple[Any, float]:
        # Of the servers tried least, not the one just lost (``info`` is its INFO): a killed node refuses at
        # once, but a host gone from the network holds the attempt for ``connect_timeout_s``.
        def lost(server: Any) -> bool:
            return bool(server.uri.port == info.get("port") and info.get("host") in (server.uri.hostname, *_ANY))

        server = min(servers, key=lambda s: (s.reconnects, lost(s)))
        return server, backoff_delay(server.reconnects, cap)

    async def error_cb(exc: Exception) -> None:
        if on_error is not None and await on_error(exc):
            return  # the caller reports it (e.g. one start-up error naming every refused subject)
        log.warning("NATS (%s): %s: %s", name, type(exc).__name__, as_subscribed(_SSL_REPR.sub("", str(exc)), client()))

    async def disconnected_cb() -> None:
        made = client()
        if made is None or not (made.is_closed or made.is_draining):  # a stop we asked for is no news
            log.info("NATS (%s) disconnected; reconnecting with back-off", name)
        if on_disconnect is not None:
            await on_disconnect()

    async def reconnected_cb() -> None:
        log.info("NATS (%s) reconnected to %s", name, connected_server(client()) or "?")
        if on_reconnect is not None:
            await on_reconnect()

    opts: dict[str, Any] = {
        "servers": settings.servers(),
        "name": name,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_to_server_handler": pick,
        "connect_timeout": settings.connect_timeout_s,
        "drain_timeout": settings.drain_timeout_s,
        "error_cb": error_cb,
        "disconnected_cb": disconnected_cb,
        "reconnected_cb": reconnected_cb,
        "ping_interval": 20,
        "max_outstanding_pings": 3,
        "inbox_prefix": settings.inbox_prefix,
    }
    ctx = tls_context(settings)
    if ctx is not None:
        opts["tls"] = ctx
    if settings.user:
        opts["user"] = settings.user
        if settings.password is not None:
            opts["password"] = settings.password.get_secret_value()
    if settings.token is not None:
        opts["token"] = settings.token.get_secret_value()
    if settings.nkey_seed_file is not None:
        opts["nkeys_seed"] = str(settings.nkey_seed_file)
    if settings.creds_file is not None:
        opts["user_credentials"] = str(settings.creds_file)
    return opts


def credential_options(
    *,
    seed_file: str | Path | None = None,
    role: Role | str | None = None,
    pool: str | None = None,
    inbox: str | None = None,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    tls: bool | None = None,
) -> dict[str, Any]:
    """``nats.connect`` keyword arguments for one ``nats-config`` identity: nkey, inbox prefix, TLS.

    The nkey seed is read from its file by nats-py when it signs the server nonce (never held in
    our objects or logged). ``inbox`` overrides the prefix derived from ``role``/``pool``. ``tls``
    forces a TLS context even without a CA file (system trust store); by default one is built when a
    CA or client certificate is given. Use as ``nats.connect(url, **opts)``: the URL scheme is the caller's.
    """
    opts: dict[str, Any] = {}
    if seed_file is not None:
        path = Path(seed_file)
        if not path.is_file():
            raise FileNotFoundError(f"nkey seed file not found: {path}")
        opts["nkeys_seed"] = str(path)
    prefix = inbox
    if prefix is None and role is not None:
        prefix = inbox_prefix(Role(role), pool)
    if prefix is not None:
        opts["inbox_prefix"] = prefix
    if tls or ca_file is not None or cert_file is not None:
        opts["tls"] = client_tls_context(ca_file, cert_file, key_file)
    return opts


FIRST_CONNECT_RETRY_S = 2
"""Pause between attempts of the first connection (nats-py's ``reconnect_time_wait``)."""


async def connect(
    settings: NatsConnectionSettings,
    name: str,
    *,
    stop: asyncio.Event | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    on_error: Callable[[Exception], Awaitable[bool | None]] | None = None,
) -> NatsClient:
    """Connect, retrying forever (nats-py loops itself with ``max_reconnect_attempts=-1``).

    Returns once connected; raises NatsConnectError if ``stop`` is set first. Errors that
    retrying cannot fix (a malformed URL, an unreadable creds file) are raised at once.
    """
    check_credentials(settings)
    made: list[NatsClient] = []
    said: set[str] = set()

    async def until_connected(exc: Exception) -> bool | None:
        """Before the first connection each failed attempt is the same news: say each kind once."""
        if made:
            return await on_error(exc) if on_error is not None else None
        why = f"{type(exc).__name__}: {_SSL_REPR.sub('', str(exc))}"
        if why not in said:
            said.add(why)
            log.warning(
                "NATS (%s): cannot connect to %s (%s); trying again every %g s until it answers",
                name,
                ", ".join(settings.servers()),
                why,
                FIRST_CONNECT_RETRY_S,
            )
        return True

    opts = connect_options(
        settings,
        name=name,
        on_disconnect=on_disconnect,
        on_reconnect=on_reconnect,
        client=lambda: made[0] if made else None,
        on_error=until_connected,
    )
    opts["reconnect_time_wait"] = FIRST_CONNECT_RETRY_S
    client = NatsClient()
    task = asyncio.ensure_future(client.connect(**opts))
    if stop is not None:
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
    if stop is None or task.done():
        await task
        made.append(client)
        log.info("NATS (%s) connected to %s", name, connected_server(client))
        return client
    await cancel_until_done(task)
    await _abandon(client)
    raise NatsConnectError("stopped before NATS was reachable")


async def _abandon(client: NatsClient) -> None:
    """Close a client whose first connect was cancelled, so no half-open socket outlives the stop."""
    if client.is_closed:
        return
    closing = asyncio.ensure_future(client.close())
    await asyncio.wait({closing}, timeout=2.0)
    await cancel_until_done(closing, within_s=2.0)


async def connect_for_check(
    settings: NatsConnectionSettings,
    name: str,
    within_s: float,
    *,
    on_error: Callable[[Exception], Awaitable[bool | None]] | None = None,
) -> tuple[NatsClient | None, Check]:
    """``check`` commands' connection: connected within ``within_s`` (a client, an ok row naming who) or not (None
    and a FAILED row saying why): a check must end, where :func:`connect` retries for ever."""
    stop = asyncio.Event()
    timer = asyncio.get_running_loop().call_later(within_s, stop.set)
    try:
        nc = await connect(settings, name, stop=stop, on_error=on_error)
    except NatsConnectError:
        return None, Check("nats connect", FAILED, f"no answer from {settings.url} within {within_s:g} s")
    except Exception as exc:  # TLS, a malformed creds file: what nats-py says
        return None, Check("nats connect", FAILED, f"{settings.url}: {type(exc).__name__}: {exc}")
    finally:
        timer.cancel()
    where = nc.connected_url.netloc if nc.connected_url else settings.url
    return nc, Check("nats connect", OK, f"{where} as {identity_of(settings)}")
