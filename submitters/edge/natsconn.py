"""The submitter's NATS connection: its ``nats`` settings section, the one connection model every process
shares (``kernel.nats_connection``, which connects with it; the old flat ``nats_*`` keys are aliases, see
``settings.RENAMED``).

A pool's replies arrive under ``_INBOX.pool.<pool>``, the inbox ``interlink-nats nats-config`` grants it.
"""

from __future__ import annotations

from interlink_nats.kernel import nats_connection
from interlink_nats.kernel.subjects import Role, inbox_prefix
from interlink_nats.submitters.settings import SubmitterSettings

__all__ = ["connection_settings"]


def connection_settings(settings: SubmitterSettings) -> nats_connection.NatsConnectionSettings:
    """The submitter's ``nats`` section, its inbox defaulting to the pool's own (``_INBOX.pool.<pool>``)."""
    return settings.nats.with_default_inbox(inbox_prefix(Role.POOL, settings.pool))
