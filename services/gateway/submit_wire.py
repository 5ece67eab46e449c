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
from interlink_nats.kernel.protowire import (
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_LEN,
    WIRE_VARINT,
    append_int,
    append_len,
    read_varint,
)


def _pod_ref(ref: pb.PodRef) -> bytes:
    out = bytearray()
    for number, value in ((1, ref.uid), (2, ref.namespace), (3, ref.name)):
        if value:
            append_len(out, number, value.encode())
    out += ref._unknown_fields
    return bytes(out)


def _resources(request: pb.ResourceRequest) -> bytes:
    out = bytearray()
    append_int(out, 1, request.cpu_millis)
    append_int(out, 2, request.memory_bytes)
    append_int(out, 3, request.gpus)
    if request.wall_time is not None:
        duration = pb_google.Duration.from_timedelta(request.wall_time)  # betterproto2's own conversion
        inner = bytearray()
        append_int(inner, 1, duration.seconds)
        append_int(inner, 2, duration.nanos)
        append_len(out, 4, bytes(inner))
    out += request._unknown_fields
    return bytes(out)


def encode_submit_request(job: pb.JobScript) -> bytes:
    """``bytes(pb.SubmitRequest(job=job))``, at a fraction of the cost."""
    out = bytearray()
    if job.pod is not None:
        append_len(out, 1, _pod_ref(job.pod))
    if job.script:
        append_len(out, 2, job.script.encode())
    for number, names in ((3, job.init_containers), (4, job.containers)):
        for name in names:
            append_len(out, number, name.encode())
    if job.resources is not None:
        append_len(out, 5, _resources(job.resources))
    for flag in job.backend_flags:
        append_len(out, 6, flag.encode())
    out += job._unknown_fields
    request = bytearray()
    append_len(request, 1, bytes(out))
    return bytes(request)


@dataclass(frozen=True, slots=True)
class SubmitReply:
    """What the gateway uses of a ``SubmitResponse``; the status also as the bytes it came in (stored as is)."""

    job_id: str
    created: bool
    status: pb.JobStatus | None
    status_bytes: bytes | None


def decode_submit_response(data: bytes) -> SubmitReply:
    """The reply's ``job_id``, ``created`` and ``status``; other fields are skipped as any proto3 reader does.

    Raises ValueError (or IndexError) for bytes that are not a ``SubmitResponse``. A field repeated on the
    wire reads as betterproto2 reads it: the last one wins, the status too (it does not merge messages).
    """
    job_id, created, status = "", False, None
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == WIRE_VARINT:
            value, pos = read_varint(data, pos)
            if number == 2:
                created = bool(value)
            elif number in (1, 3):
                raise ValueError(f"field {number} has the wrong wire type")
            continue
        if wire_type == WIRE_LEN:
            length, pos = read_varint(data, pos)
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
        if wire_type in (WIRE_FIXED64, WIRE_FIXED32) and number not in (1, 2, 3):
            pos += 8 if wire_type == WIRE_FIXED64 else 4
            if pos > end:
                raise ValueError("fixed-width field runs past the end")
            continue
        raise ValueError(f"unexpected wire type {wire_type} for field {number}")
    if status is None:
        return SubmitReply(job_id, created, None, None)
    return SubmitReply(job_id, created, pb.JobStatus.parse(status), status)
