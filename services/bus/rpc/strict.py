"""Strict protobuf wire check, run on request bytes before betterproto2 parses them.

Why: betterproto2's parser is lenient. It accepts truncated fields (``b"\\n\\x05ab"`` becomes an
empty JobScript) and stores values of the wrong wire type raw (``b"\\x08\\x01"`` gives
``SubmitRequest(job=1)``), so garbage would reach handlers and fail there as UNKNOWN. This walk
rejects malformed framing and wire types that do not match the declared field, recursively
through message and map fields, so a bad request is answered INVALID_ARGUMENT instead.

Pure and allocation-light: no I/O, one pass over the bytes, per-class schemas cached.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import betterproto2

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
MAX_DEPTH = 64
"""Nesting limit, so a hostile payload cannot exhaust the stack (protobuf's own default is 100)."""

_WIRE_BY_TYPE = {
    **dict.fromkeys(
        (
            betterproto2.TYPE_ENUM,
            betterproto2.TYPE_BOOL,
            betterproto2.TYPE_INT32,
            betterproto2.TYPE_INT64,
            betterproto2.TYPE_UINT32,
            betterproto2.TYPE_UINT64,
            betterproto2.TYPE_SINT32,
            betterproto2.TYPE_SINT64,
        ),
        VARINT,
    ),
    **dict.fromkeys((betterproto2.TYPE_FLOAT, betterproto2.TYPE_FIXED32, betterproto2.TYPE_SFIXED32), FIXED32),
    **dict.fromkeys((betterproto2.TYPE_DOUBLE, betterproto2.TYPE_FIXED64, betterproto2.TYPE_SFIXED64), FIXED64),
    **dict.fromkeys(
        (betterproto2.TYPE_STRING, betterproto2.TYPE_BYTES, betterproto2.TYPE_MESSAGE, betterproto2.TYPE_MAP), LEN
    ),
}

_Field = tuple[int, Any, bool]
"""(expected wire type, nested message class or None, may arrive packed)."""


class WireFormatError(ValueError):
    """The bytes are not a valid encoding of the expected message."""


@cache
def _schema(cls: type) -> dict[int, _Field]:
    """Field number → expectations, from betterproto2's metadata (empty for other message classes)."""
    meta = getattr(cls, "_betterproto", None)
    if meta is None:
        return {}
    schema: dict[int, _Field] = {}
    for name, field in meta.meta_by_field_name.items():
        wire = _WIRE_BY_TYPE[field.proto_type]
        nested: Any = None
        if field.proto_type == betterproto2.TYPE_MESSAGE:
            nested = field.unwrap() if field.unwrap else meta.cls_by_field[name]
        elif field.proto_type == betterproto2.TYPE_MAP:
            nested = meta.cls_by_field[name]  # the generated map-entry message
        packed = bool(field.repeated) and wire != LEN
        schema[field.number] = (wire, nested, packed)
    return schema


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireFormatError("varint longer than 10 bytes")
    raise WireFormatError("truncated varint")


def check(data: bytes, cls: type) -> None:
    """Raise WireFormatError unless ``data`` is a well-formed encoding of ``cls``."""
    _check(data, 0, len(data), cls, 0)


def _check(data: bytes, pos: int, end: int, cls: type, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireFormatError("message nested too deeply")
    schema = _schema(cls)
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireFormatError("field number 0")
        start = pos
        if wire == VARINT:
            _, pos = _varint(data, pos, end)
        elif wire == LEN:
            length, start = _varint(data, pos, end)
            pos = start + length
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        else:
            raise WireFormatError(f"field {number}: unsupported wire type {wire}")
        if pos > end:
            raise WireFormatError(f"field {number}: truncated")
        expected = schema.get(number)
        if expected is None:
            continue  # unknown fields are kept by betterproto2; their framing was checked above
        want, nested, packable = expected
        if wire != want:
            if not (wire == LEN and packable):
                raise WireFormatError(f"field {number}: wire type {wire}, expected {want}")
            _check_packed(data, start, pos, want, number)
        elif nested is not None:
            _check(data, start, pos, nested, depth + 1)


def _check_packed(data: bytes, pos: int, end: int, wire: int, number: int) -> None:
    if wire == VARINT:
        while pos < end:
            _, pos = _varint(data, pos, end)
    elif (end - pos) % (8 if wire == FIXED64 else 4):
        raise WireFormatError(f"field {number}: packed fixed-size values of a bad length")
