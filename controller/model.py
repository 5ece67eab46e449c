"""The MasterQueue custom resource (``vk.io/v1``) and pool reports as typed, validated values.

Pure data: parsing a MasterQueue body never touches the network. Every error names the field
path, so a bad object shows one clear message in its status and events instead of a traceback.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from interlink_nats.controller.capacity import CapacityPolicy, Policy
from interlink_nats.kernel import quantities
from interlink_nats.kernel.names import is_dns_subdomain
from interlink_nats.kernel.reported import DEFAULT_MAXIMA, Maxima, RecentUsage, check, recent_usage

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

GROUP = "vk.io"
VERSION = "v1"
KIND = "MasterQueue"
PLURAL = "masterqueues"

DEFAULT_COVERED_RESOURCES: tuple[str, ...] = ("cpu", "memory", "pods", "nvidia.com/gpu")
"""What the original controller hard-coded; now only the default of ``spec.coveredResources``."""

DEFAULT_NATS_CONNECTOR = "nats://nats.nats:4222"
DEFAULT_NATS_SUBJECT = "interlink.resources"
DEFAULT_POOL_TIMEOUT = 60.0
DEFAULT_FLAVOR_RETENTION = 600.0
"""Seconds a timed-out pool's ResourceFlavor outlives its place in the queues (no churn for a flapping pool)."""

_RESOURCE_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)

TEMPLATE_FIELDS = frozenset(
    {
        "cohort",
        "cohortName",
        "flavorFungibility",
        "preemption",
        "stopPolicy",
        "queueingStrategy",
        "namespaceSelector",
        "fairSharing",
        "admissionChecks",
        "admissionChecksStrategy",
        "admissionScope",
    }
)
"""ClusterQueue spec fields a template may carry (``cohort`` as documented; ``cohortName`` accepted too)."""


class MasterQueueError(ValueError):
    """A MasterQueue that cannot be reconciled; ``problems`` holds one ``path: message`` per error."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class SecretRef:
    """Where NATS credentials live instead of inline in ``natsConnector``."""

    name: str
    namespace: str


@dataclass(frozen=True)
class NatsSource:
    """One NATS subscription: MasterQueues naming the same source share it."""

    connector: str
    subject: str
    secret: SecretRef | None = None

    @property
    def prefix(self) -> str:
        """``interlink.resources`` → ``interlink`` (the RPC/announcement prefix of the pools)."""
        return self.subject.rsplit(".resources", 1)[0] if self.subject.endswith(".resources") else self.subject


@dataclass(frozen=True)
class NatsFlavor:
    source: NatsSource
    virtual_node: str | None
    pools: tuple[str, ...] | None
    pool_regexp: re.Pattern[str] | None
    pool_timeout: float
    flavor_retention: float
    capacity: CapacityPolicy = field(default_factory=CapacityPolicy)

    def selects(self, pool: str) -> bool:
        """Whether a pool belongs to this group: listed in ``pools``, or ``re.search(poolRegExp, pool)``."""
        if self.pools is not None:
            return pool in self.pools
        if self.pool_regexp is not None:
            return self.pool_regexp.search(pool) is not None
        return True


@dataclass(frozen=True)
class Lending:
    queue: str
    lending_limit: Mapping[str, str]


@dataclass(frozen=True)
class FlavorGroup:
    """One ``spec.flavors[]`` entry: a NATS pool group or a local ResourceFlavor."""

    name: str
    nominal_quota: Mapping[str, str]
    can_lend_to: tuple[Lending, ...]
    nats: NatsFlavor | None

    @property
    def is_local(self) -> bool:
        return self.nats is None


@dataclass(frozen=True)
class MasterQueue:
    name: str
    uid: str
    template: Mapping[str, Any]
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorGroup, ...]
    generation: int = 0

    @property
    def cohort(self) -> str:
        return str(self.template.get("cohort") or self.template.get("cohortName"))

    def sources(self) -> set[NatsSource]:
        return {group.nats.source for group in self.flavors if group.nats is not None}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class PoolReport:
    """What the controller knows of a pool: its last report and when it arrived (epoch seconds)."""

    pool: str
    capacity: Mapping[str, str]
    received_at: float
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    reported_at: float | None = None
    refused: Mapping[str, str] = field(default_factory=dict)
    """Figures refused (``kernel.reported``: not a quantity, negative, absurd) → why: a capacity one by its
    resource (counted as 0, so never a quota), a free one as ``free.<resource>`` (its total stands in). Warned
    about by name and shown in the pool's status row."""
    free: Mapping[str, str] = field(default_factory=dict)
    """Free at the site now (checked figures only); empty: the site cannot tell."""
    queued_jobs: int = 0
    oldest_pending_s: float = 0.0
    attempts: int = 0
    failures: int = 0
    interval_s: float = 0.0
    usage: RecentUsage | None = None
    """What the pool's jobs that ended recently used, as it reported it (checked); None: it did not say."""


