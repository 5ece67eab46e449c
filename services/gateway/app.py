"""The gateway's HTTP app: interLink's plugin API (``/create``, ``/status``, ``/delete``, ``/getLogs``)
plus ``/healthz``, ``/metrics`` and ``/openapi.json``.

Request handling is a thin shell: parsing and reply shapes live in ``wire``, routing in
``routing``, rendering in ``services.scripts``; this module only sequences them and maps
errors to HTTP codes. Nothing a caller sends may produce a 500: every failure is a 4xx with a
message naming the field, or a 5xx that names the pool that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.errors import http_status_for
from interlink_nats.services.gateway.events import EventConsumer
from interlink_nats.services.gateway.metrics import GatewayMetrics
from interlink_nats.services.gateway.pools import PoolDirectory, discover_pools
from interlink_nats.services.gateway.routing import pool_for_pod
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodRecord, PodStore
from interlink_nats.services.rpc import SERVICE_NAME, submitter_client
from interlink_nats.services.scripts import PodRejected, render_job
from nats.aio.client import Client as NatsClient
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from tenacity import AsyncRetrying, wait_exponential

log = logging.getLogger("interlink_nats.gateway")

SESSION_HEADER = "InterLink-Http-Session"
LOG_STREAM_WINDOW = 4
"""Log chunks (64 KiB each) a submitter may send ahead of what the HTTP client has taken: the bound
on a /getLogs stream's memory here, however slow its reader (uvicorn waits for the socket to drain)."""
_T = TypeVar("_T")


