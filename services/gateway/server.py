"""Run a gateway: connect NATS and redis, start the Gateway, serve HTTP on TCP or a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
import uvicorn
from interlink_nats.kernel.nats_connection import connect
from interlink_nats.services.gateway.app import Gateway, build_app
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodStore

log = logging.getLogger("interlink_nats.gateway")


@contextlib.asynccontextmanager
async def running_gateway(settings: GatewaySettings) -> AsyncIterator[Gateway]:
    """A started Gateway (not yet serving HTTP); closes NATS and redis on exit."""
    nc = await connect(settings.nats, "interlink-gateway")
    redis = None
    if settings.redis_url:
        redis = aioredis.from_url(settings.redis_url)
    gateway = Gateway(settings=settings, nc=nc, store=PodStore(redis), redis=redis)
    resync: asyncio.Task[None] | None = None
    try:
        await gateway.start()
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
        if redis is not None:
            await redis.aclose()


async def _redis_watchdog(gateway: Gateway, every_s: float = 5.0) -> None:
    """Repair the redis mirror: the writes it missed while down, or everything when it was flushed."""
    while True:
        await asyncio.sleep(every_s)
        await gateway.store.resync_redis()


class ListenError(RuntimeError):
    """The gateway's address cannot be listened on (port taken, no permission); the message says which."""

    exit_code = 1  # the CLI prints the message as one line and exits with this


def bind_listener(settings: GatewaySettings) -> socket.socket | None:
    """Bind the gateway's TCP port before anything else starts, so a taken port fails at once and clearly.

    uvicorn would log the bind error and call ``sys.exit`` from inside its task, which leaves a caller
    that runs other parts (``interlink-nats up``) hanging. A unix socket is left to uvicorn (None).
    """
    if settings.unix_socket is not None:
        return None
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


def uvicorn_config(app: object, settings: GatewaySettings) -> uvicorn.Config:
    kwargs: dict[str, object] = {"log_level": "warning", "access_log": False, "lifespan": "off", "http": "httptools"}
    if settings.unix_socket is not None:
        kwargs["uds"] = str(settings.unix_socket)
    else:
        kwargs["host"], kwargs["port"] = settings.host, settings.port
    return uvicorn.Config(app, **kwargs)  # type: ignore[arg-type]


async def serve(
    settings: GatewaySettings, stop: asyncio.Event | None = None, *, sock: socket.socket | None = None
) -> None:
    """Serve until ``stop`` is set (or forever); used by the CLI and by ``interlink-nats up``.

    ``sock``: a listener from :func:`bind_listener` (bound here when not given).
    """
    if sock is None:
        sock = bind_listener(settings)
    async with running_gateway(settings) as gateway:
        server = uvicorn.Server(uvicorn_config(build_app(gateway), settings))
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # the caller owns signals
        task = asyncio.create_task(server.serve(sockets=[sock] if sock is not None else None))
        where = settings.unix_socket or f"http://{settings.host}:{settings.port}"
        log.info("gateway listening on %s", where)
        try:
            if stop is None:
                await task
            else:
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
