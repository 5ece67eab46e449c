"""What a submitter counts and times as it works: Submits by outcome and reason, batch command latency, RPC
latency. ``observability`` adds the gauges read from the runtime's state when scraped, into the same registry.

Every label value comes from a closed set named here or in the code that observes it (the reasons are the
submitter's own error kinds, commands are backend roles such as ``sbatch``, methods the service's routes), never
from a pod or a message: a scrape has a bounded number of series however the pods look (docs/metrics.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from interlink_nats.services.bus.rpc.latency import RpcLatency
from interlink_nats.submitters.backends.proc import time_commands
from interlink_nats.submitters.core.errors import (
    AlreadyExists,
    CannotSubmit,
    InvalidRequest,
    NotFound,
    Refused,
    SubmitterFault,
    Unavailable,
)
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

SUBMIT_METHODS = ("Submit", "SubmitGroup")
"""The RPCs that submit (a pod; a pod group as one job)."""

ACCEPTED_CREATED = ("accepted", "created")
"""A new job: the batch system has it."""
ACCEPTED_EXISTING = ("accepted", "existing")
"""A repeat of an earlier Submit of the same pod, answered with its job (the gateway resends while it waits)."""
CANCELLED = ("failed", "cancelled")
"""The call ended before an answer: its caller's deadline passed, or the submitter is stopping."""
INTERNAL = ("failed", "internal")
"""Anything that is not one of the submitter's own errors: a bug, logged with its traceback by the RPC server."""

ANSWERS: dict[type[SubmitterFault], tuple[str, str]] = {
    InvalidRequest: ("refused", "invalid_request"),
    NotFound: ("refused", "not_found"),
    AlreadyExists: ("refused", "already_exists"),
    Refused: ("refused", "rejected"),
    CannotSubmit: ("failed", "cannot_run"),
    Unavailable: ("failed", "unavailable"),
}
"""(outcome, reason) of each error kind a Submit can answer with (``core.errors``). ``refused``: no retry of
this request helps (the request, or the batch system's verdict on the job); ``failed``: the site cannot now."""

SUBMIT_ANSWERS = (ACCEPTED_CREATED, ACCEPTED_EXISTING, *ANSWERS.values(), CANCELLED, INTERNAL)
"""Every (outcome, reason) pair: each series exists from the start, at 0, so a rate over it is never missing."""

COMMAND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""Seconds: a shell launch takes milliseconds, an sbatch or squeue to a busy controller seconds, a command that
hangs is killed at its ``command_timeout_s`` (60 s by default)."""


def answer_of(exc: BaseException) -> tuple[str, str]:
    """(outcome, reason) of a Submit that raised ``exc``."""
    if isinstance(exc, SubmitterFault):
        for kind in type(exc).__mro__:
            found = ANSWERS.get(kind)
            if found is not None:
                return found
    if isinstance(exc, asyncio.CancelledError):
        return CANCELLED
    return INTERNAL


class Answered:
    """Filled in by a Submit that succeeded: whether its job is new."""

    __slots__ = ("created",)

    def __init__(self) -> None:
        self.created = True


class SubmitterMetrics:
    """One submitter's registry and the series it observes (``runtime.Submitter`` wires each where it happens)."""

    def __init__(self, pool: str) -> None:
        self.registry = CollectorRegistry()
        self.pool = pool
        self.submits = Counter(
            "interlink_submitter_submits",
            "Submit and SubmitGroup calls by outcome (accepted, refused, failed) and reason",
            ["pool", "method", "outcome", "reason"],
            registry=self.registry,
        )
        self._submits = {
            (method, answer): self.submits.labels(pool, method, *answer)
            for method in SUBMIT_METHODS
            for answer in SUBMIT_ANSWERS
        }
        self.commands = Histogram(
            "interlink_submitter_batch_command_seconds",
            "Batch command latency by command (sbatch, squeue, condor_submit, launch...) and outcome",
            ["pool", "command", "outcome"],
            buckets=COMMAND_BUCKETS,
            registry=self.registry,
        )
        self._commands: dict[tuple[str, str], Histogram] = {}
        self.rpc = RpcLatency(self.registry, "submitter")
        self._state: Collector | None = None

    def read_state(self, collector: Collector) -> None:
        """Add the series read from the runtime's state when scraped (``observability``); a second call replaces
        the first's (each would otherwise register the same names twice)."""
        if self._state is not None:
            self.registry.unregister(self._state)
        self.registry.register(collector)
        self._state = collector

    def time_commands(self) -> None:
        """Time every batch command run from now on in the calling task and the tasks it starts
        (``backends.proc.time_commands``): called where the submitter starts, before its backend's loops."""
        time_commands(self.command)

    def command(self, command: str, outcome: str, seconds: float) -> None:
        """A batch command ended (``backends.proc.CommandTimer``)."""
        child = self._commands.get((command, outcome))
        if child is None:
            child = self._commands[(command, outcome)] = self.commands.labels(self.pool, command, outcome)
        child.observe(seconds)

    @contextlib.contextmanager
    def submit(self, method: str) -> Iterator[Answered]:
        """Count the body as one ``method`` call: accepted when it returns, else by what it raised."""
        answered = Answered()
        try:
            yield answered
        except BaseException as exc:
            self._submits[(method, answer_of(exc))].inc()
            raise
        self._submits[(method, ACCEPTED_CREATED if answered.created else ACCEPTED_EXISTING)].inc()
