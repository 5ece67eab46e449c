"""How the pool fares at its site, for the ResourceReport: its jobs waiting in the site's
queue and its recent submit/start failures.

Pure (the caller passes the time), so the counting rules are tested directly; the runtime feeds
``FailureWindow`` from the submission path and the poller, and the announcer reads both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.submitters.core.backend import Capacity


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """This pool's jobs the site has not started yet."""

    queued: int = 0
    oldest_pending_s: float = 0.0


def queue_load(submitted_at: Iterable[float], now: float) -> QueueLoad:
    """From the submission times (epoch seconds) of the pool's jobs still waiting at the site."""
    times = list(submitted_at)
    if not times:
        return QueueLoad()
    return QueueLoad(len(times), max(0.0, now - min(times)))


class FailureWindow:
    """Outcomes (ok / failed) of the pool's recent submissions and job starts, kept for ``window_s``.

    Why a time window, not a count: a pool that stopped receiving work (held as ``Failing``) must
    forget its failures after a while, or the controller would never let it try again.
    """

    def __init__(self, window_s: float, max_entries: int = 10_000) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, bool]] = deque(maxlen=max_entries)

    def record(self, ok: bool, now: float) -> None:
        self._events.append((now, ok))

    def counts(self, now: float) -> tuple[int, int]:
        """(attempts, failures) within the window ending at ``now``."""
        horizon = now - self.window_s
        while self._events and self._events[0][0] < horizon:
            self._events.popleft()
        failures = sum(1 for _, ok in self._events if not ok)
        return len(self._events), failures


def requested_by(raw: bytes) -> Capacity | None:
    """What one stored JobScript asks of the site (None: it does not parse). Read by ``fastwire``'s view,
    betterproto2 only for what the view does not take: a report sums every live job's, each announcement."""
    view = fastwire.read_job_script(raw)
    if view is not None:
        resources: fastwire.ResourceRequestView | pb.ResourceRequest | None = view.resources
    else:
        try:
            resources = pb.JobScript.parse(raw).resources
        except Exception:  # betterproto2 raises several kinds for bad bytes
            return None
    if resources is None:
        return Capacity()
    return Capacity(
        cpu_millis=max(0, resources.cpu_millis),
        memory_bytes=max(0, resources.memory_bytes),
        gpus=max(0, resources.gpus),
    )


def _summed(requests: Iterable[Capacity]) -> Capacity:
    cpu = mem = gpus = 0
    for c in requests:
        cpu += c.cpu_millis
        mem += c.memory_bytes
        gpus += c.gpus
    return Capacity(cpu_millis=cpu, memory_bytes=mem, gpus=gpus)


@dataclass(slots=True)
class HeldTally:
    """What unfinished jobs asked of the site, summed (a spec that does not parse counts as nothing), each job's
    request read once (by uid) rather than at every announcement: a pool with thousands of jobs queued at its
    site read every stored JobScript at each announcement (0.27 ms each by betterproto2, on the event loop)."""

    _by_uid: dict[str, Capacity | None] = field(default_factory=dict)

    def held(self, specs: Mapping[str, bytes]) -> Capacity:
        """The sum over ``specs`` (uid -> stored JobScript: the registry writes it once, at the claim); jobs no
        longer in it are forgotten."""
        known = self._by_uid
        self._by_uid = {uid: known[uid] if uid in known else requested_by(raw) for uid, raw in specs.items()}
        return _summed(c for c in self._by_uid.values() if c is not None)
