"""Quota from live capacity: a pool's report and what Kueue says it uses → its quota and state.

Pure: the inputs of one pass plus the pool's ``Memory`` of the previous pass give a ``Decision`` and
the next memory; the runner keeps the memory between passes, so hysteresis, smoothing and back-off
are table-tested without a clock or an API server (tests/controller/test_controller_capacity.py).

- ``capacity: Total`` (default): quota = min(total, nominalQuota), as before.
- ``capacity: Free``: quota = min(used + free, total, nominalQuota), where ``used`` is what this
  pool's admitted workloads hold (Kueue's reservation of the pool's flavor) and ``free`` what the
  site has idle now; changed only when the change exceeds ``minChangeFraction``, at the start of the
  ``minIntervalSeconds`` window after it was first seen (windows aligned for all pools, so a queue's pools
  change together in one write; Kueue sees few writes, quotas do not flap).
- Whatever the policy, a pool held as ``Saturated`` (too many of its jobs wait at the site, or for too
  long; until its queue drains) or ``Failing`` (most recent submits/starts failed; back-off doubling
  on each relapse) gets quota = used: Kueue admits nothing new there. ``Stale`` (``Free`` only): the
  report is older than a few of its own intervals, so its "free" cannot be trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction

from interlink_nats.kernel import quantities


class Policy(StrEnum):
    TOTAL = "Total"
    FREE = "Free"


class Admission(StrEnum):
    """Whether Kueue may send a pool new work, and why not (``status.pools[].admission``)."""

    OPEN = "Open"
    SATURATED = "Saturated"
    FAILING = "Failing"
    STALE = "Stale"


@dataclass(frozen=True)
class CapacityPolicy:
    """A flavor group's ``capacity`` and ``capacityPolicy`` (docs/controller.md, "Quota from live capacity")."""

    policy: Policy = Policy.TOTAL
    min_change_fraction: float = 0.1
    min_interval_s: float = 10.0
    max_queued_jobs: int = 0
    """More of the pool's jobs than this waiting at the site: Saturated (0: no limit)."""
    max_pending_s: float = 0.0
    """The oldest waiting longer than this: Saturated (0: no limit). Both limits are off by default: on a
    batch site waiting is normal, and only the operator knows how long is too long."""
    failure_fraction: float = 0.5
    min_attempts: int = 3
    """Failing needs at least this many recent submits/starts, ``failure_fraction`` of them failed."""
    backoff_s: float = 30.0
    max_backoff_s: float = 960.0
    stale_after_intervals: float = 3.0


@dataclass(frozen=True)
class PoolLoad:
    """One pool's figures in one pass: its report's, and Kueue's reservation of its flavor."""

    total: Mapping[str, str]
    free: Mapping[str, str] | None = None
    """None (or empty): the site cannot tell; the total stands in for it."""
    used: Mapping[str, str] | None = None
    queued_jobs: int = 0
    oldest_pending_s: float = 0.0
    attempts: int = 0
    failures: int = 0
    age_s: float = 0.0
    """Since the report arrived."""
    interval_s: float = 0.0
    """The interval the pool announced (0: unknown, never stale)."""


@dataclass(frozen=True)
class Memory:
    """What a pool's decision needs of the previous passes."""

    admission: Admission = Admission.OPEN
    reason: str = ""
    quota: Mapping[str, str] | None = None
    """The quota last decided (what Kueue holds); None before the first decision."""
    applied_at: float = -math.inf
    pending_since: float | None = None
    """When a change large enough was first seen and held back: it is applied in the next window."""
    failing_until: float = 0.0
    backoff_s: float = 0.0
    """The next back-off (0: the policy's first); doubles at each relapse, resets once the pool is healthy."""
    probing: bool = False
    """Released from Failing while its window still shows the old failures: only a new failure holds it again."""
    last_failures: int = 0


@dataclass(frozen=True)
class Decision:
    quota: dict[str, str]
    admission: Admission
    reason: str
    memory: Memory


def _q(value: str | None) -> Fraction:
    """A quantity that may be missing or malformed (a pool's report): 0 then, never an exception."""
    if value is None or not quantities.is_valid(value):
        return Fraction(0)
    return max(Fraction(0), quantities.parse(value))


def capped(total: Mapping[str, str], nominal: Mapping[str, str], covered: Sequence[str]) -> dict[str, str]:
    """min(total, nominalQuota) per covered resource; unreported → 0; no nominal → the total."""
    out: dict[str, str] = {}
    for resource in covered:
        reported = total.get(resource, "0")
        if not quantities.is_valid(reported) or quantities.parse(reported) < 0:
            reported = "0"
        bound = nominal.get(resource)
        out[resource] = quantities.minimum(reported, bound) if bound is not None else quantities.normalize(reported)
    return out


def _within(values: Mapping[str, Fraction], cap: Mapping[str, str]) -> dict[str, str]:
    """Each value capped, spelled as the cap when it reaches it (no churn), else compactly (``10Gi``)."""
    return {r: cap[r] if v >= _q(cap[r]) else quantities.format_quantity(v, r) for r, v in values.items()}


def _held(load: PoolLoad, cap: Mapping[str, str]) -> dict[str, str]:
    """Quota = what the pool's admitted workloads use: Kueue admits nothing more there."""
    used = load.used or {}
    return _within({r: _q(used.get(r)) for r in cap}, cap)


