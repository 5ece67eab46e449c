"""interLink's calls on pods — create, status, delete, logs — as use cases: request bytes in, reply data out.

No HTTP and no RPC details here: parsing and reply shapes live in ``wire``, routing in ``routing``,
rendering in ``services.scripts``, pool calls in ``pool_client``; these functions sequence them.
Failures are :class:`GatewayError` (a status code and a message naming the field or the pool) or
``wire.BadRequest``; the HTTP edge turns both into answers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from grpclib.const import Status
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.errors import GatewayError, PoolError
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.pools import PoolDirectory
from interlink_nats.services.gateway.routing import pool_for_pod
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.gateway.store import PodRecord, PodStore
from interlink_nats.services.scripts import PodRejected, render_job

log = logging.getLogger("interlink_nats.gateway")


@dataclass(slots=True)
class LogStream:
    """A validated ``/getLogs`` request and its chunks (not yet started; PoolError while iterating)."""

    record: PodRecord
    request: wire.LogRequest
    chunks: AsyncGenerator[bytes, None]


class PodUseCases:
    def __init__(self, settings: GatewaySettings, store: PodStore, pools: PoolDirectory, client: PoolClient) -> None:
        self.settings = settings
        self.store = store
        self.pools = pools
        self.client = client

    async def create(self, body: bytes) -> dict[str, str]:
        data = wire.parse_create(body)
        pod = data["pod"]
        identity = wire.pod_identity(pod)
        existing = self.store.get(identity.uid)
        if existing is not None and existing.job_id:
            return {"PodUID": identity.uid, "PodJID": existing.job_id}  # interLink retried a create
        pool = pool_for_pod(pod, self.settings.default_pool)
        build_config = await self.pools.build_config(pool, self.settings.pool_wait_s)
        try:
            job = render_job(data, build_config)
        except PodRejected as exc:
            raise GatewayError(422, f"pod rejected: {exc}") from None
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
            reply = await self.client.submit(pool, job)
        except PoolError:
            await self.store.delete(identity.uid)
            raise
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

    async def status(self, body: bytes) -> list[dict[str, Any]] | dict[str, Any]:
        pods = wire.parse_status(body)
        if not pods:
            return wire.ping_response(self.pools.live_reports())
        # Memory only: a pod no event has reached yet is reported waiting; lost events are made up
        # for by recovery.StaleStatusRefresher, never by a NATS round trip on this path.
        out = []
        for identity in pods:
            record = self.store.get(identity.uid)
            if record is not None:
                out.append(record.status_json())
        return out

    async def delete(self, body: bytes) -> str:
        identity = wire.parse_delete(body)
        record = self.store.get(identity.uid)
        if record is None:
            return f"pod {identity.uid} is not known; nothing to delete"
        try:
            await self.client.cancel(record.pool, identity.uid)
        except PoolError as exc:
            if exc.rpc_status is not Status.NOT_FOUND:
                raise  # keep the record so a retried delete (interLink retries) can still cancel the job
        await self.store.delete(identity.uid)
        log.info("deleted pod %s/%s uid=%s pool=%s", identity.namespace, identity.name, identity.uid, record.pool)
        return f"pod {identity.uid} deleted"

    def logs(self, body: bytes) -> LogStream:
        request = wire.parse_logs(body)
        record = self.store.get(request.pod_uid)
        if record is None:
            raise GatewayError(404, f"pod {request.pod_uid} is not known to this gateway")
        if request.container not in (*record.init_containers, *record.containers):
            raise GatewayError(404, f"pod {request.pod_uid} has no container {request.container!r}")
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
        return LogStream(record, request, self.client.get_logs(record.pool, message))
