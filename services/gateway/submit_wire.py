"""The protobuf bytes of ``SubmitRequest`` and the few fields of ``SubmitResponse``, without betterproto2.

Every ``/create`` encodes one ``SubmitRequest`` (a ~4 KB script) and decodes one ``SubmitResponse``;
betterproto2 spends ~100 µs on the pair, a third of the gateway's own work per create (issue 14, P1).
These few fields are plain proto3 (strings, int64s, two small messages), so they are written and read
here directly. The bytes are exactly betterproto2's (field order, defaults left out, a set message
always written even when empty, negative int64 as ten bytes), which ``tests/test_gateway_submit_wire.py``
checks against the generated classes. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.google import protobuf as pb_google
from interlink_nats.gen.interlink_nats import v1 as pb

_INT64_MIN = -(1 << 63)


def _varint(value: int, out: bytearray) -> None:
    """As betterproto2 writes one: a negative value as its 64-bit two's complement (ten bytes)."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError("Negative value is not representable as a 64-bit integer")
        value += 1 << 64
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def _bytes_field(tag: int, data: bytes, out: bytearray) -> None:
    """A length-delimited field; ``tag`` is ``(number << 3) | 2``, one byte for every field here."""
    out.append(tag)
    _varint(len(data), out)
    out += data


def _int_field(tag: int, value: int, out: bytearray) -> None:
    if value:
        out.append(tag)
        _varint(value, out)


def _pod_ref(ref: pb.PodRef) -> bytes:
    out = bytearray()
    for tag, value in ((0x0A, ref.uid), (0x12, ref.namespace), (0x1A, ref.name)):
        if value:
            _bytes_field(tag, value.encode(), out)
    out += ref._unknown_fields
    return bytes(out)


def _resources(request: pb.ResourceRequest) -> bytes:
    out = bytearray()
    _int_field(0x08, request.cpu_millis, out)
    _int_field(0x10, request.memory_bytes, out)
    _int_field(0x18, request.gpus, out)
    if request.wall_time is not None:
        duration = pb_google.Duration.from_timedelta(request.wall_time)  # betterproto2's own conversion
        inner = bytearray()
        _int_field(0x08, duration.seconds, inner)
        _int_field(0x10, duration.nanos, inner)
        _bytes_field(0x22, bytes(inner), out)
    out += request._unknown_fields
    return bytes(out)


def encode_submit_request(job: pb.JobScript) -> bytes:
    """``bytes(pb.SubmitRequest(job=job))``, at a fraction of the cost."""
    out = bytearray()
    if job.pod is not None:
        _bytes_field(0x0A, _pod_ref(job.pod), out)
    if job.script:
        _bytes_field(0x12, job.script.encode(), out)
    for tag, names in ((0x1A, job.init_containers), (0x22, job.containers)):
        for name in names:
            _bytes_field(tag, name.encode(), out)
    if job.resources is not None:
        _bytes_field(0x2A, _resources(job.resources), out)
    for flag in job.backend_flags:
        _bytes_field(0x32, flag.encode(), out)
    out += job._unknown_fields
    request = bytearray()
    _bytes_field(0x0A, bytes(out), request)
    return bytes(request)


@dataclass(frozen=True, slots=True)
class SubmitReply:
    """What the gateway uses of a ``SubmitResponse``; the status also as the bytes it came in (stored as is)."""

    job_id: str
    created: bool
    status: pb.JobStatus | None
    status_bytes: bytes | None


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        byte = data[pos]  # IndexError past the end: a truncated reply
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint longer than ten bytes")


def decode_submit_response(data: bytes) -> SubmitReply:
    """The reply's ``job_id``, ``created`` and ``status``; other fields are skipped as any proto3 reader does.

    Raises ValueError (or IndexError) for bytes that are not a ``SubmitResponse``. A field repeated on the
    wire reads as betterproto2 reads it: the last one wins, the status too (it does not merge messages).
    """
    job_id, created, status = "", False, None
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
            if number == 2:
                created = bool(value)
            elif number in (1, 3):
                raise ValueError(f"field {number} has the wrong wire type")
            continue
        if wire_type == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > end:
                raise ValueError("length-delimited field runs past the end")
            chunk = data[pos : pos + length]
            pos += length
            if number == 1:
                job_id = chunk.decode()
            elif number == 3:
                status = chunk
            elif number == 2:
                raise ValueError("field 2 has the wrong wire type")
            continue
        if wire_type in (1, 5) and number not in (1, 2, 3):
            pos += 8 if wire_type == 1 else 4
            if pos > end:
                raise ValueError("fixed-width field runs past the end")
            continue
        raise ValueError(f"unexpected wire type {wire_type} for field {number}")
    if status is None:
        return SubmitReply(job_id, created, None, None)
    return SubmitReply(job_id, created, pb.JobStatus.parse(status), status)
