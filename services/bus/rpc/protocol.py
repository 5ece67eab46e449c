"""The RPC wire protocol shared by client and server: header names, status and deadline encoding.

Pure functions only (no I/O), so both ends agree by construction and tests can check them
without a server. Data messages never carry headers; every control message does.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Collection, Mapping
from typing import NoReturn

import nats.errors
from grpclib.const import Status
from grpclib.exceptions import GRPCError

STATUS = "Rpc-Status"
"""gRPC status code (decimal) of a failed unary reply or of a stream's end marker."""
MESSAGE = "Rpc-Message"
"""Human-readable status message that goes with ``Rpc-Status``."""
TIMEOUT = "Rpc-Timeout"
"""Seconds left until the caller's deadline when the request was sent (decimal)."""
END = "Rpc-End"
"""Marks the last message of a server stream (empty body, carries the final status)."""
CONTROL = "Rpc-Control"
"""On a stream's open message: subject where the client sends acks and cancel."""
WINDOW = "Rpc-Window"
"""On a stream's open message: how many data messages the server may send ahead of acks.
On a stream request (optional): the most the client wants ahead; the server uses the smaller."""
ACK = "Rpc-Ack"
"""Client → server: total data messages consumed so far (grants that many more credits)."""
CANCEL = "Rpc-Cancel"
"""Client → server: the caller gave up; stop the handler."""

NATS_STATUS = "Status"
"""Set by nats-server itself, e.g. ``503`` when a request had no responders."""
NO_RESPONDERS = "503"

RESERVED_PREFIX = "rpc-"
"""Metadata keys may not start with this (case-insensitive): it is our control namespace."""
_BINARY_SUFFIX = "-bin"

MetadataLike = Mapping[str, str | bytes] | Collection[tuple[str, str | bytes]]
Headers = dict[str, str]

GENERIC_ERROR = "internal error"
"""What a caller sees for an unexpected server exception; the real one is only logged."""


def status_headers(status: Status, message: str | None = None) -> Headers:
    """Headers of a failed unary reply."""
    headers = {STATUS: str(status.value)}
    if message:
        headers[MESSAGE] = message
    return headers


def open_headers(control: str, window: int) -> Headers:
    """Headers of a stream's open message: the first message of every stream reply, rejected ones too."""
    return {CONTROL: control, WINDOW: str(window)}


def end_headers(status: Status = Status.OK, message: str | None = None) -> Headers:
    """Headers of a stream's end marker (streams only: a unary error never carries ``Rpc-End``)."""
    headers = status_headers(status, message)
    headers[END] = "1"
    return headers


def parse_status(headers: Mapping[str, str]) -> tuple[Status, str]:
    """Read ``Rpc-Status``/``Rpc-Message``; a missing or unknown code counts as UNKNOWN, never OK."""
    raw = headers.get(STATUS)
    try:
        status = Status(int(raw)) if raw is not None else Status.UNKNOWN
    except ValueError:
        status = Status.UNKNOWN
    return status, headers.get(MESSAGE, "")


def raise_for_status(headers: Mapping[str, str]) -> None:
    """Raise the GRPCError a reply's headers describe, or return if they say OK."""
    status, message = parse_status(headers)
    if status is not Status.OK:
        raise GRPCError(status, message or None)


def unavailable(pool: str) -> GRPCError:
    return GRPCError(Status.UNAVAILABLE, f"no submitter of pool {pool!r} answered")


def deadline_exceeded() -> GRPCError:
    return GRPCError(Status.DEADLINE_EXCEEDED, "deadline exceeded")


def encode_timeout(seconds: float) -> str:
    """Remaining seconds as a short decimal; never zero or negative, so it still parses as a deadline."""
    return f"{max(seconds, 0.001):.3f}"


def decode_window(value: str) -> int:
    """Parse a requested ``Rpc-Window``; raises ValueError for anything but a positive integer."""
    window = int(value)
    if window < 1 or str(window) != value.strip():
        raise ValueError(f"bad {WINDOW} {value!r}")
    return window


def decode_timeout(value: str) -> float:
    """Parse ``Rpc-Timeout``; raises ValueError for anything but a finite, non-negative number."""
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"bad {TIMEOUT} {value!r}")
    return seconds


def encode_metadata(metadata: MetadataLike | None, headers: Headers) -> None:
    """Copy call metadata into NATS headers (``-bin`` values base64, as gRPC does on HTTP/2).

    Keys in our ``Rpc-`` namespace are refused so a caller can't forge a status or deadline.
    """
    if not metadata:
        return
    items = metadata.items() if isinstance(metadata, Mapping) else metadata
    for key, value in items:
        name = key.lower()
        if name.startswith(RESERVED_PREFIX) or name == NATS_STATUS.lower():
            raise GRPCError(Status.INVALID_ARGUMENT, f"metadata key {key!r} is reserved")
        if name.endswith(_BINARY_SUFFIX):
            raw = value if isinstance(value, bytes) else value.encode()
            headers[name] = base64.b64encode(raw).decode("ascii")
        elif isinstance(value, bytes):
            raise GRPCError(Status.INVALID_ARGUMENT, f"metadata key {key!r} needs the '-bin' suffix for bytes")
        else:
            headers[name] = value


def decode_metadata(headers: Mapping[str, str] | None) -> dict[str, str | bytes]:
    """The caller's metadata from request headers, without our control headers."""
    if not headers:
        return {}
    metadata: dict[str, str | bytes] = {}
    for key, value in headers.items():
        name = key.lower()
        if name.startswith(RESERVED_PREFIX):
            continue
        if name.endswith(_BINARY_SUFFIX):
            try:
                metadata[name] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue  # unreadable binary metadata is dropped rather than failing the call
        else:
            metadata[name] = value
    return metadata


def translate_nats_error(exc: BaseException, pool: str) -> GRPCError:
    """Map a nats-py exception to the GRPCError a caller should handle (the seam where nats stops)."""
    if isinstance(exc, nats.errors.NoRespondersError):
        return unavailable(pool)
    if isinstance(exc, nats.errors.TimeoutError):
        return deadline_exceeded()
    if isinstance(exc, nats.errors.MaxPayloadError):
        return GRPCError(Status.RESOURCE_EXHAUSTED, "message larger than the NATS max_payload")
    if isinstance(exc, nats.errors.BadHeaderError):
        return GRPCError(Status.INVALID_ARGUMENT, "metadata key is not a valid NATS header name")
    return GRPCError(Status.UNAVAILABLE, f"NATS connection problem: {type(exc).__name__}")


def protocol_error(what: str) -> NoReturn:
    """A peer broke the wire convention (e.g. a reply that does not parse)."""
    raise GRPCError(Status.INTERNAL, f"RPC protocol error: {what}")
