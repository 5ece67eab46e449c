"""One table from RPC status codes to HTTP status codes, so every endpoint maps errors alike."""

from __future__ import annotations

from grpclib.const import Status

HTTP_FOR_RPC_STATUS: dict[Status, int] = {
    Status.INVALID_ARGUMENT: 422,
    Status.NOT_FOUND: 404,
    Status.ALREADY_EXISTS: 409,
    Status.FAILED_PRECONDITION: 409,
    Status.RESOURCE_EXHAUSTED: 429,
    Status.UNAVAILABLE: 503,
    Status.DEADLINE_EXCEEDED: 504,
    Status.UNAUTHENTICATED: 502,
    Status.PERMISSION_DENIED: 502,
}


def http_status_for(status: Status) -> int:
    """Errors the caller can act on keep their meaning; anything else is the pool's fault (502)."""
    return HTTP_FOR_RPC_STATUS.get(status, 502)
