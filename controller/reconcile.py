"""The pure reconcile: (MasterQueue, pool reports, Kueue API version, now) → desired Kueue objects.

No I/O and no clock of its own (``now`` is an argument), so the same inputs always give the same
objects; the controller compares them with what it last applied and writes only differences.

Mapping (see docs/controller.md):

- one ResourceFlavor per (MasterQueue, flavor group, live pool), named ``<mq>-<group>-<pool>``:
  ``nodeLabels`` pin to the virtual node, ``nodeTaints`` keep non-offloadable pods off it,
  ``tolerations`` make Kueue inject ``pool.vk.io=<pool>:NoSchedule`` into admitted pods;
- the master ClusterQueue (named like the MasterQueue) in the template's cohort lists every live
  pool (quota = min(reported, nominalQuota) per covered resource) and every local flavor
  (quota = nominalQuota), with ``lendingLimit`` = what its ``canLendTo`` queues may take ("0" when none);
- each ``canLendTo`` queue is a ClusterQueue in the same cohort listing the lender's flavors with
  ``nominalQuota: 0`` and ``borrowingLimit`` = its ``lendingLimit`` (capped at the quota), per pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from interlink_nats.controller import capacity
from interlink_nats.controller.capacity import Admission, Memory, PoolLoad
from interlink_nats.controller.model import (
    GROUP,
    KIND,
    VERSION,
    FlavorGroup,
    MasterQueue,
    NatsSource,
    PoolReport,
    Taint,
)
from interlink_nats.kernel import quantities
from interlink_nats.kernel.names import is_dns_label, is_label_value, is_qualified_name
from interlink_nats.kernel.reported import RecentUsage

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
DEFAULT_KUEUE_VERSION = "v1beta2"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kueue-nats"
MASTERQUEUE_LABEL = "vk.io/masterqueue"
POOL_LABEL = "vk.io/pool"
POOL_TOLERATION_KEY = "pool.vk.io"
NO_SCHEDULE_TAINT_KEY = "virtual-node.interlink/no-schedule"
VIRTUAL_NODE_LABEL = "kubernetes.io/hostname"

MAX_FLAVORS_PER_GROUP = 64
"""Kueue's CRD caps a resource group at 64 flavors, and a resource may sit in one group only."""
MAX_TAINTS = 8

_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


class PoolState(StrEnum):
    LIVE = "Live"
    TIMED_OUT = "TimedOut"
    EXCLUDED = "Excluded"
    """Live, but beyond Kueue's 64 flavors per resource group."""


@dataclass(frozen=True)
class PoolStatus:
    """One row of ``status.pools``."""

    pool: str
    group: str
    flavor: str
    state: PoolState
    last_report: float | None
    capacity: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    free: Mapping[str, str] = field(default_factory=dict)
    used: Mapping[str, str] = field(default_factory=dict)
    """What this pool's admitted workloads hold (Kueue's reservation of its flavor)."""
    quota: Mapping[str, str] = field(default_factory=dict)
    queued_jobs: int = 0
    admission: Admission = Admission.OPEN
    reason: str = ""
    refused: Mapping[str, str] = field(default_factory=dict)
    """The report's figures refused as not a quantity, negative or absurd (``PoolReport.refused``)."""
    usage: RecentUsage | None = None
    """What the pool's jobs that ended within its usage window used (``PoolReport.usage``)."""


