"""What the gateway needs of a ``JobEvent`` (pod UID, revision, state, job id, the status's bytes), read without
betterproto2.

Every job sends the gateway at least one event, and betterproto2 spends ~130 µs parsing one: a tenth of a
create's whole cost at the gateway (issue 14, P1). The store keeps statuses encoded and decodes them only
when ``/status`` needs them, so applying an event needs just these few fields.

Only the plain shape every submitter writes is read here: each field of a known number and wire type, each
singular field at most once, strings valid UTF-8, enums, timestamps and ints in range, no unknown fields.
Anything else answers None and the caller parses the event with betterproto2 as before, so an unusual or
malformed event is handled exactly as it was; and what is read here is never a status betterproto2 could
not decode later. ``tests/test_gateway_event_wire.py`` checks both against the generated classes. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from interlink_nats.kernel.protowire import WIRE_LEN, read_varint, skip

_MAX_TIMESTAMP_S = 253402300799
"""9999-12-31T23:59:59Z, the last second a datetime holds; earlier than 1970 is left to betterproto2 too."""


@dataclass(frozen=True, slots=True)
class _Field:
    kind: str
    """``string``, ``bool``, ``enum``, ``int32``, ``uint64``, ``seconds``, ``nanos`` or ``message``."""
    repeated: bool = False
    values: range | None = None
    """An enum's known values."""
    schema: _Schema | None = None
    """A message field's fields."""


_VARINT_VALUES = {
    "bool": range(2),
    "uint64": range(1 << 64),
    "seconds": range(_MAX_TIMESTAMP_S + 1),
    "nanos": range(1_000_000_000),
}
"""The values each kind of varint field may hold, but an enum's (its own) and an int32's (two ranges)."""
_INT32_NEGATIVE = (1 << 64) - (1 << 31)
"""The least varint of a negative int32 (written sign-extended to 64 bits)."""


class _Tag(NamedTuple):
    """What ``_walk`` needs of a field, looked up by the field's whole key (number and wire type) at once."""

    number: int
    repeated: bool
    length_delimited: bool
    allowed: range | None
    """A varint's values (None: an int32's, checked apart)."""
    tags: _Tags | None
    """A message's fields; None for a string (or a varint)."""


_Schema = dict[int, _Field]
_Tags = dict[int, _Tag]
_Value = int | tuple[int, int, "_Found"]
"""A varint, or the (start, end) of a length-delimited value with a message's fields (empty for a string)."""
_Found = dict[int, _Value]
_NO_FIELDS: _Found = {}

_STRING, _BOOL = _Field("string"), _Field("bool")
_TIMESTAMP = _Field("message", schema={1: _Field("seconds"), 2: _Field("nanos")})
_POD_REF = _Field("message", schema={1: _STRING, 2: _STRING, 3: _STRING})
_CONTAINER_STATUS = _Field(
    "message",
    repeated=True,
    schema={
        1: _STRING,
        2: _BOOL,
        3: _Field("enum", values=range(4)),  # ContainerPhase
        4: _Field("int32"),
        5: _TIMESTAMP,
        6: _TIMESTAMP,
        7: _STRING,
        8: _STRING,
    },
)
_JOB_STATUS: _Schema = {
    1: _POD_REF,
    2: _STRING,
    3: _STRING,
    4: _Field("enum", values=range(7)),  # JobState
    5: _CONTAINER_STATUS,
    6: _STRING,
    7: _STRING,
    8: _TIMESTAMP,
    9: _BOOL,
}
_JOB_EVENT: _Schema = {1: _Field("message", schema=_JOB_STATUS), 2: _Field("uint64"), 3: _STRING}


def _tags(schema: _Schema) -> _Tags:
    """``schema`` keyed by each field's key as it is on the wire: one dict lookup checks number and wire type."""
    tags: _Tags = {}
    for number, field in schema.items():
        length_delimited = field.kind in ("string", "message")
        sub = _tags(field.schema) if field.schema is not None else None
        allowed = field.values if field.kind == "enum" else _VARINT_VALUES.get(field.kind)
        tags[number << 3 | (WIRE_LEN if length_delimited else 0)] = _Tag(
            number, field.repeated, length_delimited, allowed, sub
        )
    return tags