def report_from_proto(report: Any, received_at: float, maxima: Maxima = DEFAULT_MAXIMA) -> PoolReport:
    """A ``pb.ResourceReport`` (or anything shaped like it) as a PoolReport; figures that are not quantities,
    negative or above ``maxima`` are dropped, and kept in ``refused`` with why."""
    raw, raw_free = dict(report.capacity), dict(report.free)
    capacity, free = check(raw, maxima), check(raw_free, maxima)
    reported = report.reported_at
    recent, checked = report.usage_recent, None
    if recent is not None:
        values = capacity.values
        checked = recent_usage(
            recent.millicpu_seconds,
            recent.memory_mib_seconds,
            recent.milligpu_seconds,
            recent.wall_millis,
            int(report.usage_window_seconds),
            values,
        )
    return PoolReport(
        pool=report.pool,
        capacity={k: raw[k] for k in capacity.values},
        refused=capacity.refused
        | {f"free.{k}": why for k, why in free.refused.items()}
        | (checked.refused if checked else {}),
        received_at=received_at,
        labels=dict(report.labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in report.taints),
        reported_at=reported.timestamp() if isinstance(reported, dt.datetime) else None,
        free={k: raw_free[k] for k in free.values},
        queued_jobs=int(report.queued_jobs),
        oldest_pending_s=float(report.oldest_pending_seconds),
        attempts=int(report.recent_attempts),
        failures=min(int(report.recent_failures), int(report.recent_attempts)),
        interval_s=float(report.interval_seconds),
        usage=checked,
    )


def remembered_capacity(value: Any, maxima: Maxima = DEFAULT_MAXIMA) -> dict[str, str]:
    """A pool's capacity as a status row kept it (after a controller restart), checked as a report is: anyone
    who may edit the status could have put anything there."""
    if not isinstance(value, Mapping):
        return {}
    raw = {str(k): v for k, v in value.items() if isinstance(v, str)}
    return {k: raw[k] for k in check(raw, maxima).values}


def _seconds(value: Any, path: str, default: float, problems: list[str]) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        problems.append(f"{path}: must be a positive number of seconds")
        return default
    return float(value)


