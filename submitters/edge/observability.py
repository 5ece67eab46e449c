"""The submitter's /healthz and /metrics: the NATS connection, its permissions, the backend's last poll and
whether its programs (``sbatch``...) can be run.

The gauges here are collected when scraped from the runtime's own state; what is counted and timed as it happens
(Submits, batch commands, RPCs) is ``metrics``', in the same registry. Labels are bounded (the pool is this process's
one pool; no pod, namespace or job id is a label). Every series is listed in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.nats_connection import connected_server
from interlink_nats.services.ops.probes import Probes
from interlink_nats.submitters.backends.commands import CommandCheck
from interlink_nats.submitters.core.backend import Backend
from interlink_nats.submitters.edge.metrics import SubmitterMetrics
from interlink_nats.submitters.engine.polling import PollStats
from nats.aio.client import Client as NATS
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class Observed(Protocol):
    """What health and metrics read of a running submitter (``runtime.Observed`` provides it)."""

    pool: str
    instance_id: str
    backend: Backend
    commands: CommandCheck
    clock: Clock
    nc: NATS | None
    polls: int
    last_poll_ok: float | None
    poll_error: str | None
    permission_errors: list[str]
    metrics: SubmitterMetrics

    @property
    def poll_interval_s(self) -> float: ...
    @property
    def tracked(self) -> int: ...
    @property
    def unpublished(self) -> int: ...
    @property
    def last_poll(self) -> PollStats | None: ...


STALE_POLLS = 3
"""The backend counts as unreachable when no poll succeeded for this many intervals."""


class _ObservedCollector(Collector):
    def __init__(self, submitter: Observed) -> None:
        self.submitter = submitter

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.submitter
        values = [s.pool, s.backend.name]

        def one(
            kind: type[CounterMetricFamily | GaugeMetricFamily], name: str, doc: str, value: float | None
        ) -> CounterMetricFamily | GaugeMetricFamily:
            """The family, with its one sample unless ``value`` is None (not known yet: the family alone, so every
            series' name and type is there from the first scrape)."""
            family = kind(name, doc, labels=["pool", "backend"])
            if value is not None:
                family.add_metric(values, value)
            return family

        yield one(GaugeMetricFamily, "interlink_submitter_jobs_tracked", "Live jobs being polled", s.tracked)
        waiting = "JobEvents waiting to be published"
        yield one(GaugeMetricFamily, "interlink_submitter_events_unpublished", waiting, s.unpublished)
        yield one(CounterMetricFamily, "interlink_submitter_polls", "Backend polls that succeeded", s.polls)
        last = s.last_poll
        seconds = last.seconds if last is not None else None
        yield one(GaugeMetricFamily, "interlink_submitter_last_poll_seconds", "Duration of the last poll", seconds)
        yield one(
            GaugeMetricFamily,
            "interlink_submitter_last_poll_backend_calls",
            "Backend commands run by the last poll",
            last.backend_calls if last is not None else None,
        )
        connected = 1 if connected_server(s.nc) else 0
        yield one(GaugeMetricFamily, "interlink_submitter_nats_connected", "1 when connected to NATS", connected)
        yield one(
            CounterMetricFamily,
            "interlink_submitter_permission_errors",
            "NATS permission violations on own subjects",
            len(s.permission_errors),
        )


def submitter_probes(submitter: Observed) -> Probes:
    registry = submitter.metrics.registry
    submitter.metrics.read_state(_ObservedCollector(submitter))

    def nats() -> tuple[bool, str]:
        server = connected_server(submitter.nc)
        return (True, f"connected to {server}") if server else (False, "not connected to NATS")

    def permissions() -> tuple[bool, str]:
        if submitter.permission_errors:
            return False, submitter.permission_errors[-1]
        return True, "no permission violations"

    def backend() -> tuple[bool, str]:
        if submitter.poll_error is not None:
            return False, submitter.poll_error
        if submitter.last_poll_ok is None:
            return False, "no poll has finished yet"
        age = submitter.clock.monotonic() - submitter.last_poll_ok
        if age > STALE_POLLS * submitter.poll_interval_s + 30:
            return False, f"the last successful poll was {age:.0f}s ago"
        return True, f"last poll {age:.1f}s ago"

    def commands() -> tuple[bool, str]:
        """The last check's verdict (the poll loop and failed submissions refresh it): no I/O here."""
        if submitter.commands.problem is not None:
            return False, submitter.commands.message()
        return True, "every program the backend runs is there"

    return Probes(
        registry=registry,
        checks={"nats": nats, "permissions": permissions, "backend": backend, "commands": commands},
        info=lambda: {
            "pool": submitter.pool,
            "instance": submitter.instance_id,
            "backend": submitter.backend.name,
            "nats_server": connected_server(submitter.nc),
        },
    )
