"""The protobuf bytes of ``SubmitRequest`` and the few fields of ``SubmitResponse``, without betterproto2's cost.

Every ``/create`` encodes one ``SubmitRequest`` (a ~4 KB script) and decodes one ``SubmitResponse``;
betterproto2 spends ~100 µs on the pair, a third of the gateway's own work per create (P1).
The codecs are generated from proto/ (``gen/.../fastwire.py``), byte for byte betterproto2's;
this module only shapes the reply the way the gateway keeps it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


def encode_submit_request(job: pb.JobScript) -> bytes:
    """``bytes(pb.SubmitRequest(job=job))``, at a fraction of the cost."""
    return fastwire.submit_request_job_field(fastwire.encode_job_script(job))


@dataclass(frozen=True, slots=True)
class SubmitReply:
    """What the gateway uses of a ``SubmitResponse``; the status also as the bytes it came in (stored as is)."""

    job_id: str
    created: bool
    status: pb.JobStatus | None
    status_bytes: bytes | None


def decode_submit_response(data: bytes) -> SubmitReply:
    """The reply's ``job_id``, ``created`` and ``status`` as betterproto2 reads them.

    Raises ValueError (or IndexError) for bytes that are not a ``SubmitResponse``. A reply of the plain shape
    is read straight; any other (unknown fields, a field repeated: the last one wins, the status too, as
    betterproto2 does not merge messages) is parsed by betterproto2, the status's bytes re-encoded then.
    """
    view = fastwire.read_submit_response(data)
    if view is not None:
        if view.status is None:
            return SubmitReply(view.job_id, view.created, None, None)
        status = fastwire.decode_job_status(view.status.encoded)
        return SubmitReply(view.job_id, view.created, status, view.status.encoded)
    fastwire.check_submit_response(data)  # betterproto2 would read a string cut short, or a wrong wire type
    parsed = pb.SubmitResponse.parse(data)
    status_bytes = None if parsed.status is None else fastwire.encode_job_status(parsed.status)
    return SubmitReply(parsed.job_id, parsed.created, parsed.status, status_bytes)
