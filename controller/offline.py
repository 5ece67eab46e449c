"""Offline rendering: a MasterQueue file and a reports file → the Kueue objects as a YAML stream.

Used by ``interlink-nats controller render`` to show what the controller would apply, without a
cluster and without NATS: every report given counts as live.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from interlink_nats.controller import model, reconcile
from interlink_nats.gen.interlink_nats import v1 as pb


def load_reports(text: str, received_at: float | None = None) -> dict[str, model.PoolReport]:
    """Reports in proto3 JSON form: a list of ResourceReports, ``{"reports": [...]}`` or one report."""
    data = json.loads(text)
    if isinstance(data, Mapping) and "reports" in data:
        data = data["reports"]
    if isinstance(data, Mapping):
        data = [data]
    now = time.time() if received_at is None else received_at
    out: dict[str, model.PoolReport] = {}
    for item in data:
        report = pb.ResourceReport.from_dict(item)
        out[report.pool] = model.report_from_proto(report, now)
    return out


def load_masterqueues(text: str) -> list[dict[str, Any]]:
    """Every MasterQueue document in a YAML stream (other kinds are skipped)."""
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == model.KIND]


def render(
    bodies: Iterable[Mapping[str, Any]], reports: Mapping[str, model.PoolReport], api_version: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects (flavors first, then queues) and warnings for MasterQueues given the same reports on every source."""
    objects: list[dict[str, Any]] = []
    warnings: list[str] = []
    for body in bodies:
        mq = model.parse_masterqueue(body)
        desired = reconcile.reconcile(mq, {source: reports for source in mq.sources()}, api_version)
        objects.extend(desired.flavors)
        objects.extend(desired.cluster_queues)
        warnings.extend(f"{mq.name}: {w}" for w in desired.warnings)
    return objects, warnings


def to_yaml_stream(objects: Iterable[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False, default_flow_style=False)
