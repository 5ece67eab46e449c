"""Probes (startup, readiness, liveness): parsed from a container, rendered as arguments of the script's loop.

Kubernetes' semantics: after ``initialDelaySeconds``, one try every ``periodSeconds``, each cut at
``timeoutSeconds``; ``successThreshold`` successes in a row pass, ``failureThreshold`` failures in a row fail.
A startup probe gates the other two; readiness reaches ``/status`` as the container's ``ready``; a liveness
(or startup) failure stops the container with the grace period, reason ``Unhealthy``. Handlers: ``exec``,
``httpGet`` and ``tcpSocket`` (:mod:`.hooks` parses and renders them); ``grpc`` is rejected by name (the job
script has no gRPC health client).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import PodRejected
from .fields import as_obj, get_int
from .hooks import Handler, TcpSocketHandler, handler

PROBES = (("startupProbe", "startup"), ("readinessProbe", "readiness"), ("livenessProbe", "liveness"))
"""(Kubernetes' name, the script's kind), in the order the script runs them."""
_PARAMS = {  # name: (default, minimum)
    "initialDelaySeconds": (0, 0),
    "periodSeconds": (10, 1),
    "timeoutSeconds": (1, 1),
    "successThreshold": (1, 1),
    "failureThreshold": (3, 1),
}
_HANDLER_KEYS = frozenset({"exec", "httpGet", "tcpSocket", "grpc"})


@dataclass(frozen=True, slots=True)
class Probe:
    kind: str  # startup, readiness, liveness
    handler: Handler | TcpSocketHandler
    initial: int
    period: int
    timeout: int
    success: int
    failure: int

    def words(self) -> str:
        """The script's ``__probes`` arguments for this probe (all plain words)."""
        return f"{self.kind} {self.initial} {self.period} {self.timeout} {self.success} {self.failure}"


def parse_probes(c: dict[str, Any], where: str, init: bool) -> tuple[Probe, ...]:
    """A container's probes, checked, in the order the script runs them."""
    out: list[Probe] = []
    for name, kind in PROBES:
        raw = c.get(name)
        if raw is None:
            continue
        p_where = f"{where}.{name}"
        if init:
            raise PodRejected(p_where, "init containers may not have probes (as in Kubernetes)")
        obj = as_obj(raw, p_where)
        for key in obj:
            if key == "terminationGracePeriodSeconds":
                raise PodRejected(f"{p_where}.{key}", "not supported off-cluster (the pod's grace period applies)")
            if key not in _PARAMS and key not in _HANDLER_KEYS:
                raise PodRejected(f"{p_where}.{key}", "unknown field")
        values = []
        for param, (default, minimum) in _PARAMS.items():
            value = get_int(obj, param, p_where)
            value = default if value is None or (value == 0 and minimum == 1) else value
            if value < minimum or value > 86400 * 365:
                raise PodRejected(f"{p_where}.{param}", f"must be at least {minimum}: {value}")
            values.append(value)
        if kind != "readiness" and values[3] != 1:
            raise PodRejected(f"{p_where}.successThreshold", f"must be 1 for a {kind} probe (as in Kubernetes)")
        out.append(Probe(kind, handler(obj, p_where, c, where, probe=True), *values))
    return tuple(out)
