"""What the gateway needs of a ``JobEvent`` (pod UID, revision, state, job id, the status's bytes), read without
betterproto2.

Every job sends the gateway at least one event, and betterproto2 spends ~130 µs parsing one: a tenth of a
create's whole cost at the gateway (P1). The store keeps statuses encoded and decodes them only
when ``/status`` needs them, so applying an event needs just these few fields.

The reading is generated from proto/ (``gen/.../fastwire.py``): only the plain shape every
submitter writes is read (each field of a known number and wire type, each singular field at most once,
strings valid UTF-8, enums, timestamps and ints in range, no unknown fields). Anything else answers None and
the caller parses the event with betterproto2 as before, so an unusual or malformed event is handled exactly
as it was; and what is read here is never a status betterproto2 could not decode later. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats.v1 import fastwire

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


@dataclass(frozen=True, slots=True)
class EventView:
    uid: str
    revision: int
    state: int
    job_id: str
    status: bytes
    """The event's ``status`` field exactly as it came: what the store keeps."""


def read_event(data: bytes) -> EventView | None:
    """The event's few fields, or None when it is not of the plain shape (parse it with betterproto2 then)."""
    event = fastwire.read_job_event(data)
    if event is None or event.status is None:
        return None
    status = event.status
    if status.pod is None or not status.pod.uid:
        return None  # the caller's slow path says why it drops the event
    return EventView(status.pod.uid, event.revision, status.state, status.job_id, status.encoded)


def status_field(event: bytes) -> bytes | None:
    """The encoded ``JobEvent.status`` as it came (the store keeps statuses encoded), for an event
    betterproto2 parsed (not of the plain shape): None when it does not hold the status exactly once.

    Only the top-level fields are walked; a repeated status is merged by protobuf, so then the parsed
    object is the truth and the caller encodes it.
    """
    return fastwire.job_event_status_once(event)