class HttpError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass
class Gateway:
    """The gateway's state and behaviour, independent of how it is served."""

    settings: GatewaySettings
    nc: NatsClient
    store: PodStore
    pools: PoolDirectory = field(init=False)
    events: EventConsumer = field(init=False)
    metrics: GatewayMetrics = field(init=False)
    redis: Any = None
    _stubs: dict[str, pb.SubmitterServiceStub] = field(default_factory=dict, init=False)
    _refresher: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.pools = PoolDirectory(self.nc, self._describe, prefix=self.settings.prefix, redis=self.redis)
        self.metrics = GatewayMetrics(self.store.counts_by_state, lambda: len(self.pools.live_reports()))
        self.events = EventConsumer(
            self.nc,
            self.store,
            prefix=self.settings.prefix,
            durable=self.settings.events_durable,
            on_applied=lambda _record: self.metrics.events.inc(),
        )

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        # Serving without the pod table would answer "unknown" for live pods: wait for redis instead.
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=5),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "waiting for redis: %s", state.outcome and state.outcome.exception()
            ),
        ):
            with attempt:
                loaded = await self.store.load()
        await self.pools.start()
        live = await discover_pools(self.nc, SERVICE_NAME)
        await self.pools.describe_all(live, self.settings.pool_wait_s)
        rebuilt = await self.rebuild_from_pools(live) if self.redis is not None and loaded == 0 else 0
        # Events only after the table is complete: an event for a pod not in the table is dropped.
        await self.events.start()
        self._refresher = asyncio.create_task(self._refresh_stale(), name="gateway-refresh-stale")
        # The restored table is long-lived: keep it out of the cyclic GC's full scans, whose pauses
        # would otherwise show up as /status tail latency at thousands of calls per second.
        gc.freeze()
        log.info("gateway started: %d pods restored from redis, %d from the pools' ListJobs", loaded, rebuilt)

    async def rebuild_from_pools(self, live: set[str]) -> int:
        """Refill the pod table from every reachable pool's ``ListJobs`` (redis was empty or lost).

        Pods come back with pool, job id and last status; images are unknown until the next create.
        """
        pools = set(self.pools.known_pools()) | live
        added = 0
        for pool in sorted(pools):
            token = ""
            while True:
                try:
                    reply = await self.stub(pool).list_jobs(
                        pb.ListJobsRequest(include_finished=True, page_size=500, page_token=token),
                        timeout=self.settings.submit_timeout_s,
                    )
                except GRPCError as exc:
                    log.warning("could not list jobs of pool %s: %s", pool, exc.message)
                    break
                for status in reply.jobs:
                    if status.pod is None or not status.pod.uid or self.store.get(status.pod.uid) is not None:
                        continue
                    if status.deleted:
                        continue  # include_finished lists jobs removed by Cancel too; their pods are gone
                    names = [c for c in status.containers]
                    record = PodRecord(
                        uid=status.pod.uid,
                        namespace=status.pod.namespace,
                        name=status.pod.name,
                        pool=pool,
                        job_id=status.job_id,
                        init_containers=[c.name for c in names if c.init],
                        containers=[c.name for c in names if not c.init],
                        status=status,
                    )
                    await self.store.put(record)
                    added += 1
                token = reply.next_page_token
                if not token:
                    break
        return added

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        await self.events.stop()
        await self.pools.stop()

    # --- RPC helpers -----------------------------------------------------------------------
    def stub(self, pool: str) -> pb.SubmitterServiceStub:
        stub = self._stubs.get(pool)
        if stub is None:
            stub = self._stubs[pool] = submitter_client(
                self.nc, pool, timeout=self.settings.submit_timeout_s, stream_window=LOG_STREAM_WINDOW
            )
        return stub

    async def _describe(self, pool: str, deadline_s: float) -> pb.DescribeResponse:
        return await self._with_pool_wait(
            pool, "Describe", lambda: self.stub(pool).describe(pb.DescribeRequest(), timeout=deadline_s)
        )

    async def _with_pool_wait(self, pool: str, method: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """Retry UNAVAILABLE (no submitter of the pool connected) for up to ``pool_wait_s``, then give up."""
        deadline = time.monotonic() + self.settings.pool_wait_s
        delay = 0.05
        while True:
            try:
                return await call()
            except GRPCError as exc:
                if exc.status is not Status.UNAVAILABLE or time.monotonic() + delay > deadline:
                    self.metrics.rpc_errors.labels(pool=pool, method=method, status=exc.status.name).inc()
                    raise
                self._require_nats()  # no use waiting for the pool while we ourselves cannot reach NATS
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _require_nats(self) -> None:
        """Answer at once when our own NATS connection is down, rather than hold the call while nats-py
        reconnects and then blame the pool: the pool may be fine, it is the gateway that cannot reach it."""
        if not self.nc.is_connected:
            raise HttpError(503, "NATS is unavailable: the gateway is not connected to nats-server (reconnecting)")

    def _rpc_error(self, pool: str, exc: GRPCError) -> HttpError:
        code = http_status_for(exc.status)
        if exc.status is Status.UNAVAILABLE:
            message = f"pool {pool!r} is unavailable: no submitter answered within {self.settings.pool_wait_s:g}s"
        elif exc.status is Status.DEADLINE_EXCEEDED:
            message = f"pool {pool!r} did not answer in time"
        else:
            message = f"pool {pool!r}: {exc.message or exc.status.name}"
        return HttpError(code, message)

    def _too_large(self, job: pb.JobScript) -> HttpError:
        """413, not 429: a pod too large for NATS stays too large however often interLink retries."""
        size = len(bytes(pb.SubmitRequest(job=job)))  # only on this error path: the stub serialised it already
        return HttpError(
            413,
            f"pod too large: with its files embedded its job is {size} bytes, more than the NATS max_payload of "
            f"{self.nc.max_payload} bytes; keep ConfigMap/Secret files small or raise max_payload on the "
            "nats-server (see docs/gateway.md)",
        )

    # --- endpoints -------------------------------------------------------------------------
    async def create(self, body: bytes) -> dict[str, str]:
        data = wire.parse_create(body)
        pod = data["pod"]
        identity = wire.pod_identity(pod)
        existing = self.store.get(identity.uid)
        if existing is not None and existing.job_id:
            return {"PodUID": identity.uid, "PodJID": existing.job_id}  # interLink retried a create
        pool = pool_for_pod(pod, self.settings.default_pool)
        self._require_nats()
        try:
            build_config = await self.pools.build_config(pool, self.settings.pool_wait_s)
        except GRPCError as exc:
            raise self._rpc_error(pool, exc) from None
        try:
            job = render_job(data, build_config)
        except PodRejected as exc:
            raise HttpError(422, f"pod rejected: {exc}") from None
        spec = pod["spec"]
        record = PodRecord(
            uid=identity.uid,
            namespace=identity.namespace,
            name=identity.name,
            pool=pool,
            init_containers=list(job.init_containers),
            containers=list(job.containers),
            images={
                c.get("name", ""): c.get("image", "")
                for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                if isinstance(c, dict)
            },
        )
        # Record the pod before submitting: if we crash after the pool accepted it, the events
        # stream and ListJobs still find a record to attach to.
        await self.store.put(record)
        try:
            reply = await self._with_pool_wait(
                pool,
                "Submit",
                lambda: self.stub(pool).submit(pb.SubmitRequest(job=job), timeout=self.settings.submit_timeout_s),
            )
        except HttpError:
            await self.store.delete(identity.uid)
            raise
        except GRPCError as exc:
            await self.store.delete(identity.uid)
            if exc.status is Status.RESOURCE_EXHAUSTED:  # the only source: a request over NATS max_payload
                raise self._too_large(job) from None
            raise self._rpc_error(pool, exc) from None
        record.job_id = reply.job_id
        if reply.status is not None:
            self.store.apply_status(identity.uid, reply.status, 0)
        await self.store.save(record)
        log.info(
            "created pod %s/%s uid=%s pool=%s job=%s",
            identity.namespace,
            identity.name,
            identity.uid,
            pool,
            reply.job_id,
        )
        return {"PodUID": identity.uid, "PodJID": reply.job_id}

    async def status(self, body: bytes) -> bytes:
        """The /status reply as JSON: the ping's, or each known pod's status (encoded once per change)."""
        pods = wire.parse_status(body)
        if not pods:
            return _dumps(wire.ping_response(self.pools.live_reports()))
        # Memory only: a pod no event has reached yet is reported waiting; lost events are made up
        # for by _refresh_stale, never by a NATS round trip on this path.
        parts = []
        for identity in pods:
            record = self.store.get(identity.uid)
            if record is not None:
                parts.append(record.status_json_bytes())
        return b"[" + b",".join(parts) + b"]"

    async def _pull_statuses(self, by_pool: dict[str, list[PodRecord]]) -> None:
        """Pulled statuses, one GetStatus batch per pool (the safety net's I/O)."""

        async def pull(pool: str, records: list[PodRecord]) -> None:
            try:
                reply = await self.stub(pool).get_status(
                    pb.GetStatusRequest(pod_uids=[r.uid for r in records]),
                    timeout=self.settings.status_fallback_timeout_s,
                )
            except GRPCError as exc:
                log.debug("status fallback for pool %s failed: %s", pool, exc)
                return
            for status in reply.statuses:
                if status.pod is not None:
                    updated = self.store.apply_status(status.pod.uid, status, 0)
                    if updated is not None:
                        await self.store.save(updated)

        await asyncio.gather(*(pull(pool, records) for pool, records in by_pool.items()))

    async def _refresh_stale(self) -> None:
        """Pull the status of live pods that no event mentioned for ``stale_after_s``.

        Events are the normal path; this is the safety net for one lost in a crash window (for
        example fetched by a gateway that was killed before acking it), at one batched call per pool.
        """
        while True:
            await asyncio.sleep(self.settings.stale_after_s / 2)
            stale = self.store.stale(self.settings.stale_after_s)
            if not stale:
                continue
            by_pool: dict[str, list[PodRecord]] = {}
            for record in stale[:10_000]:
                by_pool.setdefault(record.pool, []).append(record)
            try:
                await self._pull_statuses(by_pool)
            except Exception:  # never let the safety net die
                log.exception("refreshing stale statuses failed")

    async def delete(self, body: bytes) -> str:
        identity = wire.parse_delete(body)
        record = self.store.get(identity.uid)
        if record is None:
            return f"pod {identity.uid} is not known; nothing to delete"
        self._require_nats()
        try:
            await self.stub(record.pool).cancel(
                pb.CancelRequest(pod_uid=identity.uid), timeout=self.settings.submit_timeout_s
            )
        except GRPCError as exc:
            if exc.status is not Status.NOT_FOUND:
                # Keep the record so a retried delete (interLink retries) can still cancel the job.
                raise self._rpc_error(record.pool, exc) from None
        await self.store.delete(identity.uid)
        log.info("deleted pod %s/%s uid=%s pool=%s", identity.namespace, identity.name, identity.uid, record.pool)
        return f"pod {identity.uid} deleted"

    async def logs(self, body: bytes) -> tuple[PodRecord, wire.LogRequest]:
        request = wire.parse_logs(body)
        record = self.store.get(request.pod_uid)
        if record is None:
            raise HttpError(404, f"pod {request.pod_uid} is not known to this gateway")
        if request.container not in (*record.init_containers, *record.containers):
            raise HttpError(404, f"pod {request.pod_uid} has no container {request.container!r}")
        self._require_nats()
        return record, request

    async def stream_logs(self, record: PodRecord, request: wire.LogRequest) -> AsyncIterator[bytes]:
        message = pb.GetLogsRequest(
            pod_uid=record.uid,
            container=request.container,
            tail_lines=request.tail,
            limit_bytes=request.limit_bytes,
            follow=request.follow,
            since_time=request.since,
            timestamps=request.timestamps,
            previous=request.previous,
        )
        # No deadline on the stream as a whole (timeout=None): a slow reader may take long over a large log.
        # A reader that goes away is noticed by the HTTP server, and aclosing then cancels the submitter's
        # stream at once, not at GC time; a reader that stalls is given up by the submitter's idle timeout.
        self.metrics.log_streams.inc()
        try:
            async with contextlib.aclosing(self.stub(record.pool).get_logs(message, timeout=None)) as chunks:
                async for chunk in chunks:
                    if chunk.data:
                        yield chunk.data
        finally:
            self.metrics.log_streams.dec()


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _json(data: Any, status_code: int = 200) -> Response:
    return Response(_dumps(data), status_code=status_code, media_type="application/json")


def build_app(gateway: Gateway) -> Starlette:
    """The Starlette app around ``gateway``; the bearer token and body limit are enforced here."""
    settings = gateway.settings
    token = settings.bearer_token.get_secret_value() if settings.bearer_token else None

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise HttpError(413, f"request body larger than {settings.max_body_bytes} bytes")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_body_bytes:
                    raise HttpError(413, f"request body larger than {settings.max_body_bytes} bytes")
                chunks.append(chunk)
        except ClientDisconnect:
            raise HttpError(400, "client disconnected while sending the body") from None
        return b"".join(chunks)

    Handler = Callable[[Request], Awaitable[Response]]

    def endpoint(name: str, handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            started = time.perf_counter()
            session = request.headers.get(SESSION_HEADER, "-")
            try:
                if token is not None and name not in ("healthz",) and not _authorized(request, token):
                    response: Response = PlainTextResponse("missing or wrong bearer token", status_code=401)
                else:
                    response = await handler(request)
            except wire.BadRequest as exc:
                response = PlainTextResponse(str(exc), status_code=exc.status_code)
            except HttpError as exc:
                response = PlainTextResponse(exc.message, status_code=exc.status_code)
            except Exception:
                log.exception("%s failed (session %s)", name, session)
                response = PlainTextResponse(f"internal error in {name}; see the gateway log", status_code=500)
            gateway.metrics.requests.labels(endpoint=name, code=str(response.status_code)).inc()
            gateway.metrics.latency.labels(endpoint=name).observe(time.perf_counter() - started)
            if name in ("create", "delete") and response.status_code < 400:
                log.info("%s -> %d (session %s)", name, response.status_code, session)
            elif response.status_code >= 400:
                log.info(
                    "%s -> %d (session %s): %s",
                    name,
                    response.status_code,
                    session,
                    bytes(response.body[:300]).decode(errors="replace") if hasattr(response, "body") else "",
                )
            else:
                log.debug("%s -> %d (session %s)", name, response.status_code, session)
            return response

        return run

    async def create(request: Request) -> Response:
        return _json(await gateway.create(await read_body(request)))

    async def status(request: Request) -> Response:
        return Response(await gateway.status(await read_body(request)), media_type="application/json")

    async def delete(request: Request) -> Response:
        return PlainTextResponse(await gateway.delete(await read_body(request)))

    async def get_logs(request: Request) -> Response:
        record, log_request = await gateway.logs(await read_body(request))
        stream = gateway.stream_logs(record, log_request)
        # Streamed, follow or not, so memory stays a few chunks however large the log and slow the reader.
        # The first chunk comes before answering, so an error can still become a status code.
        try:
            async with asyncio.timeout(None if log_request.follow else settings.submit_timeout_s):
                first = await anext(stream, b"")
        except GRPCError as exc:
            raise gateway._rpc_error(record.pool, exc) from None
        except TimeoutError:
            raise gateway._rpc_error(record.pool, GRPCError(Status.DEADLINE_EXCEEDED)) from None

        async def body() -> AsyncIterator[bytes]:
            if first:
                yield first
            try:
                async for chunk in stream:
                    yield chunk
            except GRPCError as exc:  # after the 200: the body just ends
                log.info("log stream of %s/%s ended: %s", record.uid, log_request.container, exc.message)
            finally:
                with contextlib.suppress(Exception):
                    await stream.aclose()

        return StreamingResponse(body(), media_type="text/plain")

    async def healthz(request: Request) -> Response:
        nats_ok = gateway.nc.is_connected
        redis_ok = True
        if gateway.redis is not None:
            try:
                await asyncio.wait_for(gateway.redis.ping(), 1.0)
            except Exception:
                redis_ok = False
        body = {
            "nats": nats_ok,
            "redis": redis_ok if gateway.redis is not None else None,
            "pods": len(gateway.store.pods),
            "pools_live": len(gateway.pools.live_reports()),
        }
        return JSONResponse(body, status_code=200 if nats_ok and redis_ok else 503)

    async def metrics(request: Request) -> Response:
        gateway.metrics.refresh()
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        text = resources.files("interlink_nats.services.gateway").joinpath("openapi.json").read_text()
        return Response(text, media_type="application/json")

    routes = [
        Route("/create", endpoint("create", create), methods=["POST"]),
        Route("/status", endpoint("status", status), methods=["GET", "POST"]),
        Route("/delete", endpoint("delete", delete), methods=["POST", "DELETE"]),
        Route("/getLogs", endpoint("getLogs", get_logs), methods=["GET", "POST"]),
        Route("/healthz", endpoint("healthz", healthz), methods=["GET"]),
        Route("/metrics", endpoint("metrics", metrics), methods=["GET"]),
        Route("/openapi.json", endpoint("openapi", openapi), methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _authorized(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())
