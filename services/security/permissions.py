"""Who may publish and subscribe to what: one identity per gateway, controller and pool (pure).

docs/security.md has the table; ``config`` renders these into the nats-server configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.kernel import subjects
from interlink_nats.kernel.subjects import INBOX_ROOT, Role, inbox_prefix

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

ACCOUNT = "INTERLINK"
"""The one application account; JetStream is enabled for it."""

SRV_ALL = "$SRV.>"
"""NATS micro services API (``$SRV.PING|INFO|STATS[.name[.id]]``)."""


def identity_name(role: Role, pool: str | None = None) -> str:
    """File/credential name of an identity: ``gateway``, ``controller`` or ``pool-<pool>``.

    The ``pool-`` prefix keeps a pool that happens to be named ``gateway`` from colliding.
    """
    if role is Role.POOL:
        if pool is None:
            raise ValueError("a pool identity needs a pool name")
        return f"pool-{subjects.validate_pool(pool)}"
    return role.value


@dataclass(frozen=True)
class ResponsePermission:
    """``allow_responses``: publish to the reply subject of a request received, a bounded number of times.

    ``max_msgs`` > 1 lets a server-streaming method answer with several chunks on the
    caller's reply subject; ``expires`` bounds how long a received request keeps that right.
    """

    max_msgs: int = 1
    expires: str | None = None


@dataclass(frozen=True)
class Permissions:
    """Subject allow-lists of one user. Anything not listed is denied by nats-server."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: ResponsePermission | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "publish": {"allow": list(self.publish)},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.allow_responses is not None:
            resp: dict[str, object] = {"max": self.allow_responses.max_msgs}
            if self.allow_responses.expires:
                resp["expires"] = self.allow_responses.expires
            out["allow_responses"] = resp
        return out


def _rpc_any_pool(method: str) -> str:
    return f"{subjects.SUBMITTER_SERVICE}.{method}.*"


def _inbox_subscriptions(role: Role, pool: str | None, shared_inboxes: bool) -> tuple[str, ...]:
    return (f"{INBOX_ROOT}.>",) if shared_inboxes else (f"{inbox_prefix(role, pool)}.>",)


def _jetstream_consumer_api(stream: str) -> tuple[str, ...]:
    """What a durable consumer of ``stream`` needs: create/update the stream, consumers, fetch, ack.

    Scoped to the one stream by name, so the gateway cannot read or delete other streams.
    Stream deletion and purge are deliberately absent: an operator does those with an admin
    credential, never the gateway.
    """
    return (
        "$JS.API.INFO",
        "$JS.API.STREAM.NAMES",
        f"$JS.API.STREAM.CREATE.{stream}",
        f"$JS.API.STREAM.UPDATE.{stream}",
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.*",
        f"$JS.API.CONSUMER.INFO.{stream}.*",
        f"$JS.API.CONSUMER.DELETE.{stream}.*",
        f"$JS.API.CONSUMER.NAMES.{stream}",
        f"$JS.API.CONSUMER.LIST.{stream}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    )


def gateway_permissions(
    prefix: str = subjects.DEFAULT_PREFIX,
    stream: str = subjects.EVENTS_STREAM,
    *,
    shared_inboxes: bool = False,
) -> Permissions:
    """The gateway: every RPC on every pool, the events stream, announcements, discovery.

    It may publish below ``_INBOX.>`` because a server-streaming call sends flow-control
    credit to a subject the serving pool announces under *its* inbox; only the gateway is
    trusted with that, pools never are.
    """
    return Permissions(
        publish=(
            _rpc_any_pool("*"),
            SRV_ALL,
            f"{INBOX_ROOT}.>",
            *_jetstream_consumer_api(stream),
        ),
        subscribe=(
            *_inbox_subscriptions(Role.GATEWAY, None, shared_inboxes),
            f"{prefix}.config.*",
            f"{prefix}.resources.*",
            subjects.events_wildcard(prefix),
            subjects.live_wildcard(prefix),
        ),
        # The gateway answers no requests; responses stay closed.
        allow_responses=None,
    )


def controller_permissions(prefix: str = subjects.DEFAULT_PREFIX, *, shared_inboxes: bool = False) -> Permissions:
    """The controller: read announcements, ask pools to ``Describe``, discovery. Nothing else."""
    return Permissions(
        publish=(_rpc_any_pool("Describe"), SRV_ALL),
        subscribe=(
            *_inbox_subscriptions(Role.CONTROLLER, None, shared_inboxes),
            f"{prefix}.config.*",
            f"{prefix}.resources.*",
        ),
        allow_responses=None,
    )


def pool_permissions(
    pool: str,
    prefix: str = subjects.DEFAULT_PREFIX,
    stream: str = subjects.EVENTS_STREAM,
    *,
    shared_inboxes: bool = False,
    responses: ResponsePermission | None = None,
) -> Permissions:
    """One pool: receive its own RPCs and micro-API pings, reply, publish its own events/announcements.

    It may not publish to ``_INBOX.>``: replies go out through ``allow_responses`` only, so a
    pool can answer exactly the requests it was sent and cannot forge replies to anyone else.
    ``$SRV.>`` carries only empty discovery requests, so subscribing it leaks nothing; a pool
    can answer them, so discovery output is informational and never an identity proof.
    ``$JS.API.STREAM.INFO`` of the events stream lets a submitter check the stream exists
    before it relies on publish acks; it reveals only the stream's config and counters.
    """
    subjects.validate_pool(pool)
    return Permissions(
        publish=(
            subjects.events_subject(pool, prefix),
            subjects.live_subject(pool, prefix),
            subjects.config_subject(pool, prefix),
            subjects.resources_subject(pool, prefix),
            f"$JS.API.STREAM.INFO.{stream}",
        ),
        subscribe=(
            subjects.rpc_wildcard(pool),
            SRV_ALL,
            *_inbox_subscriptions(Role.POOL, pool, shared_inboxes),
        ),
        allow_responses=responses or ResponsePermission(),
    )
