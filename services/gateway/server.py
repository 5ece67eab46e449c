"""Run a gateway: connect NATS and redis, start the Gateway, serve HTTP on TCP or a unix socket.

Signals belong to the caller (``interlink_nats.kernel.signals.run_until_signal``: SIGINT/SIGTERM set
``stop``), so a stack of several parts (``interlink-nats up``) stops them together. The gateway command
also passes ``hangups`` (SIGHUP): the configuration is re-read and what can change while serving
(``LIVE``) is applied; the rest is logged as needing a restart (``kernel.reload``). On ``stop``
the HTTP server stops accepting, in-flight requests get ``shutdown_grace_s`` to finish (a log
follow is then cut), and only then are the events consumer, NATS and redis closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import redis.asyncio as aioredis
import uvicorn
from interlink_nats.kernel.checks import FAILED, OK, Check
from interlink_nats.kernel.nats_connection import (
    as_subscribed,
    connect,
    connect_for_check,
    credential_problem,
    identity_of,
    permission_violation,
)
from interlink_nats.kernel.reload import plan_reload, refusal
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.http_edge import build_app
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodStore, RedisLike
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("interlink_nats.gateway")

DATE_TICK_S = 1.0
"""How often the HTTP server's main loop wakes while nothing asks it to stop: its Date header's resolution."""


@contextlib.asynccontextmanager
async def running_gateway(settings: GatewaySettings) -> AsyncIterator[Gateway]:
    """A started Gateway (not yet serving HTTP); closes NATS and redis on exit."""
    refused: list[tuple[str, str]] = []
    started = False

    async def on_error(exc: Exception) -> bool:
        found = permission_violation(exc)
        if found is None or started:
            return False
        refused.append((found[0], as_subscribed(found[1], nc)))
        return True  # said once, in the start's error

    nc = await connect(settings.nats, "interlink-gateway", on_error=on_error)
    await _check_credential(nc, settings, refused)
    client: aioredis.Redis | None = aioredis.from_url(settings.redis_url) if settings.redis_url else None
    # redis-py types its async commands as ``Awaitable[T] | T`` (shared with the sync client), which no
    # async protocol can match; at run time redis.asyncio's commands are coroutines, as RedisLike says.
    redis = cast(RedisLike | None, client)
    gateway = Gateway(settings=settings, nc=nc, store=PodStore(redis), redis=redis)
    resync: asyncio.Task[None] | None = None
    try:
        try:
            await gateway.start()
        except Exception:
            await _check_credential(nc, settings, refused)  # a refusal explains the failure better than a timeout
            raise
        await _check_credential(nc, settings, refused)
        started = True
        resync = asyncio.create_task(_redis_watchdog(gateway)) if redis is not None else None
        yield gateway
    finally:
        if resync is not None:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync
        await gateway.close()
        with contextlib.suppress(Exception):
            await nc.drain()
        if not nc.is_closed:  # drain refuses while reconnecting: close, or the reconnect loop runs on
            await nc.close()
        if client is not None:
            await client.aclose()


class CredentialRefused(RuntimeError):
    """NATS refused what the gateway must do with these credentials: another identity's file (exit 2)."""

    exit_code = 2


async def _check_credential(nc: Any, settings: GatewaySettings, refused: list[tuple[str, str]]) -> None:
    """Fail naming the subjects and the identity when NATS refused the gateway's subscriptions: a pool's seed
    file given to the gateway connected fine, then its stream creation timed out (``TimeoutError`` after 6 s).
    A subscription the gateway needs, then a flush (a round trip: any refusal is in by then)."""
    with contextlib.suppress(Exception):  # a connection lost meanwhile is not this check's to report
        probe = await nc.subscribe(f"{settings.prefix}.config.*")  # announcements: the gateway listens to them
        for _ in range(2):  # the -ERR precedes the PONG; a second round trip covers a server that sends it late
            await nc.flush(timeout=10)
        await probe.unsubscribe()
    if refused:
        what = "; ".join(f"{kind} {subject}" for kind, subject in dict.fromkeys(refused))
        raise CredentialRefused(
            f"NATS refused {what} for {identity_of(settings.nats)}: these are not the gateway's credentials "
            "(--nats-nkey-seed-file, nats.nkey_seed_file: another identity's seed file?)"
        )


