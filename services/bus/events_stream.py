"""The JobEvents stream: one definition, created by the gateway (or an admin step), published to by pools.

Pools never create the stream: their credentials rightly may only look it up (``nats-config``), and
a pool that started first simply keeps its events pending until the stream is there.

On a NATS cluster the stream is replicated (R3 by default), so losing the node that leads it does not
stop status updates: the remaining nodes elect a new leader and publishing resumes within seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from interlink_nats.kernel.subjects import DEFAULT_PREFIX, EVENTS_STREAM, events_wildcard
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, ServiceUnavailableError

log = logging.getLogger(__name__)

EVENTS_MAX_AGE_S = 7 * 24 * 3600
"""Events older than a week are of no use: every live pod has had a newer one since."""

MAX_AUTO_REPLICAS = 3
"""JetStream's usual replication: survives one node's loss with a quorum of 2 (R5 only on request)."""

STREAM_NAME_IN_USE = 10058

NO_JETSTREAM = (
    "the NATS server has no JetStream for this account: its JetStream API did not answer (start nats-server "
    "with JetStream, -js or a jetstream {} block; with accounts, enable JetStream for this one)"
)
"""What a JetStream API request without responders means: said in these words by the gateway, which cannot start
without the stream, by ``submitter check`` and by a pool, whose events wait (:func:`no_jetstream` tells the case)."""


def no_jetstream(exc: BaseException) -> bool:
    """Whether ``exc`` says the server has no JetStream for this account: nats-py raises ``ServiceUnavailableError``
    without a code when the API request found no responders (``nats/js/manager.py`` ``_api_request``,
    ``nats/js/errors.py`` ``from_msg``). The same class with code 503 and a description is a JetStream that is there
    but cannot answer now (err_code 10008, "JetStream system temporarily unavailable", a cluster without its meta
    leader): not this, and its own description says so."""
    return isinstance(exc, ServiceUnavailableError) and exc.code is None


class JetStreamMissing(RuntimeError):
    """The server or account has no JetStream: the gateway cannot keep statuses. The CLI prints it as one line."""

    exit_code = 1  # the environment, not the command line: a restart once the server has JetStream succeeds

    def __init__(self) -> None:
        super().__init__(NO_JETSTREAM)


def events_stream_config(prefix: str = DEFAULT_PREFIX, replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=EVENTS_STREAM,
        subjects=[events_wildcard(prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=EVENTS_MAX_AGE_S,
        # The gateway only needs each pod's latest state: keep the last few per subject-pool.
        max_msgs_per_subject=-1,
        duplicate_window=120,
        num_replicas=replicas,
    )


def is_clustered(server_info: Mapping[str, Any]) -> bool:
    """Whether the server's INFO names a cluster (its advertised URLs may still be incomplete while it forms)."""
    return bool(server_info.get("cluster"))


def desired_replicas(setting: int | None, server_info: Mapping[str, Any]) -> int:
    """The replica count to ask for: the setting when given, else 1 on a single server and 3 on a cluster.

    The cluster's size is not asked of the server (its INFO lists only the peers known so far); a
    cluster with fewer JetStream nodes refuses 3 and creation steps down to what it can place.
    """
    if setting is not None:
        return setting
    return MAX_AUTO_REPLICAS if is_clustered(server_info) else 1


@dataclass(frozen=True)
class StreamState:
    """What the gateway found or made: shown in its log and ``/healthz``."""

    replicas: int
    wanted: int
    created: bool = False
    updated: bool = False

    @property
    def under_replicated(self) -> bool:
        return self.replicas < self.wanted


async def ensure_events_stream(
    js: JetStreamContext,
    prefix: str = DEFAULT_PREFIX,
    *,
    replicas: int | None = None,
    server_info: Mapping[str, Any] | None = None,
) -> StreamState:
    """Create the stream, or accept it as it is when it already exists (an operator may have tuned it).

    An existing stream with fewer replicas than wanted is reported and scaled up where the server
    allows it (the stream's other settings are kept); the creator's identity needs
    ``$JS.API.STREAM.UPDATE`` for that, which ``nats-config`` grants the gateway.
    """
    try:
        return await _ensure(js, prefix, replicas, server_info or {})
    except ServiceUnavailableError as exc:
        if no_jetstream(exc):
            raise JetStreamMissing() from None
        raise


async def _ensure(
    js: JetStreamContext, prefix: str, replicas: int | None, server_info: Mapping[str, Any]
) -> StreamState:
    wanted = desired_replicas(replicas, server_info)
    explicit = replicas is not None
    for count in range(wanted, 0, -1):
        try:
            await js.add_stream(events_stream_config(prefix, count))
        except BadRequestError as exc:
            if getattr(exc, "err_code", None) == STREAM_NAME_IN_USE:
                return await _accept_existing(js, prefix, wanted)
            if count == 1 or explicit:
                raise
            # Fewer nodes than asked for (a 2-node cluster, or a node down at start): take what there is.
            log.warning("events stream %s: %d replicas refused (%s); trying %d", EVENTS_STREAM, count, exc, count - 1)
            continue
        if count < wanted:
            log.warning("events stream %s created with %d of %d wanted replicas", EVENTS_STREAM, count, wanted)
        else:
            log.info("events stream %s created with %d replica(s)", EVENTS_STREAM, count)
        return StreamState(replicas=count, wanted=wanted, created=True)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def _accept_existing(js: JetStreamContext, prefix: str, wanted: int) -> StreamState:
    info = await js.stream_info(EVENTS_STREAM)
    if events_wildcard(prefix) not in (info.config.subjects or []):
        raise RuntimeError(
            f"stream {EVENTS_STREAM} exists but does not capture {events_wildcard(prefix)} "
            f"(subjects {info.config.subjects}); fix or delete it with an admin credential"
        )
    current = info.config.num_replicas or 1
    if current >= wanted:
        return StreamState(replicas=current, wanted=wanted)
    log.warning(
        "events stream %s has %d replica(s) but %d are wanted: losing the node that holds it stops every status "
        "update; scaling it up",
        EVENTS_STREAM,
        current,
        wanted,
    )
    try:
        await js.update_stream(replace(info.config, num_replicas=wanted))
    except Exception as exc:  # permission, placement: keep running on what there is, loudly
        log.error(
            "events stream %s stays at %d replica(s): update refused (%s); an admin can run "
            "`nats stream edit %s --replicas %d`",
            EVENTS_STREAM,
            current,
            exc,
            EVENTS_STREAM,
            wanted,
        )
        return StreamState(replicas=current, wanted=wanted)
    log.info("events stream %s scaled from %d to %d replicas", EVENTS_STREAM, current, wanted)
    return StreamState(replicas=wanted, wanted=wanted, updated=True)
