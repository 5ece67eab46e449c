"""What the site allocated to an ended job, integrated over its run time: the usage a platform team bills.

Pure, computed once, when a job's status turns terminal (``lifecycle.plan_poll``) or its pod is deleted while it
runs (``status.cancelled_status``): the batch system's own record of the allocation where the backend has one
(:class:`~submitters.core.backend.Accounted`: Slurm's TRES, with sacct's elapsed time when sacct answered), else
the pod's request; times the job's start to end. Figures are integers in small units (``pb.JobUsage``), rounded
to the nearest unit. A job that never started used nothing and gets no usage.
"""

from __future__ import annotations

from collections.abc import Iterable

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.kernel.usage import summed, usage_in_status
from interlink_nats.submitters.core.backend import Accounted, Observation

MIB = 2**20


def requested(spec: bytes) -> Accounted | None:
    """The pod's request as its stored JobScript carries it (the registry's ``spec``); None when unreadable."""
    if not spec:
        return None
    view = fastwire.read_job_script(spec)
    if view is not None:
        res = view.resources
        return Accounted() if res is None else Accounted(res.cpu_millis, res.memory_bytes, res.gpus)
    try:
        resources = pb.JobScript.parse(spec).resources
    except Exception:  # betterproto2 raises several kinds for bad bytes
        return None
    if resources is None:
        return Accounted()
    return Accounted(resources.cpu_millis, resources.memory_bytes, resources.gpus)


def usage_of(allocation: Accounted, wall_s: float, source: pb.UsageSource) -> pb.JobUsage:
    """``allocation`` held for ``wall_s`` seconds (negative figures count as nothing)."""
    wall = max(0.0, wall_s)
    return pb.JobUsage(
        millicpu_seconds=round(max(0, allocation.cpu_millis) * wall),
        memory_mib_seconds=round(max(0, allocation.memory_bytes) / MIB * wall),
        milligpu_seconds=round(max(0, allocation.gpus) * 1000 * wall),
        wall_millis=round(wall * 1000),
        source=source,
    )


def ended_usage(
    obs: Observation,
    request: Accounted | None,
    started: Iterable[float | None],
    finished: Iterable[float | None],
    *,
    now: float,
) -> pb.JobUsage | None:
    """The usage of a job that ended as ``obs`` says: the batch system's record when it has one, else ``request``.

    The run time is the batch system's elapsed time, else its start to end; where it gave neither, the pod's
    containers' first start (``started``) to their last end (``finished``, else ``now``). None: the job never
    started (nothing to bill), or neither record nor request is known.
    """
    accounted = obs.accounted
    allocation, source = (
        (accounted, pb.UsageSource.ACCOUNTING) if accounted is not None else (request, pb.UsageSource.ALLOCATION)
    )
    if allocation is None:
        return None
    if accounted is not None and accounted.elapsed_s is not None:
        return usage_of(allocation, accounted.elapsed_s, source)
    start = obs.started_at
    if start is None:
        start = min((t for t in started if t is not None), default=None)
    if start is None:
        return None
    end = obs.finished_at
    if end is None:
        end = max((t for t in finished if t is not None), default=now)
    return usage_of(allocation, end - start, source)


def deleted_usage(
    request: Accounted | None, previous: pb.JobStatus | None, *, now: float, started_at: float | None = None
) -> pb.JobUsage | None:
    """The usage of a pod deleted while its job ran: its request from the job's start (``started_at``, as the
    backend saw it; else its first container's, which the job script writes to the second) to ``now``. A job that
    had ended keeps the usage it was given then (the tombstone may supersede that event)."""
    if previous is None:
        return None
    if previous.usage is not None or previous.state in _ENDED:
        return previous.usage
    starts = [c.started_at.timestamp() for c in previous.containers if c.started_at is not None]
    start = started_at if started_at is not None else min(starts, default=None)
    if request is None or start is None:
        return None
    return usage_of(request, now - start, pb.UsageSource.ALLOCATION)


_ENDED = frozenset({pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST})


class EndedUsage:
    """What the jobs that ended within a window used, summed (the ResourceReport's ``usage_recent``), from the
    registry's rows of those jobs: (uid, revision, encoded status).

    Why it remembers: the report is made every ``announce_interval_s`` (30 s), and each job stays in the window an
    hour, so every ended job's status was read some 120 times (8 µs each for a two-container pod: about a
    millisecond of a pod's life, as much as its Submit). A job's usage is read again only when its revision
    changed; the rows given are the window, so a job that left it (or whose row was pruned) is forgotten."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, pb.JobUsage | None]] = {}

    def summed(self, rows: Iterable[tuple[str, int, bytes]]) -> pb.JobUsage:
        known = self._known
        seen: dict[str, tuple[int, pb.JobUsage | None]] = {}
        for uid, revision, raw in rows:
            hit = known.get(uid)
            seen[uid] = hit if hit is not None and hit[0] == revision else (revision, usage_in_status(raw))
        self._known = seen
        return summed(u for _, u in seen.values() if u is not None)
