"""interLink's calls on pods — create, status, delete, logs — as use cases: request bytes in, reply data out.

No HTTP and no RPC details here: parsing and reply shapes live in ``wire``, routing in ``routing``,
rendering in ``services.scripts``, pool calls in ``pool_client``; these functions sequence them.
Failures are :class:`GatewayError` (a status code and a message naming the field or the pool) or
``wire.BadRequest``; the HTTP edge turns both into answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from grpclib.const import Status
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.array_policy import array_spec
from interlink_nats.services.gateway.errors import GatewayError, PoolError, pool_error
from interlink_nats.services.gateway.group_runner import PodGroupRunner
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.pools import PoolDirectory
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.routing import pool_for_pod
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodStore
from interlink_nats.services.gateway.submit_wire import encode_submit_request
from interlink_nats.services.gateway.usage import allowance_of
from interlink_nats.services.scripts import PodRejected, render_pod
from interlink_nats.services.scripts.errors import PodMistyped
from interlink_nats.services.scripts.pod_model import Pod
from interlink_nats.services.scripts.pod_parse import parse_pod

log = logging.getLogger("interlink_nats.gateway")


@dataclass(slots=True)
class LogStream:
    """An opened ``/getLogs`` stream: its first chunk (errors before it are still status codes) and the rest
    (a PoolError while iterating only ends the body)."""

    record: PodRecord
    request: wire.LogRequest
    first: bytes
    rest: AsyncGenerator[bytes, None]


async def _no_more() -> AsyncGenerator[bytes, None]:
    return
    yield b""  # pragma: no cover  (makes this an async generator)


def _at_the_door(data: dict[str, Any]) -> Pod:
    """The pod parsed into its model, or the 4xx naming the field: 400 for a value of the wrong JSON type (the
    API server's decoding refuses it), 422 for a rule (docs/pod-support.md, "Checked at the door")."""
    try:
        return parse_pod(data)
    except PodRejected as exc:
        raise _rejected(exc) from None


def _rejected(exc: PodRejected) -> GatewayError:
    return GatewayError(400 if isinstance(exc, PodMistyped) else 422, f"pod rejected: {exc}")


@dataclass(eq=False, repr=False, slots=True)
class PodUseCases:
    settings: GatewaySettings
    store: PodStore
    pools: PoolDirectory
    client: PoolClient
    groups: PodGroupRunner
    arrays: PodGroupRunner | None = None
    """The pods of one Job coalesced into arrays (``array_policy``); None: every such pod alone."""

    def _runner_of(self, uid: str) -> PodGroupRunner | None:
        """The runner holding pod ``uid`` now, if any."""
        for runner in (self.groups, self.arrays):
            if runner is not None and runner.holds(uid):
                return runner
        return None

    async def create(self, body: bytes) -> dict[str, str]:
        data, identity = wire.read_create(body)
        pod = _at_the_door(data)  # parsed once and checked as the API server would: all below read the model
        existing = self.store.get(identity.uid)
        if existing is not None and existing.job_id:
            return {"PodUID": identity.uid, "PodJID": existing.job_id}  # interLink retried a create
        spec = pod.spec
        pool = pool_for_pod(spec, self.settings.default_pool)
        self.client.require_nats()
        build_config = await self.pools.build_config(pool, self.settings.pool_wait_s)
        try:
            rendered = render_pod(pod, build_config)
        except PodRejected as exc:
            raise _rejected(exc) from None
        job = rendered.job
        record = PodRecord(
            uid=identity.uid,
            namespace=identity.namespace,
            name=identity.name,
            pool=pool,
            init_containers=list(job.init_containers),
            containers=list(job.containers),
            images={c.name: c.image for c in (*spec.init_containers, *spec.containers) if isinstance(c.image, str)},
            allowance=allowance_of(job.resources, time.time()),
        )
        if rendered.group is not None:  # held until its whole group has arrived (docs/gateway.md, "Pod groups")
            if existing is not None and existing.is_final():  # its group failed before it was sent: it stays so
                return {"PodUID": identity.uid, "PodJID": self.groups.jid(identity.namespace, rendered.group)}
            size = len(encode_submit_request(job))  # a member too large to send alone never fits its gang either
            if size > self.client.nc.max_payload:
                raise self._too_large(size)
            return {"PodUID": identity.uid, "PodJID": await self.groups.hold(record, job, rendered.group)}
        if (
            rendered.owner is not None
            and self.arrays is not None
            and self.settings.array_window_s > 0
            and build_config.runs_arrays
        ):  # coalesced with its Job's other pods for this pool (docs/gateway.md, "Job arrays")
            size = len(encode_submit_request(job))
            if size > self.client.nc.max_payload:
                raise self._too_large(size)
            array = array_spec(rendered.owner, pool, job, self.settings.array_max_count)
            return {"PodUID": identity.uid, "PodJID": await self.arrays.hold(record, job, array)}
        # Record the pod before submitting: if we crash after the pool accepted it, the events
        # stream and ListJobs still find a record to attach to.
        await self.store.put(record)
        try:
            reply = await self.client.submit(pool, job)
        except GatewayError as exc:
            # Only our own record: a retried create (interLink gave up waiting on this one) may own it now.
            if self.store.get(identity.uid) is record and not record.job_id:
                await self.store.delete(identity.uid)
            if isinstance(exc, PoolError) and exc.rpc_status is Status.RESOURCE_EXHAUSTED:
                # the only source: a request over NATS max_payload (measured only on this error path)
                raise self._too_large(len(encode_submit_request(job))) from None
            raise
        record.job_id = reply.job_id
        if reply.status is not None:
            self.store.apply_status(identity.uid, reply.status, 0, encoded=reply.status_bytes)
        await self.store.save(record)
        if log.isEnabledFor(logging.INFO):  # its ``extra`` is built only if logged
            log.info(
                "created pod %s/%s uid=%s pool=%s job=%s",
                identity.namespace,
                identity.name,
                identity.uid,
                pool,
                reply.job_id,
                extra={
                    "pod_uid": identity.uid,
                    "namespace": identity.namespace,
                    "pod": identity.name,
                    "pool": pool,
                    "job_id": reply.job_id,
                },
            )
        return {"PodUID": identity.uid, "PodJID": reply.job_id}

    def _too_large(self, size: int) -> GatewayError:
        """413, not 429: a pod too large for NATS stays too large however often interLink retries."""
        return GatewayError(
            413,
            f"pod too large: with its files embedded its job is {size} bytes, more than the NATS max_payload of "
            f"{self.client.nc.max_payload} bytes; keep ConfigMap/Secret files small or raise max_payload on the "
            "nats-server (see docs/gateway.md)",
        )

    async def status(self, body: bytes) -> bytes:
        """The reply as JSON: the ping's, or the known pods' statuses.

        JSON here, not dicts: each pod's status is kept encoded (``PodRecord.status_json_bytes``),
        so a call only joins them, and 100,000 cached statuses stay small.
        """
        pods = wire.parse_status(body)
        if not pods:
            reports = self.pools.live_reports()
            return wire.dumps(wire.ping_response(reports, free=self.settings.ping_free_capacity))
        # Memory only: a pod no event has reached yet is reported waiting; lost events are made up
        # for by recovery.StaleStatusRefresher, never by a NATS round trip on this path.
        parts = []
        for identity in pods:
            record = self.store.get(identity.uid)
            if record is not None:
                parts.append(record.status_json_bytes())
        return b"[" + b",".join(parts) + b"]"

    async def delete(self, body: bytes) -> str:
        identity = wire.parse_delete(body)
        if await self.groups.release(identity.uid):
            return f"pod {identity.uid} deleted; its pod group waits for a replacement"
        if self.arrays is not None and await self.arrays.release(identity.uid):
            return f"pod {identity.uid} deleted before its array was sent"
        record = self.store.get(identity.uid)
        if record is None:
            return f"pod {identity.uid} is not known; nothing to delete"
        if not record.job_id and record.is_final():  # a member whose group failed before it was sent
            await self.store.delete(identity.uid)
            return f"pod {identity.uid} deleted"
        self.client.require_nats()
        try:
            reply = await self.client.cancel(record.pool, identity.uid)
        except PoolError as exc:
            if exc.rpc_status is not Status.NOT_FOUND:
                raise  # keep the record so a retried delete (interLink retries) can still cancel the job
        else:  # a job stopped by the delete ends here: its usage is billed before its record goes (docs/usage.md)
            if reply.status is not None and reply.status.usage is not None:
                self.store.apply_status(identity.uid, reply.status, 0)
        await self.store.delete(identity.uid)
        log.info("deleted pod %s/%s uid=%s pool=%s", identity.namespace, identity.name, identity.uid, record.pool)
        return f"pod {identity.uid} deleted"

    async def open_logs(self, body: bytes) -> LogStream:
        """Streamed, follow or not, so memory stays a few chunks however large the log and slow the reader."""
        request = wire.parse_logs(body)
        record = self.store.get(request.pod_uid)
        if record is None:
            raise GatewayError(404, f"pod {request.pod_uid} is not known to this gateway")
        if request.container not in (*record.init_containers, *record.containers):
            raise GatewayError(404, f"pod {request.pod_uid} has no container {request.container!r}")
        runner = self._runner_of(record.uid)
        waiting = None if runner is None else runner.waiting_message(record.uid)
        if waiting is not None:
            raise GatewayError(409, f"pod {record.namespace}/{record.name} has no log yet: {waiting}")
        if not record.job_id and record.is_final():  # its group failed before it was sent: it never ran
            return LogStream(record, request, b"", _no_more())
        self.client.require_nats()
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
        chunks = self.client.get_logs(record.pool, message)
        try:
            async with asyncio.timeout(None if request.follow else self.settings.submit_timeout_s):
                first = await anext(chunks, b"")
        except TimeoutError:
            await chunks.aclose()
            raise pool_error(record.pool, Status.DEADLINE_EXCEEDED, "", self.settings.pool_wait_s) from None
        return LogStream(record, request, first, chunks)
