"""NATS micro services discovery (``$SRV.PING|INFO|STATS``), so ``nats micro ls`` lists every pool.

Our own small responder rather than ``nats.micro``: that one awaits each handler inline on its
subscription (no concurrent handlers) and owns the endpoint subscriptions, while ours are
served by ``RpcServer`` with bounded concurrency. The JSON follows the micro spec
(io.nats.micro.v1.{ping,info,stats}_response); times are nanoseconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import nats.errors
from nats.nuid import NUID

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

PREFIX = "$SRV"
VERBS = ("PING", "INFO", "STATS")
PING_TYPE = "io.nats.micro.v1.ping_response"
INFO_TYPE = "io.nats.micro.v1.info_response"
STATS_TYPE = "io.nats.micro.v1.stats_response"


def control_subjects(verb: str, name: str, service_id: str) -> list[str]:
    """``$SRV.<verb>``, ``$SRV.<verb>.<name>`` and ``$SRV.<verb>.<name>.<id>``: all, by kind, this one."""
    return [f"{PREFIX}.{verb}", f"{PREFIX}.{verb}.{name}", f"{PREFIX}.{verb}.{name}.{service_id}"]


@dataclass
class EndpointStats:
    """Counters for one endpoint, updated by the server after every call."""

    name: str
    subject: str
    queue_group: str
    metadata: dict[str, str] = field(default_factory=dict)
    num_requests: int = 0
    num_errors: int = 0
    processing_time: int = 0
    last_error: str = ""

    def record(self, elapsed_ns: int, error: str | None) -> None:
        self.num_requests += 1
        self.processing_time += elapsed_ns
        if error is not None:
            self.num_errors += 1
            self.last_error = error

    @property
    def average_processing_time(self) -> int:
        return self.processing_time // self.num_requests if self.num_requests else 0

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group,
            "metadata": self.metadata or None,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group,
            "num_requests": self.num_requests,
            "num_errors": self.num_errors,
            "last_error": self.last_error,
            "processing_time": self.processing_time,
            "average_processing_time": self.average_processing_time,
        }


class MicroResponder:
    """Answers discovery requests for one service instance (no queue group: every instance answers)."""

    def __init__(
        self,
        nc: NATS,
        *,
        name: str,
        version: str,
        description: str = "",
        metadata: dict[str, str] | None = None,
        endpoints: list[EndpointStats] | None = None,
    ) -> None:
        self._nc = nc
        self.name = name
        self.version = version
        self.description = description
        self.metadata = dict(metadata or {})
        self.endpoints = endpoints if endpoints is not None else []
        self.id = NUID().next().decode()
        self.started = datetime.now(UTC)
        self._subs: list[Subscription] = []

    def _identity(self, kind: str) -> dict[str, Any]:
        return {"type": kind, "name": self.name, "id": self.id, "version": self.version, "metadata": self.metadata}

    def ping(self) -> dict[str, Any]:
        return self._identity(PING_TYPE)

    def info(self) -> dict[str, Any]:
        return {
            **self._identity(INFO_TYPE),
            "description": self.description,
            "endpoints": [e.info() for e in self.endpoints],
        }

    def stats(self) -> dict[str, Any]:
        started = self.started.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
        return {**self._identity(STATS_TYPE), "started": started, "endpoints": [e.stats() for e in self.endpoints]}

    async def start(self) -> None:
        """Subscribe the nine control subjects; the caller flushes."""
        builders = {"PING": self.ping, "INFO": self.info, "STATS": self.stats}
        for verb in VERBS:
            for subject in control_subjects(verb, self.name, self.id):
                self._subs.append(await self._nc.subscribe(subject, cb=self._responder(builders[verb])))
        self.started = datetime.now(UTC)

    def _responder(self, build: Any) -> Any:
        async def respond(msg: Msg) -> None:
            if not msg.reply:
                return
            try:
                await self._nc.publish(msg.reply, json.dumps(build()).encode())
            except nats.errors.Error:
                log.warning("could not answer %s", msg.subject, exc_info=True)

        return respond

    async def stop(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
