"""The controller's /healthz and /metrics: NATS connections, the Kubernetes API, reconcile passes.

Metrics are collected when scraped, from the controller's own state, so the reconcile path carries no
instrumentation. Labels are bounded: reconcile results and pool states, never pool or object names.
"""

from __future__ import annotations

from collections.abc import Iterator

from interlink_nats.services.ops.probes import Probes
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .runner import Controller


class _ControllerCollector(Collector):
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self.controller
        yield CounterMetricFamily("kueue_nats_reconcile_passes", "Reconcile passes over every MasterQueue", c.passes)
        yield CounterMetricFamily("kueue_nats_api_writes", "Kubernetes writes (apply, delete, status)", c.writes)
        yield GaugeMetricFamily("kueue_nats_masterqueues", "MasterQueues watched", len(c.mqs))
        states = GaugeMetricFamily("kueue_nats_pools", "Pools of all MasterQueues by state", labels=["state"])
        counts: dict[str, int] = {}
        for mq in c.mqs.values():
            for state in mq.pool_states.values():
                counts[state] = counts.get(state, 0) + 1
        for state, n in sorted(counts.items()):
            states.add_metric([state], n)
        yield states
        connected = GaugeMetricFamily("kueue_nats_nats_connected", "NATS connectors currently connected")
        connected.add_metric([], sum(1 for url in c.hub.connections().values() if url))
        yield connected


def controller_probes(controller: Controller) -> Probes:
    registry = CollectorRegistry()
    registry.register(_ControllerCollector(controller))

    def nats() -> tuple[bool, str]:
        conns = controller.hub.connections()
        down = sorted(connector for connector, server in conns.items() if server is None)
        if down:
            return False, f"not connected to {', '.join(down)}"
        return True, f"{len(conns)} connector(s) connected" if conns else "no MasterQueue needs NATS yet"

    def kubernetes() -> tuple[bool, str]:
        if controller.last_error is not None:
            return False, controller.last_error
        if not controller.synced.is_set():
            return False, "the first reconcile pass has not finished"
        return True, f"{controller.passes} reconcile passes"

    return Probes(
        registry=registry,
        checks={"nats": nats, "kubernetes": kubernetes},
        info=lambda: {"nats_servers": controller.hub.connections(), "kueue_api": controller.version},
    )
