"""The gateway's HTTP middleware on its own: a Starlette app with routes that fail on purpose."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.gateway.http_edge import BearerAuth, BodyLimit, RequestMetrics, error_answer
from interlink_nats.services.gateway.metrics import GatewayMetrics
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route


def edge_app(metrics: GatewayMetrics, token: str | None = None, max_bytes: int = 64) -> Starlette:
    async def boom(request: Request) -> Response:
        raise RuntimeError("a bug")

    async def refused(request: Request) -> Response:
        raise GatewayError(409, "pool 'x': already there")

    async def echo(request: Request) -> Response:
        return PlainTextResponse(await request.body())

    routes = {"/boom": ("boom", boom), "/refused": ("refused", refused), "/echo": ("echo", echo)}
    return Starlette(
        routes=[Route(path, handler, methods=["POST"]) for path, (_, handler) in routes.items()],
        middleware=[
            Middleware(RequestMetrics, endpoints={p: n for p, (n, _) in routes.items()}, metrics=metrics),
            Middleware(BearerAuth, token=token, open_paths=frozenset({"/echo"})),
            Middleware(BodyLimit, max_bytes=max_bytes),
        ],
        exception_handlers={GatewayError: error_answer},
    )


def counted(metrics: GatewayMetrics, endpoint: str, code: int) -> float:
    value = metrics.registry.get_sample_value(
        "interlink_gateway_requests_total", {"endpoint": endpoint, "code": str(code)}
    )
    return value or 0.0


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(dict, lambda: 0)


async def call(
    app: Starlette,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | AsyncIterator[bytes] | None = None,
) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        return await client.post(path, headers=headers, content=content)


async def test_an_unmapped_exception_is_a_logged_500_naming_the_endpoint(
    metrics: GatewayMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="interlink_nats.gateway"):
        response = await call(edge_app(metrics), "/boom", headers={"InterLink-Http-Session": "s-1"})
    assert response.status_code == 500
    assert response.text == "internal error in boom; see the gateway log"
    assert counted(metrics, "boom", 500) == 1
    failure = next(r for r in caplog.records if r.exc_info)
    assert failure.exc_info is not None and "a bug" in str(failure.exc_info[1])
    assert "boom failed (session s-1)" in failure.getMessage()


async def test_a_gateway_error_keeps_its_status_and_message_and_is_logged(
    metrics: GatewayMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="interlink_nats.gateway"):
        response = await call(edge_app(metrics), "/refused")
    assert (response.status_code, response.text) == (409, "pool 'x': already there")
    assert counted(metrics, "refused", 409) == 1
    assert any("refused -> 409 (session -): pool 'x': already there" in r.getMessage() for r in caplog.records)


async def test_the_token_is_required_except_on_open_paths(metrics: GatewayMetrics) -> None:
    app = edge_app(metrics, token="s3cret")
    assert (await call(app, "/refused")).status_code == 401
    assert (await call(app, "/refused", headers={"Authorization": "Bearer nope"})).status_code == 401
    assert (await call(app, "/refused", headers={"Authorization": "bearer s3cret"})).status_code == 409
    assert (await call(app, "/echo", content=b"hi")).text == "hi"
    assert counted(metrics, "refused", 401) == 2


async def test_the_body_limit_holds_with_and_without_a_declared_length(metrics: GatewayMetrics) -> None:
    app = edge_app(metrics, max_bytes=8)
    declared = await call(app, "/echo", content=b"x" * 9)
    assert (declared.status_code, declared.text) == (413, "request body larger than 8 bytes")

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"xxxx"

    streamed = await call(app, "/echo", content=chunks())
    assert (streamed.status_code, streamed.text) == (413, "request body larger than 8 bytes")
    assert (await call(app, "/echo", content=b"x" * 8)).text == "x" * 8
