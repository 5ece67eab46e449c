"""The gateway's errors and the one table from RPC status codes to HTTP status codes.

Use cases raise :class:`GatewayError` (or ``wire.BadRequest`` while parsing); the HTTP edge turns
either into a plain-text answer with its status code, so every endpoint maps errors alike.
"""

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


class GatewayError(Exception):
    """A request that cannot be served, with the HTTP status that says why and a message for the caller."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class PoolError(GatewayError):
    """A pool's RPC failed; ``rpc_status`` keeps the RPC code for callers that treat some as success."""

    def __init__(self, pool: str, rpc_status: Status, message: str) -> None:
        super().__init__(http_status_for(rpc_status), message)
        self.pool = pool
        self.rpc_status = rpc_status


def pool_error(pool: str, rpc_status: Status, detail: str, pool_wait_s: float) -> PoolError:
    """The message names the pool, so an operator knows which site to look at."""
    if rpc_status is Status.UNAVAILABLE:
        message = f"pool {pool!r} is unavailable: no submitter answered within {pool_wait_s:g}s"
    elif rpc_status is Status.DEADLINE_EXCEEDED:
        message = f"pool {pool!r} did not answer in time"
    else:
        message = f"pool {pool!r}: {detail or rpc_status.name}"
    return PoolError(pool, rpc_status, message)


class BodyTooLarge(GatewayError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")
