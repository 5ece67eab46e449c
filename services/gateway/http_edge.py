"""The gateway's HTTP edge: interLink's plugin API (``/create``, ``/status``, ``/delete``, ``/getLogs``)
plus ``/healthz``, ``/metrics`` and ``/openapi.json``, as a Starlette app around a :class:`Gateway`.

What every request goes through is pure ASGI middleware, outermost first: :class:`RequestMetrics`
(count, time, log, and a 500 for a bug), :class:`BearerAuth`, :class:`BodyLimit`, then
:class:`FastRoutes`, which serves ``/status`` (interLink calls it for every pod, thousands of times a
second) and ``/create`` (the costliest call) as plain ASGI apps and hands everything else to Starlette's
router. Errors of the use cases
become plain-text answers in one place (:func:`error_response`). Nothing a caller sends may produce a 500:
every failure is a 4xx with a message naming the field, or a 5xx that names the pool that failed.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from typing import Any

from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.errors import BodyTooLarge, GatewayError, PoolError
from interlink_nats.services.gateway.metrics import GatewayMetrics
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("interlink_nats.gateway")

SESSION_HEADER = "InterLink-Http-Session"
_SESSION_KEY = SESSION_HEADER.lower().encode()
OPEN_PATHS = frozenset({"/healthz"})
"""Paths served without the bearer token (probes)."""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class RequestMetrics:
    """Counts and times each request of a known endpoint, logs its outcome with the interLink session,
    and answers 500 (logging the traceback) when a handler fails in a way nobody mapped."""

    def __init__(self, app: ASGIApp, *, endpoints: Mapping[str, str], metrics: GatewayMetrics) -> None:
        self.app = app
        self.endpoints = endpoints
        self.metrics = metrics
        # Labelled children looked up once: ``labels()`` takes a lock and builds a key on every call.
        self._counters: dict[tuple[str, int], Any] = {}
        self._timers: dict[str, Any] = {}

    def _count(self, name: str, status: int, seconds: float) -> None:
        counter = self._counters.get((name, status))
        if counter is None:
            counter = self._counters[(name, status)] = self.metrics.requests.labels(endpoint=name, code=str(status))
        counter.inc()
        timer = self._timers.get(name)
        if timer is None:
            timer = self._timers[name] = self.metrics.latency.labels(endpoint=name)
        timer.observe(seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self.endpoints.get(scope["path"]) if scope["type"] == "http" else None
        if name is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        error_text = b""

        async def observe(message: Message) -> None:
            nonlocal status, error_text
            if message["type"] == "http.response.start":
                status = message["status"]
                self._count(name, status, time.perf_counter() - started)
            elif message["type"] == "http.response.body" and status >= 400 and len(error_text) < 300:
                error_text += message.get("body", b"")[: 300 - len(error_text)]
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except Exception:
            if status:
                raise  # the answer has started: nothing left to say to the caller
            log.exception("%s failed (session %s)", name, _header(scope, _SESSION_KEY) or "-")
            await PlainTextResponse(f"internal error in {name}; see the gateway log", 500)(scope, receive, observe)
        if status >= 400:
            session = _header(scope, _SESSION_KEY) or "-"
            log.info("%s -> %d (session %s): %s", name, status, session, error_text.decode(errors="replace"))
        elif name in ("create", "delete"):
            if log.isEnabledFor(logging.INFO):  # the session is looked up only if logged
                log.info("%s -> %d (session %s)", name, status, _header(scope, _SESSION_KEY) or "-")
        elif log.isEnabledFor(logging.DEBUG):  # /status: thousands a second, the session looked up only if logged
            log.debug("%s -> %d (session %s)", name, status, _header(scope, _SESSION_KEY) or "-")


class BearerAuth:
    """``Authorization: Bearer <token>`` on every path but the open ones; compared in constant time."""

    def __init__(self, app: ASGIApp, *, token: str | None, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.token = token.encode() if token is not None else None
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is not None and scope["type"] == "http" and scope["path"] not in self.open_paths:
            scheme, _, value = (_header(scope, b"authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token):
                await PlainTextResponse("missing or wrong bearer token", 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """A 413 for a body over ``max_bytes``: at once when ``Content-Length`` says so, else when the
    handler has read that much (the read raises :class:`BodyTooLarge`, a GatewayError)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            error = BodyTooLarge(self.max_bytes)
            await PlainTextResponse(error.message, error.status_code)(scope, receive, send)
            return
        size = 0

        async def limited() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def error_response(exc: Exception) -> Response | None:
    """The one place use-case errors become answers: their status code, their message as text
    (None: not an error a caller caused; it propagates, and RequestMetrics answers 500)."""
    if isinstance(exc, GatewayError | wire.BadRequest):
        text = exc.message if isinstance(exc, GatewayError) else str(exc)
        return PlainTextResponse(text, status_code=exc.status_code)
    if isinstance(exc, ClientDisconnect):
        return PlainTextResponse("client disconnected while sending the body", status_code=400)
    return None


