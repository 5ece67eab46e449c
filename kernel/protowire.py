"""Protobuf wire-format primitives for the few hot messages handled without betterproto2.

Why: betterproto2 spends 50 to 130 µs per message on reflection, and a handful of messages are built or
read once per pod (Submit's request and reply, job events, job statuses). Their codecs sit next to their
users (``services/gateway/submit_wire.py``, ``event_wire.py``, ``wire.py``; ``submitters/fastwire.py``)
and share these primitives, so there is one varint, one field writer and one skipper in the project.
Every codec is checked byte for byte against the generated classes in its tests. Pure; no project imports.

Conventions are betterproto2's, so bytes stay identical: a negative ``int32``/``int64`` is written as its
64-bit two's complement (ten bytes), fields in number order, proto3 defaults left out.
"""

from __future__ import annotations

_UINT64 = 1 << 64
_INT64_MIN = -(1 << 63)

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LEN = 2
WIRE_FIXED32 = 5


def tag(number: int, wire_type: int) -> int:
    """A field's key: ``(number << 3) | wire_type`` (one byte for numbers up to 15)."""
    return number << 3 | wire_type


def append_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a varint; a negative one as its 64-bit two's complement (ten bytes)."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError("Negative value is not representable as a 64-bit integer")
        value += _UINT64
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def varint(value: int) -> bytes:
    out = bytearray()
    append_varint(out, value)
    return bytes(out)


def append_len(out: bytearray, number: int, payload: bytes) -> None:
    """Append a length-delimited field (string, bytes, message), written even when empty."""
    size = len(payload)
    if number < 16 and size < 0x80:  # key and length one byte each, as for most fields: no varint loop
        out.append(number << 3 | WIRE_LEN)
        out.append(size)
    else:
        append_varint(out, number << 3 | WIRE_LEN)
        append_varint(out, size)
    out += payload


def append_int(out: bytearray, number: int, value: int) -> None:
    """Append a varint field unless it holds proto3's default (0, False)."""
    if not value:
        return
    if number < 16 and 0 < value < 0x80:  # key and value one byte each (enums, flags, small counts)
        out.append(number << 3 | WIRE_VARINT)
        out.append(value)
    else:
        append_varint(out, number << 3 | WIRE_VARINT)
        append_varint(out, value)


def len_field(number: int, payload: bytes) -> bytes:
    out = bytearray()
    append_len(out, number, payload)
    return bytes(out)


def string_field(number: int, value: str) -> bytes:
    """A string field, left out when empty (proto3's default)."""
    return len_field(number, value.encode()) if value else b""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it.

    Raises IndexError past the end of ``data`` and ValueError for more than ten bytes or a value that
    does not fit in 64 bits; a caller reading a sub-message checks the returned position against its end.
    """
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


def signed(value: int, bits: int) -> int:
    """A varint read back as the two's-complement integer (int32, int64) it encodes."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def skip(data: bytes, pos: int, wire_type: int) -> int:
    """The position after a field's value of ``wire_type`` (its key already read); ValueError for groups."""
    if wire_type == WIRE_VARINT:
        return read_varint(data, pos)[1]
    if wire_type == WIRE_FIXED64:
        return pos + 8
    if wire_type == WIRE_LEN:
        length, pos = read_varint(data, pos)
        return pos + length
    if wire_type == WIRE_FIXED32:
        return pos + 4
    raise ValueError(f"unsupported protobuf wire type {wire_type}")
