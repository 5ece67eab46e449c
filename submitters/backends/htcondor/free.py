"""HTCondor's free capacity for the ResourceReport: the unclaimed slots of ``condor_status``.

Kept apart from ``parse`` so the free-capacity reading stays one small function: a partitionable
slot advertises what it has left (its dynamic children are claimed), a static slot is free whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from interlink_nats.submitters.core.backend import Capacity

UNCLAIMED = 'State == "Unclaimed" && Activity == "Idle"'
"""``condor_status -constraint``: the slots a new job could be matched to now."""
ATTRS = "Machine,Cpus,Memory,GPUs"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def parse_unclaimed(ads: Iterable[Mapping[str, Any]]) -> Capacity:
    """``condor_status -constraint UNCLAIMED -json -attributes ATTRS`` → what is free now."""
    cpus = mem_mb = gpus = 0
    machines: set[str] = set()
    for ad in ads:
        cpus += _count(ad.get("Cpus"))
        mem_mb += _count(ad.get("Memory"))
        gpus += _count(ad.get("GPUs"))
        if isinstance(ad.get("Machine"), str) and _count(ad.get("Cpus")):
            machines.add(ad["Machine"])
    return Capacity(cpu_millis=cpus * 1000, memory_bytes=mem_mb * 2**20, gpus=gpus, nodes=len(machines))
