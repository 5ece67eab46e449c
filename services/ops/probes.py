"""``/healthz`` and ``/metrics`` for processes without a web stack (submitter, controller).

A submitter on a login node installs no HTTP framework, so this is a small asyncio server that
answers exactly two GET paths. Health is a set of named checks (NATS connection, permission errors
on the process's own subjects, backend or Kubernetes reachability); each returns (ok, detail). The
reply is JSON with every check, 200 when all pass and 503 otherwise, so systemd watchdogs, Kubernetes
probes and humans read the same thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("interlink_nats.probes")

Check = Callable[[], tuple[bool, str]]
"""A health check: (passing, a short detail for humans). Must not block: it reads state, does no I/O."""

MAX_REQUEST_BYTES = 8192


@dataclass
class Probes:
    """Named health checks and a metrics registry, served by :func:`serve_probes`."""

    registry: CollectorRegistry
    checks: dict[str, Check] = field(default_factory=dict)
    info: Callable[[], Mapping[str, object]] = dict
    """Extra facts in the health reply (e.g. which NATS server is in use)."""

    def health(self) -> tuple[bool, dict[str, object]]:
        results: dict[str, object] = {}
        healthy = True
        for name, check in self.checks.items():
            try:
                ok, detail = check()
            except Exception as exc:  # a broken check is a failing check, never a crashed server
                ok, detail = False, f"check failed: {type(exc).__name__}: {exc}"
            healthy = healthy and ok
            results[name] = {"ok": ok, "detail": detail}
        return healthy, {"status": "ok" if healthy else "unhealthy", "checks": results, **self.info()}


async def serve_probes(probes: Probes, host: str, port: int) -> asyncio.Server:
    """Start answering GET /healthz and /metrics on host:port (port 0: a free one; see server.sockets)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        method, path = (parts[0], parts[1].split(b"?", 1)[0]) if len(parts) >= 2 else (b"", b"")
        if method not in (b"GET", b"HEAD"):
            status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
        elif path == b"/metrics":
            status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(probes.registry)
        elif path in (b"/healthz", b"/readyz"):
            healthy, report = probes.health()
            status = "200 OK" if healthy else "503 Service Unavailable"
            ctype, body = "application/json", json.dumps(report).encode() + b"\n"
        else:
            status, ctype, body = "404 Not Found", "text/plain", b"GET /healthz or /metrics\n"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        if method != b"HEAD":
            writer.write(body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES)
    bound = server.sockets[0].getsockname()
    log.info("health and metrics on http://%s:%d (/healthz, /metrics)", bound[0], bound[1])
    return server