_JOB_EVENT_TAGS = _tags(_JOB_EVENT)


class _Unusual(Exception):
    """Not the plain shape read here: the caller falls back to betterproto2."""


@dataclass(frozen=True, slots=True)
class EventView:
    uid: str
    revision: int
    state: int
    job_id: str
    status: bytes
    """The event's ``status`` field exactly as it came: what the store keeps."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A varint that ends by ``end`` and fits in 64 bits, else the event is not of the plain shape."""
    try:
        value, pos = read_varint(data, pos)
    except (IndexError, ValueError):
        raise _Unusual from None
    if pos > end:
        raise _Unusual
    return value, pos


def _walk(data: bytes, pos: int, end: int, tags: _Tags) -> _Found:
    """Check that ``data[pos:end]`` is a plain message of ``tags``; its singular fields' values.

    Every event goes through here field by field (~90 varints), so one-byte varints (nearly every key,
    length and small value) are read inline, and each message is walked once, its fields kept for the caller.
    """
    found: _Found = {}
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos, end)
        tag = tags.get(key)
        if tag is None or (tag.number in found and not tag.repeated) or pos >= end:
            raise _Unusual
        value = data[pos]
        if value < 0x80:
            pos += 1
        else:
            value, pos = _varint(data, pos, end)
        if tag.length_delimited:
            stop = pos + value
            if stop > end:
                raise _Unusual
            if tag.tags is None:
                _text(data, pos, stop)
                found[tag.number] = (pos, stop, _NO_FIELDS)
            else:
                found[tag.number] = (pos, stop, _walk(data, pos, stop, tag.tags))
            pos = stop
        else:
            allowed = tag.allowed
            if allowed is None:  # an int32
                if 1 << 31 <= value < _INT32_NEGATIVE:
                    raise _Unusual
            elif value not in allowed:
                raise _Unusual
            found[tag.number] = value
    return found


def _text(data: bytes, start: int, end: int) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError:
        raise _Unusual from None


def read_event(data: bytes) -> EventView | None:
    """The event's few fields, or None when it is not of the plain shape (parse it with betterproto2 then)."""
    try:
        event = _walk(data, 0, len(data), _JOB_EVENT_TAGS)
        status = event.get(1)
        if not isinstance(status, tuple):
            return None
        fields = status[2]
        pod = fields.get(1)
        uid = ""
        if isinstance(pod, tuple):
            ref = pod[2].get(1)
            uid = _text(data, ref[0], ref[1]) if isinstance(ref, tuple) else ""
        job = fields.get(3)
        job_id = _text(data, job[0], job[1]) if isinstance(job, tuple) else ""
        state = fields.get(4, 0)
        revision = event.get(2, 0)
    except _Unusual:
        return None
    if not uid or not isinstance(state, int) or not isinstance(revision, int):
        return None  # the caller's slow path says why it drops the event
    return EventView(uid, revision, state, job_id, data[status[0] : status[1]])


def status_field(event: bytes) -> bytes | None:
    """The encoded ``JobEvent.status`` as it came (the store keeps statuses encoded), for an event
    betterproto2 parsed (not of the plain shape): None when it does not hold the status exactly once.

    Only the top-level fields are walked; a repeated status is merged by protobuf, so then the parsed
    object is the truth and the caller encodes it.
    """
    found: bytes | None = None
    pos, end = 0, len(event)
    try:
        while pos < end:
            key, pos = read_varint(event, pos)
            if key == (1 << 3 | WIRE_LEN):
                if found is not None:
                    return None
                length, pos = read_varint(event, pos)
                found = event[pos : pos + length]
                pos += length
            else:
                pos = skip(event, pos, key & 7)
    except (IndexError, ValueError):
        return None
    return found if pos == end else None
