"""A MasterQueue's ``status`` as the controller writes it: pure, from the reconcile's ``Desired``.

Apart from the runner so the status shape (what ``kubectl get mq`` prints, see the CRD's printer columns)
has one place, and the runner only decides when to write it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping
from typing import Any

from interlink_nats.controller.capacity import Admission
from interlink_nats.controller.reconcile import Desired, PoolState

VOLATILE = frozenset({"lastReport", "free", "used", "quota", "queuedJobs", "reason", "refused", "usageLastHour"})
"""Pool fields that move with every report: written at most every ``status_refresh_s`` (states at once; the
quota Kueue uses is in the ClusterQueue, written at once)."""


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    with contextlib.suppress(ValueError):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def pool_rows(desired: Desired | None) -> list[dict[str, Any]]:
    """``status.pools``: one row per pool the MasterQueue selects (live ones with their admission figures)."""
    pools = []
    for p in desired.pools if desired else []:
        row: dict[str, Any] = {
            "name": p.pool,
            "flavorGroup": p.group,
            "resourceFlavor": p.flavor,
            "state": str(p.state),
            "lastReport": rfc3339(p.last_report),
            "capacity": dict(p.capacity),
        }
        if p.state is PoolState.LIVE:
            row["admission"] = str(p.admission)
            row["quota"] = dict(p.quota)
            row["used"] = dict(p.used)
            row["queuedJobs"] = p.queued_jobs
            if p.free:
                row["free"] = dict(p.free)
            if p.reason:
                row["reason"] = p.reason
        elif p.state is PoolState.TIMED_OUT:
            row["admission"] = str(Admission.STALE)
        if p.usage is not None:
            row["usageLastHour"] = {
                "cpuSeconds": p.usage.cpu_seconds,
                "memoryByteSeconds": p.usage.memory_byte_seconds,
                "gpuSeconds": p.usage.gpu_seconds,
                "windowSeconds": p.usage.window_seconds,
            }
        if p.refused:
            row["refused"] = dict(p.refused)
        if p.labels:
            row["labels"] = dict(p.labels)
        if p.taints:
            row["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in p.taints]
        pools.append(row)
    return pools


def status_of(
    body: Mapping[str, Any], version: str, error: str | None, parsed: bool, desired: Desired | None
) -> dict[str, Any]:
    """The whole status of one MasterQueue (``error``: why its spec can't be used)."""
    if error:
        condition = {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": error[:1024]}
    else:
        live = desired.pools_live if desired else 0
        condition = {"type": "Ready", "status": "True", "reason": "Reconciled", "message": f"{live} pool(s) live"}
    status: dict[str, Any] = {
        "observedGeneration": int(body.get("metadata", {}).get("generation") or 0),
        "kueueAPIVersion": version,
        "poolsLive": desired.pools_live if desired else 0,
        "pools": pool_rows(desired),
        "conditions": [condition],
    }
    if not parsed:
        status.pop("pools")
    return status


def without_volatile(status: Mapping[str, Any] | None) -> Any:
    """The status without what moves on its own (times, live figures): a difference here is written at once."""
    if status is None:
        return None
    out = {k: v for k, v in status.items() if k != "conditions"}
    out["pools"] = [{k: v for k, v in p.items() if k not in VOLATILE} for p in status.get("pools") or []]
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
    ]
    return out