def _open(policy: CapacityPolicy, load: PoolLoad, cap: Mapping[str, str]) -> dict[str, str]:
    if policy.policy is Policy.TOTAL or not load.free:
        return dict(cap)
    used, free = load.used or {}, load.free
    return _within({r: _q(used.get(r)) + _q(free.get(r, load.total.get(r))) for r in cap}, cap)


def _changed_enough(old: Mapping[str, str], new: Mapping[str, str], fraction: float) -> bool:
    for resource in set(old) | set(new):
        a, b = _q(old.get(resource)), _q(new.get(resource))
        if a != b and (a == 0 or abs(b - a) > Fraction(fraction) * a):
            return True
    return False


def _same_window(since: float, now: float, interval_s: float) -> bool:
    """Whether ``now`` is in the same interval window as ``since`` (when a change was first seen). Windows are
    aligned to multiples of the interval for every pool, so the changes of all of a queue's pools seen in one
    window are applied together in the first pass of the next: one ClusterQueue write per window, not per pool."""
    if interval_s <= 0:
        return False
    return math.floor(now / interval_s) == math.floor(since / interval_s)


def _failing(policy: CapacityPolicy, load: PoolLoad) -> bool:
    return load.attempts >= max(1, policy.min_attempts) and load.failures >= policy.failure_fraction * load.attempts


def admission(policy: CapacityPolicy, load: PoolLoad, memory: Memory, now: float) -> tuple[Admission, str, Memory]:
    """The pool's state: Failing before Saturated before Stale before Open (with the memory to keep)."""
    failing = _failing(policy, load)
    new_failure = load.failures > memory.last_failures
    memory = replace(memory, last_failures=load.failures)
    if memory.admission is Admission.FAILING and now < memory.failing_until:
        return Admission.FAILING, memory.reason, memory
    if memory.admission is Admission.FAILING:  # back-off over: let it try again
        memory = replace(memory, probing=True)
    elif failing and (not memory.probing or new_failure):
        backoff = memory.backoff_s or policy.backoff_s
        reason = f"{load.failures} of its last {load.attempts} submissions/starts failed; no new work for {backoff:g}s"
        memory = replace(
            memory,
            failing_until=now + backoff,
            backoff_s=min(policy.max_backoff_s, backoff * 2),
            probing=False,
        )
        return Admission.FAILING, reason, memory
    if not failing:
        memory = replace(memory, probing=False, backoff_s=0.0)
    too_many = policy.max_queued_jobs > 0 and load.queued_jobs > policy.max_queued_jobs
    too_old = policy.max_pending_s > 0 and load.oldest_pending_s > policy.max_pending_s
    if too_many or too_old or (memory.admission is Admission.SATURATED and load.queued_jobs > 0):
        reason = (
            f"{load.queued_jobs} of its jobs wait at the site, the oldest for {load.oldest_pending_s:.0f}s; "
            "no new work until they start"
        )
        return Admission.SATURATED, reason, memory
    if (
        policy.policy is Policy.FREE
        and load.interval_s > 0
        and load.age_s > policy.stale_after_intervals * load.interval_s
    ):
        return Admission.STALE, f"its last report is {load.age_s:.0f}s old; its free capacity is unknown", memory
    return Admission.OPEN, "", memory


def decide(
    policy: CapacityPolicy,
    load: PoolLoad,
    nominal: Mapping[str, str],
    covered: Sequence[str],
    memory: Memory,
    now: float,
) -> Decision:
    """One pool's quota and state for this pass, and what to remember for the next."""
    cap = capped(load.total, nominal, covered)
    state, reason, memory = admission(policy, load, memory, now)
    target = _open(policy, load, cap) if state is Admission.OPEN else _held(load, cap)
    previous = memory.quota
    smoothed = (
        policy.policy is Policy.FREE
        and previous is not None
        and state is memory.admission
        and set(previous) == set(target)
        and target != previous
    )
    if smoothed and previous is not None:
        if not _changed_enough(previous, target, policy.min_change_fraction):
            target, memory = dict(previous), replace(memory, pending_since=None)
        else:
            since = memory.pending_since if memory.pending_since is not None else now
            if _same_window(since, now, policy.min_interval_s):
                target, memory = dict(previous), replace(memory, pending_since=since)
            else:
                memory = replace(memory, quota=dict(target), applied_at=now, pending_since=None)
    elif target != previous:
        memory = replace(memory, quota=dict(target), applied_at=now, pending_since=None)
    else:
        memory = replace(memory, pending_since=None)  # a change that went back before its window: forgotten
    memory = replace(memory, admission=state, reason=reason)
    return Decision(target, state, reason, memory)


def remembered(row: Mapping[str, object], policy: CapacityPolicy, now: float) -> Memory | None:
    """A pool's memory from its ``status.pools`` row after a controller restart: a pool held as ``Failing``
    stays held for a fresh back-off, a ``Saturated`` one until its queue drains (else a restart would open
    every held pool at once). Anything unexpected in the row gives no memory, never an error."""
    admission = row.get("admission")
    reason = row.get("reason")
    quota = row.get("quota")
    if admission not in (Admission.FAILING, Admission.SATURATED):
        return None
    kept = {str(k): str(v) for k, v in quota.items() if quantities.is_valid(v)} if isinstance(quota, Mapping) else None
    memory = Memory(admission=Admission(str(admission)), reason=str(reason or ""), quota=kept or None, applied_at=now)
    if memory.admission is Admission.FAILING:
        memory = replace(
            memory, failing_until=now + policy.backoff_s, backoff_s=min(policy.max_backoff_s, policy.backoff_s * 2)
        )
    return memory
