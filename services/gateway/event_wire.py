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


_Schema = dict[int, _Field]
_Value = int | tuple[int, int]

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


def _walk(data: bytes, pos: int, end: int, schema: _Schema) -> dict[int, _Value]:
    """Check that ``data[pos:end]`` is a plain message of ``schema``; its singular fields' values
    (an int, or the (start, end) of a length-delimited value)."""
    found: dict[int, _Value] = {}
    while pos < end:
        key, pos = _varint(data, pos, end)
        field = schema.get(key >> 3)
        if field is None or (key >> 3 in found and not field.repeated):
            raise _Unusual
        wire_type = key & 7
        if wire_type == 2 and field.kind in ("string", "message"):
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise _Unusual
            if field.kind == "string":
                _text(data, pos, pos + length)
            else:
                assert field.schema is not None
                _walk(data, pos, pos + length, field.schema)
            found[key >> 3] = (pos, pos + length)
            pos += length
        elif wire_type == 0 and field.kind not in ("string", "message"):
            value, pos = _varint(data, pos, end)
            if not _in_range(field, value):
                raise _Unusual
            found[key >> 3] = value
        else:
            raise _Unusual
    return found


def _in_range(field: _Field, value: int) -> bool:
    kind = field.kind
    if kind == "bool":
        return value <= 1
    if kind == "enum":
        return field.values is not None and value in field.values
    if kind == "int32":  # a negative int32 is written as a sign-extended 64-bit varint
        return value < 1 << 31 or value >= (1 << 64) - (1 << 31)
    if kind == "seconds":
        return value <= _MAX_TIMESTAMP_S
    if kind == "nanos":
        return value <= 999_999_999
    return kind == "uint64"


def _text(data: bytes, start: int, end: int) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError:
        raise _Unusual from None


def read_event(data: bytes) -> EventView | None:
    """The event's few fields, or None when it is not of the plain shape (parse it with betterproto2 then)."""
    try:
        event = _walk(data, 0, len(data), _JOB_EVENT)
        status = event.get(1)
        if not isinstance(status, tuple):
            return None
        fields = _walk(data, status[0], status[1], _JOB_STATUS)
        pod = fields.get(1)
        uid = ""
        if isinstance(pod, tuple):
            ref = _walk(data, pod[0], pod[1], _POD_REF.schema or {}).get(1)
            uid = _text(data, *ref) if isinstance(ref, tuple) else ""
        job = fields.get(3)
        job_id = _text(data, *job) if isinstance(job, tuple) else ""
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
