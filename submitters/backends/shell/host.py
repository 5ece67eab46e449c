"""This host's capacity and what of it is free now, as the ``shell`` backend announces them."""

from __future__ import annotations

import contextlib
import math
import os

from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.backends.shell.processes import mem_available, mem_total
from interlink_nats.submitters.core.backend import Capacity


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity: a cgroup or taskset may give it fewer than the host's)."""
    return len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)


async def host_capacity() -> Capacity:
    """CPUs, memory and NVIDIA GPUs (``nvidia-smi -L``, when it answers within 10 s) of this host."""
    gpus = 0
    with contextlib.suppress(Exception):
        done = await run_command(["nvidia-smi", "-L"], time_limit=10)
        gpus = sum(1 for ln in done.stdout.splitlines() if ln.startswith("GPU "))
    return Capacity(cpu_millis=host_cpus() * 1000, memory_bytes=mem_total(), gpus=gpus, nodes=1)


def host_free(*, busy: int, slots: int) -> Capacity:
    """Idle CPUs by the load average, and available memory, less the ``busy`` of the backend's ``slots``
    (a slot is a CPU: a job that sleeps still holds its slot)."""
    cpus = host_cpus()
    idle_by_load = cpus - math.ceil(os.getloadavg()[0])
    idle_by_slots = min(cpus, slots) - busy
    return Capacity(cpu_millis=max(0, min(idle_by_load, idle_by_slots)) * 1000, memory_bytes=mem_available())
