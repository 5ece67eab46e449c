"""A pool's report never becomes an absurd quota: with no ``nominalQuota``, a reported
``cpu: 1e18`` was the ClusterQueue's quota. Figures that are not quantities, negative or above the controller's
``--max-reported-*`` are refused: counted as 0 for that pool only, warned about, and listed in the pool's status
row (``refused``). Pure: reports decoded as the listener decodes them, then reconcile and the status rows."""

from __future__ import annotations

from typing import Any

import pytest
from interlink_nats.controller import listening, model, reconcile, status
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.kernel.reported import Maxima
from test_controller_reconcile import SOURCE, mq_body
from typer.testing import CliRunner

from interlink_nats.cli import app

NO_NOMINAL = [{"name": "hpc", "natsFlavor": {"virtualNode": "vk", "poolRegExp": "^p"}}]


def decided(*reports: pb.ResourceReport, store: listening.ReportStore | None = None, **flavor: Any) -> Any:
    store = store or listening.ReportStore(clock=ManualClock(start=1000.0))
    for report in reports:
        assert store.accept(SOURCE, bytes(report))
    flavors = [{**NO_NOMINAL[0], "natsFlavor": {**NO_NOMINAL[0]["natsFlavor"], **flavor}}]
    mq = model.parse_masterqueue(mq_body(flavors=flavors, coveredResources=["cpu", "memory"]))
    return reconcile.reconcile(mq, store.view(), now=1000.0)


def quotas(desired: reconcile.Desired) -> dict[str, dict[str, str]]:
    [group] = desired.cluster_queues[0]["spec"]["resourceGroups"]
    return {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}


@pytest.mark.parametrize(
    ("figure", "why"),
    [
        ("1e18", "'1e18' is more than a pool may report (at most 10M)"),
        ("12345678901234567890123456789012345678", "is more than a pool may report"),
        ("-1000", "'-1000' is negative"),
        ("NaN", "'NaN' is not a Kubernetes quantity"),
    ],
)
def test_an_absurd_figure_is_no_quota_and_the_status_row_says_why(figure: str, why: str) -> None:
    desired = decided(
        pb.ResourceReport(pool="pa", capacity={"cpu": "64", "memory": "256Gi"}),
        pb.ResourceReport(pool="pb", capacity={"cpu": figure, "memory": "64Gi"}),
    )
    assert quotas(desired) == {
        "mq-hpc-pa": {"cpu": "64", "memory": "256Gi"},
        "mq-hpc-pb": {"cpu": "0", "memory": "64Gi"},  # only its own share of that resource is gone
    }
    rows = {row["name"]: row for row in status.pool_rows(desired)}
    assert why in rows["pb"]["refused"]["cpu"]
    assert rows["pb"]["capacity"] == {"memory": "64Gi"} and "refused" not in rows["pa"]
    assert any(w.startswith("pool pb: reported cpu=") and w.endswith("; counted as 0") for w in desired.warnings)


def test_an_absurd_free_figure_is_dropped_and_the_total_stands_in() -> None:
    desired = decided(
        pb.ResourceReport(pool="pa", capacity={"cpu": "64", "memory": "8Gi"}, free={"cpu": "1e30", "memory": "2Gi"}),
        capacity="Free",
    )
    assert quotas(desired) == {"mq-hpc-pa": {"cpu": "64", "memory": "2Gi"}}
    [row] = status.pool_rows(desired)
    assert row["free"] == {"memory": "2Gi"} and "free.cpu" in row["refused"]
    assert "pool pa: reported free.cpu='1e30' is more than a pool may report (at most 10M); its total stands in" in (
        desired.warnings
    )


def test_the_maxima_are_the_controllers_to_raise() -> None:
    store = listening.ReportStore(clock=ManualClock(start=1000.0), maxima=Maxima(cpu="100M"))
    desired = decided(pb.ResourceReport(pool="pa", capacity={"cpu": "20M", "memory": "1Gi"}), store=store)
    assert quotas(desired) == {"mq-hpc-pa": {"cpu": "20M", "memory": "1Gi"}}


def test_a_capacity_remembered_in_the_status_is_checked_as_a_report_is() -> None:
    """After a restart, the status row seeds the pool's report: an edited row must not become a quota either."""
    row = {"cpu": "1e18", "memory": "8Gi", "pods": "-3", "x": 5}
    assert model.remembered_capacity(row) == {"memory": "8Gi"}
    assert model.remembered_capacity(None) == {}


def test_a_bad_maximum_flag_is_one_line_naming_it_exit_2() -> None:
    result = CliRunner().invoke(app, ["controller", "run", "--max-reported-cpu", "lots"])
    assert result.exit_code == 2
    assert "--max-reported-cpu" in result.output and "'lots'" in result.output