async def error_answer(request: Request, exc: Exception) -> Response:
    """:func:`error_response` as Starlette's exception handler."""
    response = error_response(exc)
    if response is None:
        raise exc
    return response


async def read_body(receive: Receive) -> bytes:
    """The whole request body, as Starlette's ``Request.body()`` reads it (ClientDisconnect if the caller left)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        if not message.get("more_body", False):
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def bytes_endpoint(handler: Callable[[bytes], Awaitable[bytes]], media_type: str) -> ASGIApp:
    """A plain ASGI app: the request body to ``handler``, its bytes back as a 200 of ``media_type``.

    What a Starlette route would answer, without its Request, Response and per-route wrappers:
    the same headers (length and type) and the same error answers (:func:`error_response`).
    """
    content_type = media_type.encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            answer = await handler(await read_body(receive))
        except (GatewayError, wire.BadRequest, ClientDisconnect) as exc:
            response = error_response(exc)
            assert response is not None
            await response(scope, receive, send)
            return
        headers = [(b"content-length", str(len(answer)).encode()), (b"content-type", content_type)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


class FastRoutes:
    """Serves a few hot paths as plain ASGI apps, ahead of Starlette's router; the rest goes to ``app``.

    Why: interLink asks ``/status`` for every pod, thousands of calls a second at 100,000 pods, and
    Starlette's router, exception wrappers and Request/Response objects cost per call about as much
    as the HTTP server itself; on ``/create`` they were a tenth of the gateway's CPU per pod. It sits
    innermost of the middleware, so auth, body limit and metrics apply as to any route; a method a
    route does not take falls through to the router (its 405).
    """

    def __init__(self, app: ASGIApp, *, routes: Mapping[str, tuple[frozenset[str], ASGIApp]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self.routes.get(scope["path"])
            if route is not None and scope["method"] in route[0]:
                await route[1](scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(gateway: Gateway) -> Starlette:
    """The Starlette app around ``gateway``."""
    calls = gateway.calls

    async def create(request: Request) -> Response:  # the route gives 405; POST is served by FastRoutes
        return Response(await create_json(await request.body()), media_type="application/json")

    async def create_json(body: bytes) -> bytes:
        return wire.dumps(await calls.create(body))

    async def status(request: Request) -> Response:
        return Response(await calls.status(await request.body()), media_type="application/json")

    async def delete(request: Request) -> Response:
        return PlainTextResponse(await calls.delete(await request.body()))

    async def get_logs(request: Request) -> Response:
        stream = await calls.open_logs(await request.body())

        async def body() -> AsyncIterator[bytes]:
            if stream.first:
                yield stream.first
            try:
                async for chunk in stream.rest:
                    yield chunk
            except PoolError as exc:  # after the 200: the body just ends
                log.info("log stream of %s/%s ended: %s", stream.record.uid, stream.request.container, exc.message)
            finally:
                with contextlib.suppress(Exception):
                    await stream.rest.aclose()

        return StreamingResponse(body(), media_type="text/plain")

    async def healthz(request: Request) -> Response:
        ok, details = await gateway.health()
        return JSONResponse(details, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        gateway.metrics.refresh()
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        text = resources.files("interlink_nats.services.gateway").joinpath("openapi.json").read_text()
        return Response(text, media_type="application/json")

    endpoints = [  # path, name in metrics and logs, handler, methods
        ("/create", "create", create, ["POST"]),  # served by FastRoutes; the route gives 405
        ("/status", "status", status, ["GET", "POST"]),  # served by FastRoutes; the route gives HEAD and 405
        ("/delete", "delete", delete, ["POST", "DELETE"]),
        ("/getLogs", "getLogs", get_logs, ["GET", "POST"]),
        ("/healthz", "healthz", healthz, ["GET"]),
        ("/metrics", "metrics", metrics, ["GET"]),
        ("/openapi.json", "openapi", openapi, ["GET"]),
    ]
    names = {path: name for path, name, _, _ in endpoints}
    fast_routes = {
        "/status": (frozenset({"GET", "POST"}), bytes_endpoint(calls.status, "application/json")),
        "/create": (frozenset({"POST"}), bytes_endpoint(create_json, "application/json")),
    }
    settings = gateway.settings
    token = settings.bearer_token.get_secret_value() if settings.bearer_token else None
    return Starlette(
        routes=[Route(path, handler, methods=methods) for path, _, handler, methods in endpoints],
        middleware=[
            Middleware(RequestMetrics, endpoints=names, metrics=gateway.metrics),
            Middleware(BearerAuth, token=token),
            Middleware(BodyLimit, max_bytes=settings.max_body_bytes),
            Middleware(FastRoutes, routes=fast_routes),
        ],
        exception_handlers=dict.fromkeys((GatewayError, wire.BadRequest, ClientDisconnect), error_answer),
    )
