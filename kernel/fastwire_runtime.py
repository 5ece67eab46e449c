"""The wire primitives every generated ``fastwire.py`` shares, imported from here rather than copied into it.

Why here: a generated module (``gen/``, rewritten by ``make gen``) cannot hold hand-written code, and the
kernel is the lowest layer, so gen can import it without a cycle (nothing here imports the project).
Everything is generic: no message's field numbers but those of ``google.protobuf.Timestamp`` and
``Duration``, which are part of the protobuf spec. Conventions are betterproto2's, so bytes stay identical:
a negative ``int32``/``int64`` is written as its 64-bit two's complement (ten bytes). The generated code
binds these names as module globals (``from ... import x as _x``), so a call costs what a local function did.
"""

from __future__ import annotations

import datetime as _dt

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

_UINT64 = 1 << 64
_INT64_MIN = -(1 << 63)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MAX_TIMESTAMP_S = 253402300799
"""9999-12-31T23:59:59Z, the last second a datetime holds; earlier than 1970 is left to betterproto2 too."""


class Unusual(Exception):
    """Bytes not in the plain shape the fast readers take: betterproto2 decides instead."""


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a varint; a negative one as its 64-bit two's complement (ten bytes)."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError("Negative value is not representable as a 64-bit integer")
        value += _UINT64
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; IndexError past the end, ValueError past 64 bits."""
    result = shift = 0
    while shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >= _UINT64:
                raise ValueError("varint does not fit in 64 bits")
            return result, pos
        shift += 7
    raise ValueError("varint longer than ten bytes")


def skip(data: bytes, pos: int, wire_type: int) -> int:
    """The position after a field's value of ``wire_type`` (its key already read); ValueError for groups."""
    if wire_type == 0:
        return read_varint(data, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        length, pos = read_varint(data, pos)
        return pos + length
    if wire_type == 5:
        return pos + 4
    raise ValueError(f"unsupported protobuf wire type {wire_type}")


def field_once(data: bytes, key: int) -> bytes | None:
    """The value of the length-delimited top-level field of ``key`` when it occurs exactly once, else None."""
    found: bytes | None = None
    pos, end = 0, len(data)
    try:
        while pos < end:
            tag, pos = read_varint(data, pos)
            if tag == key:
                if found is not None:
                    return None
                length, pos = read_varint(data, pos)
                found = data[pos : pos + length]
                pos += length
            else:
                pos = skip(data, pos, tag & 7)
    except (IndexError, ValueError):
        return None
    return found if pos == end else None


def check_top(data: bytes, keys: frozenset[int]) -> None:
    """ValueError (or IndexError) unless ``data``'s top-level fields are well-formed: each known field (its key
    in ``keys``) with its own wire type, every length within the data, no groups. Stricter than betterproto2,
    which reads a string cut short or a field of the wrong wire type without a word."""
    numbers = {key >> 3 for key in keys}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number in numbers and key not in keys:
            raise ValueError(f"field {number} has the wrong wire type")
        if wire_type == 0:
            pos = read_varint(data, pos)[1]
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unexpected wire type {wire_type} for field {number}")
        if pos > end:
            raise ValueError(f"field {number} runs past the end")


def encode_timestamp(value: _dt.datetime) -> bytes:
    """``bytes(Timestamp.from_datetime(value))`` (microsecond precision, as betterproto2 converts it)."""
    if not value.tzinfo:
        raise ValueError("datetime must be timezone aware")
    offset = value - _EPOCH
    seconds, us = divmod((offset.days * 86400 + offset.seconds) * 1_000_000 + offset.microseconds, 1_000_000)
    return encode_duration(seconds, us * 1000)


def encode_duration(seconds: int, nanos: int) -> bytes:
    """``bytes(Duration(seconds, nanos))``; the caller converts with betterproto2's own ``from_timedelta``."""
    out = bytearray()
    if seconds:
        out.append(0x08)
        write_varint(out, seconds)
    if nanos:
        out.append(0x10)
        write_varint(out, nanos)
    return bytes(out)


def read_timestamp(data: bytes, pos: int, end: int) -> _dt.datetime:
    """A plain ``Timestamp`` as betterproto2's ``Timestamp.to_datetime`` makes it: within what a datetime holds
    from 1970 on, else Unusual. (Positional timedelta arguments: a third cheaper than keywords.)"""
    seconds = nanos = 0
    while pos < end:
        key = data[pos]
        value, pos = read_varint(data, pos + 1)
        if key == 0x08 and value <= _MAX_TIMESTAMP_S:
            seconds = value
        elif key == 0x10 and value < 1_000_000_000:
            nanos = value
        else:
            raise Unusual
    if pos != end:
        raise Unusual
    return _EPOCH + _dt.timedelta(0, seconds, nanos // 1000)


def read_duration(data: bytes, pos: int, end: int) -> _dt.timedelta:
    """A plain ``Duration`` as betterproto2's ``Duration.to_timedelta`` makes it."""
    seconds = nanos = 0
    while pos < end:
        key = data[pos]
        value, pos = read_varint(data, pos + 1)
        if key == 0x08:
            seconds = value - _UINT64 if value >> 63 else value
        elif key == 0x10 and (value < 1 << 31 or value >= _UINT64 - (1 << 31)):
            nanos = value - _UINT64 if value >> 63 else value
        else:
            raise Unusual
    if pos != end:
        raise Unusual
    return _dt.timedelta(0, seconds, nanos / 1e3)


def without(data: bytes, numbers: frozenset[int]) -> bytes:
    """``data`` less every top-level field whose number is in ``numbers`` (the rest byte for byte, in order);
    ``data`` itself when none occurs. ValueError (or IndexError) unless the top-level fields are well-formed."""
    kept: list[bytes] = []
    start = pos = 0
    end = len(data)
    while pos < end:
        field_start = pos
        key = data[pos]  # one-byte keys and lengths read inline: a third of the time
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos)
        if key & 7 == 2 and data[pos] < 0x80:
            pos += 1 + data[pos]
        else:
            pos = skip(data, pos, key & 7)
        if key >> 3 in numbers:
            kept.append(data[start:field_start])
            start = pos
    if pos != end:
        raise ValueError("the last field runs past the end")
    if not kept:
        return data
    kept.append(data[start:])
    return b"".join(kept)


def insert(data: bytes, field: bytes, *, after: frozenset[int]) -> bytes:
    """``data`` with ``field`` (one whole encoded field) put before its first top-level field whose number is
    not in ``after`` (the numbers declared before the field's), or at the end: where betterproto2 writes it,
    in declaration order with unknown fields last. ValueError (or IndexError) unless the top-level fields are
    well-formed."""
    pos = 0
    end = len(data)
    while pos < end:
        field_start = pos
        key = data[pos]  # one-byte keys and lengths read inline, as in ``without``
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos)
        if key >> 3 not in after:
            return data[:field_start] + field + data[field_start:]
        if key & 7 == 2 and data[pos] < 0x80:
            pos += 1 + data[pos]
        else:
            pos = skip(data, pos, key & 7)
    if pos != end:
        raise ValueError("the last field runs past the end")
    return data + field