async def check_gateway(settings: GatewaySettings, within_s: float = 15.0) -> list[Check]:
    """``gateway check``: connect as the gateway, try the subscription the start probes and ping redis; nothing
    created, subscribed for long or served (the start's own check, ``_check_credential``, reused)."""
    refused: list[tuple[str, str]] = []
    made: list[Any] = []

    async def on_error(exc: Exception) -> bool:
        found = permission_violation(exc)
        if found is not None:
            refused.append((found[0], as_subscribed(found[1], made[0] if made else None)))
        return found is not None

    nc, connected = await connect_for_check(settings.nats, "interlink-gateway-check", within_s, on_error=on_error)
    if nc is None:
        return [connected]
    made.append(nc)
    rows = [connected]
    subject = f"{settings.prefix}.config.*"
    try:
        await _check_credential(nc, settings, refused)
        rows.append(Check(f"nats subscribe {subject}", OK, "allowed"))
    except CredentialRefused as exc:
        rows.append(Check(f"nats subscribe {subject}", FAILED, str(exc)))
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    if settings.redis_url:
        rows.append(await _redis_check(settings.redis_url))
    return rows


async def _redis_check(url: str) -> Check:
    client = aioredis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        await client.ping()
    except Exception as exc:
        return Check("redis", FAILED, f"{type(exc).__name__}: {exc}")
    finally:
        await client.aclose()
    return Check("redis", OK, "answers")


async def _redis_watchdog(gateway: Gateway, every_s: float = 5.0) -> None:
    """Repair the redis mirror: the writes it missed while down, or everything when it was flushed."""
    while True:
        await gateway.clock.sleep(every_s)
        await gateway.store.resync_redis()


class ListenError(RuntimeError):
    """The gateway's address cannot be listened on (port taken, no permission); the message says which."""

    exit_code = 1  # the CLI prints the message as one line and exits with this


class BadPort(ListenError):
    """A port no TCP socket can have: bad input, not a failed start."""

    exit_code = 2


class UnsafeListen(ValueError):
    """A network address without a bearer token, not asked for explicitly: bad input (exit 2)."""

    exit_code = 2


def refuse_open_without_auth(settings: GatewaySettings) -> None:
    """Refuse a non-loopback address without a bearer token unless ``insecure_no_auth`` says it is meant.

    The plugin API creates pods, and a pool's runtime may be ``none`` (``up``'s is): whoever reaches the
    port runs commands on the pool's hosts. On loopback only local users can; on 0.0.0.0, anyone.
    """
    if settings.bearer_token is not None or settings.insecure_no_auth:
        return
    host = settings.host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UnsafeListen(
            f"--host {settings.host}: refusing to serve the plugin API on a network address without a bearer "
            "token (anyone reaching it could run commands); give the gateway a token (--bearer-token-file), or pass "
            "--insecure-no-auth (INTERLINK_GATEWAY_INSECURE_NO_AUTH=true) if the network is yours alone"
        )


def bind_listener(settings: GatewaySettings) -> socket.socket | None:
    """Bind the gateway's TCP port before anything else starts, so a taken port fails at once and clearly.

    uvicorn would log the bind error and call ``sys.exit`` from inside its task, which leaves a caller
    that runs other parts (``interlink-nats up``) hanging. A unix socket is left to uvicorn (None).
    """
    if settings.unix_socket is not None:
        return None
    refuse_open_without_auth(settings)
    if not 0 <= settings.port <= 65535:  # from a config file or the environment (the flag checks its range)
        raise BadPort(f"port {settings.port} (config key port): must be 0-65535")
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from exc
    return sock


class GatewayServer(uvicorn.Server):
    """uvicorn without its own signal handling: it would replace the caller's SIGINT/SIGTERM handlers
    while serving, so ``stop`` would not be set until uvicorn had finished on its own.

    Its main loop wakes once a second instead of ten times (uvicorn looks at ``should_exit`` every 0.1 s and
    refreshes its Date header every tenth time): an exit wakes it at once, and on a virtual machine each wake-up
    of an idle process costs a few ms of CPU (``bench/lifecycle.py``'s idle line)."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = asyncio.Event()
        super().__init__(config)

    @property  # uvicorn's is a plain attribute; this one also wakes the main loop
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        counter = 0  # uvicorn's tick counts tenths of a second: a multiple of ten refreshes the Date header
        while not await self.on_tick(counter):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DATE_TICK_S):
                    await self._exit.wait()
            counter = (counter + 10) % 864000


class CoalescingTransport(asyncio.Transport):
    """A connection's transport that sends a response's head together with what follows it.

    uvicorn writes the status line and headers, then the body: two ``send`` system calls per
    answer, a third of the gateway's CPU per ``/status`` call. A head (a write ending in a blank
    line) is held until the next write or, at the latest, the end of this turn of the event loop,
    so the bytes and their order are unchanged and nothing waits longer than that turn.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._held = b""
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data[-4:] == b"\r\n\r\n":
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held:
            data, self._held = self._held, b""
            if not self._transport.is_closing():  # the peer left within this turn: nothing to deliver to
                self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = b""
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


class CoalescingHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a :class:`CoalescingTransport` (one send per answer)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport))


def uvicorn_config(app: ASGIApp, settings: GatewaySettings) -> uvicorn.Config:
    """A unix socket when set (uvicorn then ignores host and port), else TCP.

    Per request as little as uvicorn allows: httptools with one send per answer
    (:class:`CoalescingHttpProtocol`), no access log, and no proxy-headers middleware (nothing here
    reads the client address it would rewrite; it costs a wrapper call per request).
    """
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        uds=str(settings.unix_socket) if settings.unix_socket is not None else None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        http=CoalescingHttpProtocol,
        proxy_headers=False,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )


@contextlib.asynccontextmanager
async def serving(
    gateway: Gateway, settings: GatewaySettings, sock: socket.socket | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    """``gateway``'s HTTP server, listening once entered (the task ends if it fails); shut down gracefully on exit.

    ``sock``: an already bound listener (:func:`bind_listener`); else uvicorn binds the settings' address.
    """
    server = GatewayServer(uvicorn_config(build_app(gateway), settings))
    task = asyncio.create_task(server.serve(sockets=[sock] if sock is not None else None), name="gateway-http")
    while not server.started:  # uvicorn has no start event; startup is a few milliseconds
        if task.done():
            task.result()
            raise RuntimeError("the gateway's HTTP server stopped before it started")
        await asyncio.sleep(0.01)
    try:
        yield task
    finally:
        server.should_exit = True
        await task


async def serve(
    settings: GatewaySettings,
    stop: asyncio.Event | None = None,
    *,
    sock: socket.socket | None = None,
    hangups: asyncio.Event | None = None,
    reread: Callable[[], GatewaySettings] | None = None,
) -> None:
    """Serve until ``stop`` is set (or forever); used by the CLI and by ``interlink-nats up``.

    ``sock``: a listener from :func:`bind_listener` (bound here when not given). A stop before the
    gateway serves (it waits for redis as long as it takes) abandons the start-up; once serving, a
    stop drains in-flight requests first.
    """
    if sock is None:
        sock = bind_listener(settings)
    stop = stop or asyncio.Event()
    listening = asyncio.Event()
    run = asyncio.create_task(_serve_until(settings, stop, listening, sock), name="gateway")
    reloads = asyncio.create_task(_reloads(settings, hangups, reread), name="gateway-reload")
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if run.done() or listening.is_set():
            await run  # serving: the stop drains it (or it failed: the error surfaces)
        else:
            log.info("gateway stopping before it served")
    finally:
        stopped.cancel()
        reloads.cancel()
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run


async def _serve_until(
    settings: GatewaySettings, stop: asyncio.Event, listening: asyncio.Event, sock: socket.socket | None
) -> None:
    try:
        async with running_gateway(settings) as gateway, serving(gateway, settings, sock) as http:
            listening.set()
            log.info("gateway listening on %s", settings.unix_socket or f"http://{settings.host}:{settings.port}")
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({http, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            log.info("gateway stopping: finishing in-flight requests (up to %ds)", settings.shutdown_grace_s)
    finally:
        if sock is not None:
            sock.close()  # uvicorn closes it when it served; not when the start-up was abandoned


LIVE = ("default_pool", "ping_free_capacity")
"""Settings read at each request: a reload applies them; every other key needs a restart."""


async def _reloads(
    settings: GatewaySettings, hangups: asyncio.Event | None, reread: Callable[[], GatewaySettings] | None
) -> None:
    """Each hang-up: re-read the configuration and apply ``LIVE`` keys to the one settings object in use."""
    if hangups is None or reread is None:
        return
    where = str(settings.config_file) if settings.config_file is not None else "the environment"
    while True:
        await hangups.wait()
        hangups.clear()
        try:
            new = reread()
        except ValueError as exc:  # pydantic's ValidationError, ConfigFileError
            log.error("reload of %s refused, the running configuration stays: %s", where, refusal(exc))
            continue
        except OSError as exc:
            log.error("reload of %s refused, the running configuration stays: %s", where, exc)
            continue
        plan = plan_reload(settings, new, live=LIVE)
        for key in plan.live:
            setattr(settings, key, getattr(new, key))
        log.info("reloaded %s: %s", where, plan.summary())
        problem = credential_problem(settings.nats)
        if problem is not None:
            log.error("%s", problem)