def _quotas(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be a map of resource name to quantity")
        return {}
    out: dict[str, str] = {}
    for key, raw in value.items():
        if not quantities.is_valid(raw):
            problems.append(f"{path}.{key}: invalid quantity {raw!r}")
        elif quantities.parse(raw) < 0:
            problems.append(f"{path}.{key}: must not be negative")
        else:
            out[str(key)] = quantities.normalize(raw)
    return out


SPEC_FIELDS = frozenset({"template", "coveredResources", "flavors"})
FLAVOR_FIELDS = frozenset({"name", "nominalQuota", "canLendTo", "localFlavor", "natsFlavor"})
LENDING_FIELDS = frozenset({"queue", "lendingLimit"})
NATS_FLAVOR_FIELDS = frozenset(
    {
        "natsConnector",
        "natsSecretRef",
        "natsSubject",
        "virtualNode",
        "pools",
        "poolRegExp",
        "poolTimeout",
        "flavorRetention",
        "capacity",
        "capacityPolicy",
    }
)
CAPACITY_POLICY_FIELDS: Mapping[str, tuple[str, type[int] | type[float]]] = {
    "minChangeFraction": ("min_change_fraction", float),
    "minIntervalSeconds": ("min_interval_s", float),
    "maxQueuedJobs": ("max_queued_jobs", int),
    "maxPendingSeconds": ("max_pending_s", float),
    "failureFraction": ("failure_fraction", float),
    "minAttempts": ("min_attempts", int),
    "backoffSeconds": ("backoff_s", float),
    "maxBackoffSeconds": ("max_backoff_s", float),
    "staleAfterIntervals": ("stale_after_intervals", float),
}
"""``natsFlavor.capacityPolicy`` field → ``CapacityPolicy`` attribute and kind (all ≥ 0; fractions ≤ 1)."""
SECRET_REF_FIELDS = frozenset({"name", "namespace"})
"""The fields the CRD schema declares at each level (a test keeps them equal): anything else is a typo."""


def _mapping(value: Any, path: str, problems: list[str]) -> Mapping[str, Any]:
    """``value`` if it is a mapping (absent: empty); else the problem, named by its path."""
    if value is None or isinstance(value, Mapping):
        return value or {}
    problems.append(f"{path}: must be a mapping, not {type(value).__name__}")
    return {}


def _items(value: Any, path: str, problems: list[str]) -> list[Any]:
    """``value`` if it is a list (absent: empty); else the problem, named by its path."""
    if value is None or isinstance(value, list):
        return value or []
    problems.append(f"{path}: must be a list, not {type(value).__name__}")
    return []


def _unknown(raw: Mapping[str, Any], known: frozenset[str], path: str, problems: list[str]) -> None:
    """A field the schema does not know is an error, never ignored: `pols` must not mean "no selector"."""
    for key in sorted(set(raw) - known):
        problems.append(f"{path}.{key}: unknown field (known: {', '.join(sorted(known))})")


def _nats_flavor(raw: Mapping[str, Any], path: str, problems: list[str]) -> NatsFlavor:
    _unknown(raw, NATS_FLAVOR_FIELDS, path, problems)
    secret: SecretRef | None = None
    secret_raw = raw.get("natsSecretRef")
    if secret_raw is not None:
        if not isinstance(secret_raw, Mapping) or not secret_raw.get("name") or not secret_raw.get("namespace"):
            problems.append(f"{path}.natsSecretRef: needs name and namespace")
        else:
            _unknown(secret_raw, SECRET_REF_FIELDS, f"{path}.natsSecretRef", problems)
            secret = SecretRef(str(secret_raw["name"]), str(secret_raw["namespace"]))
    pools_raw = raw.get("pools")
    regexp_raw = raw.get("poolRegExp")
    pools: tuple[str, ...] | None = None
    regexp: re.Pattern[str] | None = None
    if pools_raw is not None and regexp_raw is not None:
        problems.append(f"{path}: set either pools or poolRegExp, not both")
    if pools_raw is None and regexp_raw is None:
        problems.append(f"{path}: set pools or poolRegExp (a flavor that names neither would select every pool)")
    if pools_raw is not None:
        if not isinstance(pools_raw, list) or not all(isinstance(p, str) for p in pools_raw):
            problems.append(f"{path}.pools: must be a list of pool names")
        else:
            pools = tuple(dict.fromkeys(pools_raw))
    elif regexp_raw is not None:
        try:
            regexp = re.compile(str(regexp_raw))
        except re.error as exc:
            problems.append(f"{path}.poolRegExp: not a Python regular expression: {exc}")
    subject = str(raw.get("natsSubject") or DEFAULT_NATS_SUBJECT)
    if any(c in subject for c in " *>") or subject.startswith(".") or subject.endswith("."):
        problems.append(f"{path}.natsSubject: must be a literal NATS subject (no wildcards)")
    return NatsFlavor(
        source=NatsSource(str(raw.get("natsConnector") or DEFAULT_NATS_CONNECTOR), subject, secret),
        virtual_node=str(raw["virtualNode"]) if raw.get("virtualNode") else None,
        pools=pools,
        pool_regexp=regexp,
        pool_timeout=_seconds(raw.get("poolTimeout"), f"{path}.poolTimeout", DEFAULT_POOL_TIMEOUT, problems),
        flavor_retention=_seconds(
            raw.get("flavorRetention"), f"{path}.flavorRetention", DEFAULT_FLAVOR_RETENTION, problems
        ),
        capacity=_capacity(raw, path, problems),
    )


def _capacity(raw: Mapping[str, Any], path: str, problems: list[str]) -> CapacityPolicy:
    """``capacity`` (Total | Free) and ``capacityPolicy`` of a NATS flavor group."""
    values: dict[str, Any] = {}
    policy = raw.get("capacity")
    if policy is not None:
        if policy not in tuple(Policy):
            problems.append(f"{path}.capacity: must be one of {', '.join(Policy)}, not {str(policy)[:40]!r}")
        else:
            values["policy"] = Policy(policy)
    settings = _mapping(raw.get("capacityPolicy"), f"{path}.capacityPolicy", problems)
    _unknown(settings, frozenset(CAPACITY_POLICY_FIELDS), f"{path}.capacityPolicy", problems)
    for key, (attribute, kind) in CAPACITY_POLICY_FIELDS.items():
        value = settings.get(key)
        if value is None:
            continue
        whole = kind is int and isinstance(value, int)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind is int and not whole) or value < 0 or not math.isfinite(value):
            what = "a whole number" if kind is int else "a number"
            problems.append(f"{path}.capacityPolicy.{key}: must be {what} ≥ 0")
        elif key.endswith("Fraction") and value > 1:
            problems.append(f"{path}.capacityPolicy.{key}: must be between 0 and 1")
        else:
            values[attribute] = kind(value)
    return CapacityPolicy(**values)


