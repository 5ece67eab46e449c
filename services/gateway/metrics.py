"""Prometheus metrics of one gateway (own registry, so several gateways can live in one test process).

Labels are endpoint names, status codes, states and pool names only: never pod data or secrets. A pool
name comes from a pod's toleration, i.e. from user input, so it becomes a label only when the pool is known
from its own announcements; any other name is counted under ``OTHER_POOL`` (bounded series).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from interlink_nats.services.bus.rpc.latency import RpcLatency
from interlink_nats.services.gateway.usage import Billed
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OTHER_POOL = "_other"
"""The ``pool`` label of calls to pools that never announced themselves (typos, pools that do not exist)."""


class GatewayMetrics:
    def __init__(
        self,
        counts_by_state: Callable[[], dict[str, int]],
        live_pools: Callable[[], int],
        known_pools: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.registry = CollectorRegistry()
        self._known_pools = known_pools
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
        self.rpc = RpcLatency(self.registry, "gateway")
        """Latency of each call to a pool, retries included, by pool, method and outcome (``PoolClient``)."""
        self.events = Counter("interlink_gateway_events_applied", "JobEvents applied", registry=self.registry)
        self.log_streams = Gauge(
            "interlink_gateway_log_streams", "Open /getLogs streams (each holds a few chunks)", registry=self.registry
        )
        usage = ["namespace", "pool"]
        self.usage_cpu = Counter(
            "interlink_gateway_usage_cpu_seconds",
            "interlink_gateway_usage_cpu_seconds_total: CPU-seconds the site allocated to ended pods, by namespace "
            "and pool (docs/usage.md)",
            usage,
            registry=self.registry,
        )
        self.usage_memory = Counter(
            "interlink_gateway_usage_memory_byte_seconds",
            "interlink_gateway_usage_memory_byte_seconds_total: memory byte-seconds the site allocated to ended pods,"
            " by namespace and pool",
            usage,
            registry=self.registry,
        )
        self.usage_gpu = Counter(
            "interlink_gateway_usage_gpu_seconds",
            "interlink_gateway_usage_gpu_seconds_total: GPU-seconds the site allocated to ended pods, by namespace "
            "and pool",
            usage,
            registry=self.registry,
        )
        self.usage_pods = Counter(
            "interlink_gateway_usage_pods",
            "interlink_gateway_usage_pods_total: ended pods whose usage was counted, by namespace and pool",
            usage,
            registry=self.registry,
        )
        self.usage_clamped = Counter(
            "interlink_gateway_usage_clamped",
            "interlink_gateway_usage_clamped_total: usage figures a pool reported that were negative or beyond the "
            "pod's request x its wall time, counted clamped, by pool and figure (cpu, memory, gpu, wall, usage)",
            ["pool", "figure"],
            registry=self.registry,
        )
        pods = Gauge("interlink_gateway_pods", "Tracked pods by state", ["state"], registry=self.registry)
        pools = Gauge("interlink_gateway_pools_live", "Pools that reported recently", registry=self.registry)
        pools.set_function(lambda: float(live_pools()))
        self._pods = pods
        self._counts_by_state = counts_by_state

    def watch_groups(
        self, groups: Callable[[], int], members: Callable[[], int], held_bytes: Callable[[], int] = lambda: 0
    ) -> None:
        """Pod groups held until all their members arrive, those members and their jobs' bytes (what
        ``max_held_bytes`` bounds), computed when scraped."""
        self._computed("interlink_gateway_pod_groups_held", "Pod groups waiting for members", groups)
        self._computed("interlink_gateway_pod_group_members_held", "Pods held for their pod group", members)
        self._computed(
            "interlink_gateway_pod_group_bytes_held", "Bytes of the rendered jobs held for their pod group", held_bytes
        )

    def watch_arrays(
        self, arrays: Callable[[], int], members: Callable[[], int], held_bytes: Callable[[], int]
    ) -> None:
        """The Job arrays being coalesced (``array_policy``): apart from the pod groups above, whose figures mean a
        group still missing members, while a forming array is sent within ``array_max_wait_s`` whatever comes."""
        self._computed("interlink_gateway_arrays_forming", "Job arrays being coalesced", arrays)
        self._computed("interlink_gateway_array_members_held", "Pods held while their Job's array forms", members)
        self._computed(
            "interlink_gateway_array_bytes_held",
            "Bytes of the rendered jobs held while their Job's array forms",
            held_bytes,
        )

    def _computed(self, name: str, documentation: str, value: Callable[[], int]) -> None:
        """A gauge read from ``value`` when scraped."""
        Gauge(name, documentation, registry=self.registry).set_function(lambda: float(value()))

    def bill(self, namespace: str, pool: str, billed: Billed) -> None:
        """One ended pod's usage, already bounded (``gateway.usage``). ``namespace`` is a validated name (pods are
        recorded only once validated), ``pool`` a known one: both are bounded label sets."""
        labels = {"namespace": namespace, "pool": self.pool_label(pool)}
        self.usage_cpu.labels(**labels).inc(billed.cpu_seconds)
        self.usage_memory.labels(**labels).inc(billed.memory_byte_seconds)
        self.usage_gpu.labels(**labels).inc(billed.gpu_seconds)
        self.usage_pods.labels(**labels).inc()
        for figure in billed.refused:
            self.usage_clamped.labels(pool=labels["pool"], figure=figure).inc()

    def pool_label(self, pool: str) -> str:
        """``pool`` if it announced itself, else OTHER_POOL: user input never mints new series."""
        return pool if pool in self._known_pools() else OTHER_POOL

    def refresh(self) -> None:
        """Pod counts are computed when scraped, not on every change."""
        self._pods.clear()
        for state, count in self._counts_by_state().items():
            self._pods.labels(state=state).set(count)
