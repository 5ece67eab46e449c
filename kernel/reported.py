"""A pool's reported figures (capacity, free, held) checked before anyone adds them up or makes them a quota.

Reports are data from an untrusted party: any client allowed to publish on a pool's subject writes them, and
one pool's ``cpu: -1000`` once wiped the gateway's whole ping (``"resources": {}``; interLink #558: a zero drains
the node) while ``1e18`` became a Kueue quota. So each figure is refused on its own when it is not a quantity,
negative, or above the most a pool may report of that resource (a site setting; defaults far above any real
pool); a refused figure counts as unknown, which removes only that pool's share of that resource. Pure: the
gateway (ping) and the controller (quotas) share this one rule, and each says where it refused what. A pool's
recent usage (``recent_usage``, shown in the MasterQueue's status) is checked in the same spirit, clamped rather
than dropped: never negative, never more than its capacity could have held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from interlink_nats.kernel import quantities

INT64_MAX = 2**63 - 1
"""Kubernetes keeps a quantity's value (and a CPU's in millicores) in an int64: sums are kept below it."""

BYTE_RESOURCES = ("memory", "ephemeral-storage")
BYTE_PREFIXES = ("hugepages-",)


@dataclass(frozen=True, slots=True)
class Maxima:
    """The most one pool may report of each resource; more is absurd, and refused."""

    cpu: str = "10M"
    """Cores: ten million, more than the largest machine has."""
    memory: str = "16Pi"
    """Bytes, also of ``ephemeral-storage`` and ``hugepages-*``."""
    pods: str = "10M"
    other: str = "1M"
    """Any other resource (GPUs and other devices): counted in units."""

    def spelled(self, resource: str) -> str:
        """The maximum of ``resource`` as the site wrote it."""
        if resource == "cpu":
            return self.cpu
        if resource in BYTE_RESOURCES or resource.startswith(BYTE_PREFIXES):
            return self.memory
        return self.pods if resource == "pods" else self.other

    def of(self, resource: str) -> Fraction:
        return quantities.parse(self.spelled(resource))


DEFAULT_MAXIMA = Maxima()


@dataclass(frozen=True, slots=True)
class Checked:
    values: dict[str, Fraction]
    """The figures that passed, exact."""
    refused: dict[str, str]
    """Resource → why its figure was refused, the figure quoted (at most 40 characters)."""


def check(figures: Mapping[str, str], maxima: Maxima = DEFAULT_MAXIMA) -> Checked:
    """Each figure of one report section, refused when not a quantity, negative or above its maximum."""
    values: dict[str, Fraction] = {}
    refused: dict[str, str] = {}
    for resource, text in figures.items():
        shown = repr(str(text)[:40])
        if not quantities.is_valid(text):
            refused[resource] = f"{shown} is not a Kubernetes quantity"
            continue
        value = quantities.parse(text)
        if value < 0:
            refused[resource] = f"{shown} is negative"
        elif value > maxima.of(resource):
            refused[resource] = f"{shown} is more than a pool may report (at most {maxima.spelled(resource)})"
        else:
            values[resource] = value
    return Checked(values, refused)


def within_int64(resource: str, value: Fraction) -> Fraction:
    """A sum of pools' figures kept within what Kubernetes holds in an int64 (CPUs in millicores)."""
    bound = Fraction(INT64_MAX, 1000) if resource == "cpu" else Fraction(INT64_MAX)
    return min(value, bound)


@dataclass(frozen=True, slots=True)
class RecentUsage:
    """A pool's own figure of what its jobs that ended recently used (``ResourceReport.usage_recent``), checked."""

    cpu_seconds: int
    memory_byte_seconds: int
    gpu_seconds: int
    window_seconds: int
    refused: dict[str, str]
    """Figure (``usage.cpu``, ...) → why it was clamped."""


GPU_RESOURCE = "nvidia.com/gpu"
MIB = 2**20


def recent_usage(
    millicpu_seconds: int,
    memory_mib_seconds: int,
    milligpu_seconds: int,
    wall_millis: int,
    window_seconds: int,
    capacity: Mapping[str, Fraction],
) -> RecentUsage:
    """A pool's recent usage as it reported it, each figure clamped: a negative one to 0, one above what the pool's
    checked ``capacity`` could have held for the jobs' summed run time (``wall_millis``) to that, and every one to
    an int64. Only shown (the MasterQueue's status), never a quota; the per-pod bound is the gateway's."""
    refused: dict[str, str] = {}
    wall = Fraction(_clamped("usage.wall", wall_millis, INT64_MAX, refused), 1000)
    gpus = capacity.get(GPU_RESOURCE, Fraction(0))
    figures = (
        ("usage.cpu", Fraction(millicpu_seconds, 1000), capacity.get("cpu", Fraction(0)) * wall),
        ("usage.memory", Fraction(memory_mib_seconds) * MIB, capacity.get("memory", Fraction(0)) * wall),
        ("usage.gpu", Fraction(milligpu_seconds, 1000), gpus * wall),
    )
    cap = Fraction(INT64_MAX)
    cpu, memory, gpu = (_clamped(name, value, min(most, cap), refused) for name, value, most in figures)
    return RecentUsage(cpu, memory, gpu, max(0, window_seconds), refused)


def _clamped(name: str, value: Fraction | int, most: Fraction | int, refused: dict[str, str]) -> int:
    if value < 0:
        refused[name] = f"{float(value):.6g} is negative: shown as 0"
        return 0
    if value > most:
        refused[name] = f"{float(value):.6g} is more than the pool's capacity could hold: shown as {int(most)}"
        return int(most)
    return round(value)