@dataclass
class Desired:
    """Everything one MasterQueue wants to exist, in apply order (flavors before queues)."""

    flavors: list[dict[str, Any]] = field(default_factory=list)
    cluster_queues: list[dict[str, Any]] = field(default_factory=list)
    pools: list[PoolStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    memory: dict[str, Memory] = field(default_factory=dict)
    """Each live pool's capacity memory by flavor name, for the next pass (``capacity.decide``)."""

    @property
    def pools_live(self) -> int:
        return sum(1 for p in self.pools if p.state is PoolState.LIVE)

    def objects(self) -> list[dict[str, Any]]:
        return [*self.flavors, *self.cluster_queues]


@dataclass(frozen=True)
class _Entry:
    """One flavor of the master queue with its quota per covered resource."""

    group: FlavorGroup
    flavor: str
    quota: Mapping[str, str]


def flavor_name(mq: str, group: str, pool: str) -> str:
    return f"{mq}-{group}-{pool}"


def is_valid_label(key: str, value: str) -> bool:
    """Kubernetes' label rules (a pool's report is untrusted: ``"v\n"`` once passed a ``$``-anchored match)."""
    return is_qualified_name(key) and is_label_value(value)


def pool_state(report: PoolReport, group: FlavorGroup, now: float | None) -> PoolState | None:
    """Live within ``poolTimeout``; TimedOut (flavor kept, out of the queues) for ``flavorRetention``; then gone."""
    assert group.nats is not None
    if now is None:
        return PoolState.LIVE
    age = now - report.received_at
    if age <= group.nats.pool_timeout:
        return PoolState.LIVE
    if age <= group.nats.pool_timeout + group.nats.flavor_retention:
        return PoolState.TIMED_OUT
    return None


def pool_load(report: PoolReport, used: Mapping[str, str] | None, now: float | None) -> PoolLoad:
    """The capacity policy's inputs for one pool: its report's figures and Kueue's reservation."""
    return PoolLoad(
        total=report.capacity,
        free=report.free,
        used=used,
        queued_jobs=report.queued_jobs,
        oldest_pending_s=report.oldest_pending_s,
        attempts=report.attempts,
        failures=report.failures,
        age_s=0.0 if now is None else max(0.0, now - report.received_at),
        interval_s=report.interval_s,
    )


def _owner(mq: MasterQueue) -> list[dict[str, Any]]:
    if not mq.uid:
        return []
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": mq.name,
            "uid": mq.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def _metadata(mq: MasterQueue, name: str, extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    labels = dict(extra_labels or {})
    labels[MANAGED_BY_LABEL] = MANAGED_BY
    labels[MASTERQUEUE_LABEL] = mq.name
    metadata: dict[str, Any] = {"name": name, "labels": dict(sorted(labels.items()))}
    owners = _owner(mq)
    if owners:
        metadata["ownerReferences"] = owners
    return metadata


def resource_flavor(
    mq: MasterQueue, group: FlavorGroup, report: PoolReport, api_version: str, warnings: list[str]
) -> dict[str, Any]:
    """The ResourceFlavor of one pool."""
    assert group.nats is not None
    pool = report.pool
    labels = {k: v for k, v in report.labels.items() if is_valid_label(k, v)}
    if len(labels) != len(report.labels):
        warnings.append(f"pool {pool}: dropped reported labels that are not valid Kubernetes labels")
    labels[POOL_LABEL] = pool
    taints: list[dict[str, str]] = [{"key": NO_SCHEDULE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    for taint in report.taints:
        if taint.effect not in _TAINT_EFFECTS or not is_valid_label(taint.key, taint.value):
            warnings.append(f"pool {pool}: dropped invalid reported taint {taint.key}={taint.value}:{taint.effect}")
            continue
        entry = {"key": taint.key, "effect": taint.effect}
        if taint.value:
            entry["value"] = taint.value
        if entry not in taints:
            taints.append(entry)
    if len(taints) > MAX_TAINTS:
        warnings.append(f"pool {pool}: more than {MAX_TAINTS} taints; kept the first {MAX_TAINTS}")
        taints = taints[:MAX_TAINTS]
    spec: dict[str, Any] = {}
    if group.nats.virtual_node:
        spec["nodeLabels"] = {VIRTUAL_NODE_LABEL: group.nats.virtual_node}
    spec["nodeTaints"] = taints
    spec["tolerations"] = [{"key": POOL_TOLERATION_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "ResourceFlavor",
        "metadata": _metadata(mq, flavor_name(mq.name, group.name, pool), labels),
        "spec": spec,
    }


_FUNGIBILITY_TO_V1BETA2 = {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}
_LEGACY_STOP_POLICY = {"Stop": "Hold", "StopAndHold": "HoldAndDrain"}


def queue_spec_base(template: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """The template as a ClusterQueue spec of the served Kueue version (``cohort`` ↔ ``cohortName`` and friends)."""
    spec = {k: v for k, v in template.items() if k not in {"cohort", "cohortName", "admissionChecks"}}
    cohort = template.get("cohort") or template.get("cohortName")
    if api_version == "v1beta2":
        spec["cohortName"] = cohort
        checks = template.get("admissionChecks")
        if checks and "admissionChecksStrategy" not in spec:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": str(c)} for c in checks]}
        fungibility = spec.get("flavorFungibility")
        if isinstance(fungibility, Mapping):
            spec["flavorFungibility"] = {
                k: _FUNGIBILITY_TO_V1BETA2.get(v, v) if isinstance(v, str) else v for k, v in fungibility.items()
            }
    else:
        spec["cohort"] = cohort
        if template.get("admissionChecks") and "admissionChecksStrategy" not in spec:
            spec["admissionChecks"] = list(template["admissionChecks"])
    if spec.get("stopPolicy") in _LEGACY_STOP_POLICY:
        spec["stopPolicy"] = _LEGACY_STOP_POLICY[spec["stopPolicy"]]
    spec.setdefault("namespaceSelector", {})  # null would mean "no namespace may use the queue"
    return spec


def _cluster_queue(mq: MasterQueue, name: str, api_version: str, flavors: list[dict[str, Any]]) -> dict[str, Any]:
    spec = queue_spec_base(mq.template, api_version)
    spec["resourceGroups"] = [{"coveredResources": list(mq.covered_resources), "flavors": flavors}] if flavors else []
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "ClusterQueue",
        "metadata": _metadata(mq, name),
        "spec": spec,
    }


def _lend_limit(limit: Mapping[str, str], resource: str, quota: str) -> str:
    """A canLendTo limit for one resource, capped at the quota (an absent resource lends the whole quota)."""
    return quantities.minimum(limit[resource], quota) if resource in limit else quota


def queue_names(mq: MasterQueue) -> list[str]:
    """The ClusterQueues a MasterQueue makes: its own, then each ``canLendTo`` queue once."""
    names = [mq.name]
    for group in mq.flavors:
        names.extend(t.queue for t in group.can_lend_to if t.queue not in names)
    return names


def kueue_usage(queues: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """What admitted workloads hold per flavor, summed over these ClusterQueues (``status.flavorsReservation``,
    else ``flavorsUsage``): a pool's flavor is lent to the borrowers, whose use counts too. Bad entries count 0."""
    totals: dict[str, dict[str, Any]] = {}
    for queue in queues:
        status = queue.get("status") if isinstance(queue, Mapping) else None
        if not isinstance(status, Mapping):
            continue
        rows = status.get("flavorsReservation") or status.get("flavorsUsage") or []
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, Mapping) or not isinstance(row.get("name"), str):
                continue
            flavor = totals.setdefault(row["name"], {})
            for res in row.get("resources") or []:
                if (
                    isinstance(res, Mapping)
                    and isinstance(res.get("name"), str)
                    and quantities.is_valid(res.get("total"))
                ):
                    flavor[res["name"]] = flavor.get(res["name"], 0) + quantities.parse(res["total"])
    return {f: {r: quantities.format_quantity(v, r) for r, v in res.items()} for f, res in totals.items()}


def reconcile(
    mq: MasterQueue,
    reports: Mapping[NatsSource, Mapping[str, PoolReport]],
    api_version: str = DEFAULT_KUEUE_VERSION,
    now: float | None = None,
    usage: Mapping[str, Mapping[str, str]] | None = None,
    memory: Mapping[str, Memory] | None = None,
) -> Desired:
    """Desired ResourceFlavors and ClusterQueues of one MasterQueue; ``now=None`` treats every report as live.

    ``usage``: Kueue's reservation per flavor name (what each pool's admitted workloads hold);
    ``memory``: each pool's ``capacity.Memory`` from the previous pass (``Desired.memory`` is the next).
    """
    if api_version not in KUEUE_VERSIONS:
        raise ValueError(f"unsupported Kueue API version {api_version!r} (one of {KUEUE_VERSIONS})")
    desired = Desired()
    covered = mq.covered_resources
    entries: list[_Entry] = []
    for group in mq.flavors:
        if group.nats is None:
            quota = {r: group.nominal_quota.get(r, "0") for r in covered}
            entries.append(_Entry(group, group.name, quota))
            continue
        known = reports.get(group.nats.source, {})
        if group.nats.pools is not None:
            candidates = [p for p in group.nats.pools if p in known]
        else:
            candidates = sorted(p for p in known if group.nats.selects(p))
        for pool in candidates:
            if not is_dns_label(pool):
                desired.warnings.append(f"pool {pool!r}: not a DNS label; ignored")
                continue
            report = known[pool]
            state = pool_state(report, group, now)
            if state is None:
                continue
            name = flavor_name(mq.name, group.name, pool)
            if state is PoolState.LIVE and len(entries) >= MAX_FLAVORS_PER_GROUP:
                state = PoolState.EXCLUDED
                desired.warnings.append(
                    f"pool {pool}: left out, a ClusterQueue holds at most {MAX_FLAVORS_PER_GROUP} flavors"
                )
            used = dict((usage or {}).get(name) or {})
            decision = None
            previous = (memory or {}).get(name) or Memory()
            desired.memory[name] = previous  # kept while it is timed out: a flapping pool keeps its back-off
            if state is PoolState.LIVE:
                at = now if now is not None else report.received_at
                decision = capacity.decide(
                    group.nats.capacity, pool_load(report, used, now), group.nominal_quota, covered, previous, at
                )
                desired.memory[name] = decision.memory
            desired.pools.append(
                PoolStatus(
                    pool,
                    group.name,
                    name,
                    state,
                    report.received_at,
                    dict(report.capacity),
                    dict(report.labels),
                    report.taints,
                    free=dict(report.free),
                    used=used,
                    quota=decision.quota if decision else {},
                    queued_jobs=report.queued_jobs,
                    admission=decision.admission if decision else Admission.STALE,
                    reason=decision.reason if decision else "",
                    refused=dict(report.refused),
                    usage=report.usage,
                )
            )
            if state is PoolState.EXCLUDED:
                continue
            for resource, why in sorted(report.refused.items()):
                instead = (
                    "its total stands in"
                    if resource.startswith("free.")
                    else "shown clamped"
                    if resource.startswith("usage.")
                    else "counted as 0"
                )
                desired.warnings.append(f"pool {pool}: reported {resource}={why}; {instead}")
            desired.flavors.append(resource_flavor(mq, group, report, api_version, desired.warnings))
            if decision is not None and state is PoolState.LIVE:
                entries.append(_Entry(group, name, decision.quota))
    if len(entries) > MAX_FLAVORS_PER_GROUP:  # only local flavors can get here
        desired.warnings.append(f"more than {MAX_FLAVORS_PER_GROUP} local flavors; kept the first ones")
        entries = entries[:MAX_FLAVORS_PER_GROUP]

    master_flavors: list[dict[str, Any]] = []
    borrowers: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        targets = entry.group.can_lend_to
        resources = []
        for r in covered:
            q = entry.quota[r]
            lend = quantities.maximum(*(_lend_limit(t.lending_limit, r, q) for t in targets)) if targets else "0"
            resources.append({"name": r, "nominalQuota": q, "lendingLimit": lend})
        master_flavors.append({"name": entry.flavor, "resources": resources})
        for target in targets:
            flavors = borrowers.setdefault(target.queue, [])
            if any(f["name"] == entry.flavor for f in flavors):
                desired.warnings.append(f"queue {target.queue}: named twice in canLendTo of {entry.group.name}")
                continue
            flavors.append(
                {
                    "name": entry.flavor,
                    "resources": [
                        {
                            "name": r,
                            "nominalQuota": "0",
                            "borrowingLimit": _lend_limit(target.lending_limit, r, entry.quota[r]),
                        }
                        for r in covered
                    ],
                }
            )
    for group in mq.flavors:  # a borrower exists even while its lender has no live pool
        for target in group.can_lend_to:
            borrowers.setdefault(target.queue, [])
    desired.cluster_queues.append(_cluster_queue(mq, mq.name, api_version, master_flavors))
    for queue, flavors in borrowers.items():
        desired.cluster_queues.append(_cluster_queue(mq, queue, api_version, flavors))
    return desired
