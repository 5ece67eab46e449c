"""Prometheus metrics of one gateway (own registry, so several gateways can live in one test process).

Labels are endpoint names, status codes, states and pool names only: never pod data or secrets.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    def __init__(self, counts_by_state: Callable[[], dict[str, int]], live_pools: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "interlink_gateway_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "interlink_gateway_request_seconds",
            "HTTP request latency by endpoint",
            ["endpoint"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.rpc_errors = Counter(
            "interlink_gateway_rpc_errors",
            "RPC errors by pool and method",
            ["pool", "method", "status"],
            registry=self.registry,
        )
        self.events = Counter("interlink_gateway_events_applied", "JobEvents applied", registry=self.registry)
        self.log_streams = Gauge(
            "interlink_gateway_log_streams", "Open /getLogs streams (each holds a few chunks)", registry=self.registry
        )
        pods = Gauge("interlink_gateway_pods", "Tracked pods by state", ["state"], registry=self.registry)
        pools = Gauge("interlink_gateway_pools_live", "Pools that reported recently", registry=self.registry)
        pools.set_function(lambda: float(live_pools()))
        self._pods = pods
        self._counts_by_state = counts_by_state

    def refresh(self) -> None:
        """Pod counts are computed when scraped, not on every change."""
        self._pods.clear()
        for state, count in self._counts_by_state().items():
            self._pods.labels(state=state).set(count)