def parse_masterqueue(body: Mapping[str, Any]) -> MasterQueue:
    """Validate a MasterQueue object (as the API returns it) into a MasterQueue; raise MasterQueueError."""
    problems: list[str] = []
    metadata = _mapping(body.get("metadata"), "metadata", problems)
    spec = _mapping(body.get("spec"), "spec", problems)
    name = str(metadata.get("name") or "")
    if not is_dns_subdomain(name):
        problems.append(f"metadata.name: {name!r} is not a DNS subdomain")

    _unknown(spec, SPEC_FIELDS, "spec", problems)
    template = dict(_mapping(spec.get("template"), "spec.template", problems))
    unknown = sorted(set(template) - TEMPLATE_FIELDS)
    if unknown:
        problems.append(f"spec.template: unknown fields {unknown}")
    cohort = template.get("cohort") or template.get("cohortName")
    if not cohort:
        problems.append("spec.template.cohort: required")
    elif not is_dns_subdomain(str(cohort)):
        problems.append(f"spec.template.cohort: {cohort!r} is not a DNS subdomain")

    covered_raw = _items(spec.get("coveredResources"), "spec.coveredResources", problems) or list(
        DEFAULT_COVERED_RESOURCES
    )
    covered = tuple(dict.fromkeys(str(r) for r in covered_raw))
    if len(covered) != len(covered_raw):
        problems.append("spec.coveredResources: duplicate resource names")
    for resource in covered:
        if not _RESOURCE_NAME.fullmatch(resource):
            problems.append(f"spec.coveredResources: {resource!r} is not a resource name")
    if not 1 <= len(covered) <= 64:
        problems.append("spec.coveredResources: between 1 and 64 resources")

    groups: list[FlavorGroup] = []
    seen: set[str] = set()
    for index, item in enumerate(_items(spec.get("flavors"), "spec.flavors", problems)):
        path = f"spec.flavors[{index}]"
        raw = _mapping(item, path, problems)
        _unknown(raw, FLAVOR_FIELDS, path, problems)
        flavor_name = str(raw.get("name") or "")
        if not is_dns_subdomain(flavor_name):
            problems.append(f"{path}.name: {flavor_name!r} is not a DNS subdomain")
        if flavor_name in seen:
            problems.append(f"{path}.name: duplicate flavor {flavor_name!r}")
        seen.add(flavor_name)
        has_nats, has_local = raw.get("natsFlavor") is not None, raw.get("localFlavor") is not None
        if has_nats == has_local:
            problems.append(f"{path}: set exactly one of natsFlavor or localFlavor")
        lendings: list[Lending] = []
        for j, lend_item in enumerate(_items(raw.get("canLendTo"), f"{path}.canLendTo", problems)):
            lend = _mapping(lend_item, f"{path}.canLendTo[{j}]", problems)
            _unknown(lend, LENDING_FIELDS, f"{path}.canLendTo[{j}]", problems)
            queue = str(lend.get("queue") or "")
            if not is_dns_subdomain(queue):
                problems.append(f"{path}.canLendTo[{j}].queue: {queue!r} is not a DNS subdomain")
            if queue == name:
                problems.append(f"{path}.canLendTo[{j}].queue: cannot lend to the MasterQueue's own queue")
            lendings.append(
                Lending(queue, _quotas(lend.get("lendingLimit"), f"{path}.canLendTo[{j}].lendingLimit", problems))
            )
        groups.append(
            FlavorGroup(
                name=flavor_name,
                nominal_quota=_quotas(raw.get("nominalQuota"), f"{path}.nominalQuota", problems),
                can_lend_to=tuple(lendings),
                nats=_nats_flavor(
                    _mapping(raw["natsFlavor"], f"{path}.natsFlavor", problems), f"{path}.natsFlavor", problems
                )
                if has_nats
                else None,
            )
        )
    if problems:
        raise MasterQueueError(problems)
    return MasterQueue(
        name=name,
        uid=str(metadata.get("uid") or ""),
        template=template,
        covered_resources=covered,
        flavors=tuple(groups),
        generation=int(metadata.get("generation") or 0),
    )
