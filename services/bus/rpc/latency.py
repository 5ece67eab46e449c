"""RPC latency as a Prometheus histogram, one shape for both ends: the submitter's server times each call it
serves, the gateway's client each call it makes (``interlink_<process>_rpc_seconds``).

Labels are bounded: ``pool`` (the server's own; a client passes only pools known from their announcements),
``method`` (a route of the service: a fixed set) and ``outcome``, the call's gRPC status in lower case
(``ok``, ``invalid_argument``, ``unavailable``...: grpclib's ``Status``, 17 values).
"""

from __future__ import annotations

from grpclib.const import Status
from prometheus_client import CollectorRegistry, Histogram

RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
"""Seconds: a GetStatus answers in a millisecond, a Submit waits for sbatch (seconds), a followed log for minutes."""


def outcome(status: Status) -> str:
    """The ``outcome`` label of a call that ended with ``status``."""
    return status.name.lower()


class RpcLatency:
    """``interlink_<process>_rpc_seconds{pool, method, outcome}`` in ``registry``; the children are cached (the
    label lookup costs more than the observation, and a Submit is counted in microseconds)."""

    def __init__(self, registry: CollectorRegistry, process: str) -> None:
        self.histogram = Histogram(
            f"interlink_{process}_rpc_seconds",
            "RPC latency by pool, method and outcome (the gRPC status, lower case)",
            ["pool", "method", "outcome"],
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, str, Status], Histogram] = {}

    def observe(self, pool: str, method: str, status: Status, seconds: float) -> None:
        key = (pool, method, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.histogram.labels(pool=pool, method=method, outcome=outcome(status))
        child.observe(seconds)
