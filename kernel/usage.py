"""An ended job's usage as it travels (``pb.JobUsage`` on a ``JobStatus``): read from an encoded status, and added up.

Shared by the submitter (a pool's recent usage, announced) and the gateway (billing an ended pod once); pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


def summed(usages: Iterable[pb.JobUsage]) -> pb.JobUsage:
    """Usages added up (a pool's recent total); the source is kept only when every one has the same."""
    total = pb.JobUsage()
    sources: set[pb.UsageSource] = set()
    for u in usages:
        total.millicpu_seconds += max(0, u.millicpu_seconds)
        total.memory_mib_seconds += max(0, u.memory_mib_seconds)
        total.milligpu_seconds += max(0, u.milligpu_seconds)
        total.wall_millis += max(0, u.wall_millis)
        sources.add(u.source)
    if len(sources) == 1:
        total.source = sources.pop()
    return total


def usage_in_status(raw: bytes) -> pb.JobUsage | None:
    """The usage an encoded ``JobStatus`` carries (None: none, or unreadable)."""
    view = fastwire.read_job_status(raw)
    if view is not None:
        u = view.usage
        if u is None:
            return None
        return pb.JobUsage(
            millicpu_seconds=u.millicpu_seconds,
            memory_mib_seconds=u.memory_mib_seconds,
            milligpu_seconds=u.milligpu_seconds,
            wall_millis=u.wall_millis,
            source=pb.UsageSource(u.source) if u.source in _SOURCES else pb.UsageSource.UNSPECIFIED,
        )
    try:
        return pb.JobStatus.parse(raw).usage
    except Exception:  # betterproto2 raises several kinds for bad bytes
        return None


_SOURCES: Mapping[int, pb.UsageSource] = {int(s): s for s in pb.UsageSource}
