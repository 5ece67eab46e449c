"""A pool's report of what an ended pod used, checked before it is billed (``interlink_gateway_usage_*``).

The usage on an ended status (``pb.JobUsage``) comes from an untrusted party, as every report does
(``kernel.reported``): any client with the pool's credential writes it. So each figure is bounded by what the
gateway itself knows of the pod, its **allowance**: the request the gateway rendered (CPUs rounded up to whole
cores, memory to whole MiB, as batch systems allocate) times its wall time, plus ``TOLERANCE``; the wall time is
bounded by the time since the gateway created the pod (plus ``SLACK_S``). A negative figure counts as 0, a figure
above its bound counts as the bound; integers cannot be NaN. A pod whose request the gateway does not know
(rebuilt from a pool's job list after redis was lost) is billed nothing. Pure: the caller passes the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from interlink_nats.gen.interlink_nats import v1 as pb

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

TOLERANCE = 0.1
"""A pool may report up to this fraction more than the pod's request x its wall time (clock rounding)."""
SLACK_S = 120.0
"""Added to the time since the pod was created (its minute, clocks of two hosts): the most a job can have run."""
MIB = 2**20


class Allowance(NamedTuple):
    """What the gateway knows of a pod to bound its usage: its request and when the gateway created it."""

    cpu_millis: int
    memory_bytes: int
    gpus: int
    since: int
    """Unix time, to the minute (pods created in one minute with one request share one tuple)."""


_SHARED: dict[Allowance, Allowance] = {}
SHARED_MAX = 4096


def allowance_of(resources: pb.ResourceRequest | None, created_at: float) -> Allowance:
    """One shared tuple per distinct request and minute: ~8 bytes a pod (see ``record.PodRecord``)."""
    r = resources or pb.ResourceRequest()
    return shared_allowance(
        Allowance(max(0, r.cpu_millis), max(0, r.memory_bytes), max(0, r.gpus), int(created_at) // 60 * 60)
    )


def shared_allowance(key: Allowance) -> Allowance:
    """The one tuple equal to ``key`` (a record restored from redis shares it too)."""
    shared = _SHARED.get(key)
    if shared is not None:
        return shared
    if len(_SHARED) >= SHARED_MAX:
        _SHARED.clear()
    _SHARED[key] = key
    return key


@dataclass(frozen=True, slots=True)
class Billed:
    """The figures billed for one pod, and each one that was clamped, with why."""

    cpu_seconds: float
    memory_byte_seconds: float
    gpu_seconds: float
    refused: dict[str, str]


NOTHING = Billed(0.0, 0.0, 0.0, {})


def billed(usage: pb.JobUsage, allowance: Allowance | None, *, now: float) -> Billed:
    """``usage`` bounded by ``allowance`` (see the module's docstring)."""
    if allowance is None:
        return Billed(0.0, 0.0, 0.0, {"usage": "the pod's request is unknown here: nothing is billed"})
    refused: dict[str, str] = {}
    longest = max(0.0, now - allowance.since) + SLACK_S
    wall = _bounded("wall", usage.wall_millis / 1000, longest, refused)
    factor = wall * (1 + TOLERANCE)
    cores = math.ceil(allowance.cpu_millis / 1000)
    mib = math.ceil(allowance.memory_bytes / MIB)
    return Billed(
        cpu_seconds=_bounded("cpu", usage.millicpu_seconds / 1000, cores * factor, refused),
        memory_byte_seconds=_bounded("memory", usage.memory_mib_seconds, mib * factor, refused) * MIB,
        gpu_seconds=_bounded("gpu", usage.milligpu_seconds / 1000, allowance.gpus * factor, refused),
        refused=refused,
    )


def _bounded(name: str, value: float, most: float, refused: dict[str, str]) -> float:
    if value < 0:
        refused[name] = f"{value:.6g} is negative: counted as 0"
        return 0.0
    if value > most:
        refused[name] = f"{value:.6g} is more than the pod's request allows ({most:.6g}): counted as that"
        return most
    return value
