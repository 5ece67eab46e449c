"""The protobuf bytes of what every Submit handles: the request it decodes, the three it encodes.

Why: betterproto2 spends ~40-60 µs per message on reflection; these are made of a few strings, so the
codecs generated from proto/ (``gen/.../fastwire.py``) cost a few µs, byte for byte
betterproto2's. This module only puts together what the registry keeps (a spec without its script, a
pending status) from those parts; the parts that need the status mapping are cached per container list.
Decoding (:func:`plain_submit_request`) reads the plain encoding every client sends and leaves anything else to
the RPC server's strict check and betterproto2, so what a Submit gets is always what ``SubmitRequest.FromString``
gives.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import lru_cache

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire


@lru_cache(maxsize=256)
def _pending_rest(pool: str, init: tuple[str, ...], containers: tuple[str, ...]) -> bytes:
    from interlink_nats.submitters.core.status import JobMeta, map_status

    status = map_status(JobMeta("", "", "", pool, "", init, containers, ""), None, {}, now=0.0)
    status.pod = None
    return fastwire.encode_job_status(status)


def pending_status(
    uid: str, namespace: str, name: str, pool: str, init: Sequence[str], containers: Sequence[str]
) -> bytes:
    """``bytes(map_status(meta, None, {}))`` of a job not yet handed to the backend (no job id).

    The pod comes first on the wire, so its field and the cached rest make the whole status."""
    pod = fastwire.encode_pod_ref(pb.PodRef(uid=uid, namespace=namespace, name=name))
    return fastwire.job_status_pod_field(pod) + _pending_rest(pool, tuple(init), tuple(containers))


def job_spec(job: pb.JobScript) -> bytes:
    """``bytes(JobScript)`` of ``job`` without its script: what the registry keeps to submit again."""
    spec = copy.copy(job)
    spec.script = ""
    return fastwire.encode_job_script(spec)


def submit_response(resp: pb.SubmitResponse) -> bytes:
    """``bytes(resp)``."""
    return fastwire.encode_submit_response(resp)


def plain_submit_request(data: bytes) -> pb.SubmitRequest | None:
    """``SubmitRequest.FromString(data)`` when ``data`` is plainly encoded, else None. The RPC server reads
    every Submit with it first: plain bytes are well-formed in every field, so they skip its strict wire check
    as well as betterproto2 (the check is a second pass over the bytes: 20 µs of an interLink-shaped pod's 41)."""
    return fastwire.decode_plain_submit_request(data)
