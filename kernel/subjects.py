"""NATS subject names, reply inbox prefixes and the pool-name rule: the one place that spells them.

Every process (gateway, submitters, controller, the nats-config generator) builds its
subjects and inbox prefixes here, so permissions and subscriptions can never drift apart.
"""

from __future__ import annotations

from enum import StrEnum

from .names import is_dns_label

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

DEFAULT_PREFIX = "interlink"
"""Prefix of announcement and event subjects (a MasterQueue's `natsSubject: interlink.resources` matches)."""

RPC_PACKAGE = "interlink_nats.v1"
SUBMITTER_SERVICE = f"{RPC_PACKAGE}.SubmitterService"

EVENTS_STREAM = "INTERLINK_EVENTS"
"""JetStream stream that holds every pool's JobEvents."""

INBOX_ROOT = "_INBOX"
"""nats-py's default reply inbox prefix; every identity's private prefix sits below it."""


class InvalidPoolNameError(ValueError):
    """A pool name that is not a DNS label, so it is not a safe NATS subject token either."""


def validate_pool(pool: str) -> str:
    """Return ``pool`` if it is a DNS label (RFC 1123: lowercase, digits, '-', ≤ 63), else raise.

    A DNS label is also a valid NATS token (no '.', '*', '>' or whitespace) and a valid
    Kubernetes label value, which the pool becomes in ResourceFlavors.
    """
    if not is_dns_label(pool):
        raise InvalidPoolNameError(
            f"invalid pool name {pool!r}: must be a DNS label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return pool


def route_to_subject(route: str, pool: str) -> str:
    """``/interlink_nats.v1.SubmitterService/Submit`` + pool → ``interlink_nats.v1.SubmitterService.Submit.<pool>``."""
    return f"{route.lstrip('/').replace('/', '.')}.{validate_pool(pool)}"


def rpc_subject(method: str, pool: str) -> str:
    """Subject of one SubmitterService method for one pool (``*`` allowed as a wildcard method)."""
    return f"{SUBMITTER_SERVICE}.{method}.{validate_pool(pool)}"


def rpc_wildcard(pool: str) -> str:
    """Every SubmitterService method of one pool (what a pool's credential may subscribe to)."""
    return f"{SUBMITTER_SERVICE}.*.{validate_pool(pool)}"


def config_subject(pool: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Where a pool announces its BuildConfig."""
    return f"{prefix}.config.{validate_pool(pool)}"


def resources_subject(pool: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Where a pool announces its ResourceReport."""
    return f"{prefix}.resources.{validate_pool(pool)}"


def events_subject(pool: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Where a pool publishes its JobEvents (captured by the EVENTS_STREAM)."""
    return f"{prefix}.events.{validate_pool(pool)}"


def events_wildcard(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.events.*"


def live_subject(pool: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Where a pool also sends a JobEvent, unacknowledged, while the events stream cannot store it (no leader
    after a node loss): core NATS, outside the stream, so the gateway applies it at once. Durability stays the
    stream's: the outbox keeps the event until the stream acks it."""
    return f"{prefix}.live.{validate_pool(pool)}"


def live_wildcard(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.live.*"


def pool_from_subject(subject: str) -> str:
    """The pool is always the last token of our subjects."""
    return subject.rsplit(".", 1)[-1]


class Role(StrEnum):
    """Who a NATS identity is: each role has its own permissions and its own reply inbox."""

    GATEWAY = "gateway"
    CONTROLLER = "controller"
    POOL = "pool"


def inbox_prefix(role: Role, pool: str | None = None) -> str:
    """The private inbox prefix an identity must use (``nats.connect(inbox_prefix=...)``).

    ``_INBOX.gateway``, ``_INBOX.controller`` or ``_INBOX.pool.<pool>``: the permissions written by
    ``interlink-nats nats-config`` let each identity subscribe only below its own. A nuid-based
    default inbox (``_INBOX.<22 chars>``) can never equal ``gateway``, ``controller`` or ``pool``,
    so these prefixes cannot collide with legacy inboxes.
    """
    if role is Role.POOL:
        if pool is None:
            raise ValueError("a pool identity needs a pool name")
        return f"{INBOX_ROOT}.pool.{validate_pool(pool)}"
    return f"{INBOX_ROOT}.{role.value}"
