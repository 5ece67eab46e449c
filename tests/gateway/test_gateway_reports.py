"""Pools' reports are untrusted: one pool's negative, malformed or absurd figure removes only
its own share of that resource from the ping, never the whole answer, and sums stay within Kubernetes' int64.
Real gateway and nats-server; the reports are published as any NATS client allowed on the subject could."""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import reported
from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.pools import checked_report
from interlink_nats.services.gateway.settings import GatewaySettings
from pydantic import ValidationError
from stack import Stack, eventually, gateway_only, new_pool


async def publish(nats_url: str, *reports: pb.ResourceReport) -> None:
    nc = await nats.connect(nats_url)
    try:
        for report in reports:
            await nc.publish(f"interlink.resources.{report.pool}", bytes(report))
        await nc.flush()
    finally:
        await nc.close()


async def ping_until(stack: Stack, check: Any) -> dict[str, Any]:
    """The ping's resources once ``check(resources)`` holds."""
    seen: dict[str, Any] = {}

    async def ok() -> bool:
        nonlocal seen
        response = await stack.get("/status", [])
        assert response.status_code == 200, response.text
        seen = response.json()["resources"]
        return bool(check(seen))

    await eventually(ok, what="the ping to show the reports")
    return seen


@pytest.mark.parametrize(
    "bad", ["-1000", "1e18", "12345678901234567890123456789012345678", "NaN", "inf", "lots", "1e99"]
)
async def test_one_pools_bad_cpu_removes_only_its_own_share(nats_url: str, bad: str) -> None:
    """Before: ``-1000`` made the sum negative and cpu vanished from the node (and ``{}`` when every resource
    was hit); ``1e18`` and the 38-digit figure were summed beyond int64."""
    good, evil = new_pool(), new_pool()
    async with gateway_only(nats_url, default_pool=None) as stack:
        await publish(
            nats_url,
            pb.ResourceReport(pool=good, capacity={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "4"}),
            pb.ResourceReport(pool=evil, capacity={"cpu": bad, "memory": "64Gi", "nvidia.com/gpu": bad}),
        )
        resources = await ping_until(stack, lambda r: r.get("memory") == "320Gi")
        assert resources["cpu"] == "64"
        assert resources["accelerators"] == [{"resourceType": "nvidia.com/gpu", "available": "4"}]


async def test_every_figure_of_one_pool_bad_still_leaves_the_others(nats_url: str) -> None:
    good, evil = new_pool(), new_pool()
    async with gateway_only(nats_url, default_pool=None) as stack:
        await publish(
            nats_url,
            pb.ResourceReport(pool=evil, capacity={"cpu": "-1000", "memory": "-1", "pods": "-5"}),
            pb.ResourceReport(pool=good, capacity={"cpu": "8", "memory": "16Gi", "pods": "100"}),
        )
        assert await ping_until(stack, lambda r: r.get("pods") == "100") == {
            "cpu": "8",
            "memory": "16Gi",
            "pods": "100",
        }


async def test_a_pools_bad_report_is_logged_once_per_change_not_per_report(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool, marker = new_pool(), new_pool()
    caplog.set_level(logging.INFO, logger="interlink_nats.services.gateway.pools")
    async with gateway_only(nats_url, default_pool=None) as stack:

        async def sent(report: pb.ResourceReport, memory: str) -> None:
            """``report`` published three times, then a marker pool's memory: once the ping shows it, the gateway
            has read them all (one subscription, in order)."""
            await publish(nats_url, report, report, report, pb.ResourceReport(pool=marker, capacity={"memory": memory}))
            await ping_until(stack, lambda r: r.get("memory") == memory)

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if pool in r.getMessage()]

        await sent(pb.ResourceReport(pool=pool, capacity={"cpu": "-1000"}), "1Gi")
        await sent(pb.ResourceReport(pool=pool, capacity={"cpu": "-1000"}), "2Gi")
        assert lines() == [f"pool {pool} reported figures the ping leaves out: capacity.cpu '-1000' is negative"]
        await sent(pb.ResourceReport(pool=pool, capacity={"cpu": "1e18"}), "3Gi")
        assert len(lines()) == 2 and "'1e18' is more than a pool may report (at most 10M)" in lines()[1]
        await sent(pb.ResourceReport(pool=pool, capacity={"cpu": "4"}), "4Gi")
        await sent(pb.ResourceReport(pool=pool, capacity={"cpu": "4"}), "5Gi")
        assert lines()[2:] == [f"pool {pool} reports sane figures again"]


def test_a_checked_report_leaves_out_bad_free_and_held_figures_too() -> None:
    report = pb.ResourceReport(
        pool="p",
        capacity={"cpu": "64", "memory": "1e40"},
        free={"cpu": "-3", "memory": "1Gi"},
        held={"cpu": "garbage"},
        labels={"site": "x"},
    )
    clean, refused = checked_report(report, reported.DEFAULT_MAXIMA)
    assert (dict(clean.capacity), dict(clean.free), dict(clean.held)) == ({"cpu": "64"}, {"memory": "1Gi"}, {})
    assert dict(clean.labels) == {"site": "x"} and dict(report.capacity)["memory"] == "1e40", "a copy"
    assert sorted(refused) == ["capacity.memory", "free.cpu", "held.cpu"]
    # ping_free_capacity: a pool whose free figure was refused counts with its total, as one that cannot tell
    assert wire.ping_response([clean], free=True)["resources"]["cpu"] == "64"


def test_the_pings_sums_stay_within_int64() -> None:
    """Two pools each at a (raised) maximum: the sum is capped at what Kubernetes holds (CPUs in millicores)."""
    big = [pb.ResourceReport(pool=p, capacity={"cpu": "9e15", "memory": "8Ei", "pods": "9e18"}) for p in "ab"]
    resources = wire.ping_response(big)["resources"]
    assert resources["cpu"] == f"{reported.INT64_MAX}m"
    assert resources["memory"] == resources["pods"] == str(reported.INT64_MAX)
    assert reported.within_int64("cpu", Fraction(5)) == 5


def test_reported_maxima_are_settings_checked_as_quantities() -> None:
    assert GatewaySettings(max_reported_cpu="100k").report_maxima().of("cpu") == 100_000
    with pytest.raises(ValidationError, match="max_reported_cpu"):
        GatewaySettings(max_reported_cpu="lots")
    with pytest.raises(ValidationError, match="max_reported_other"):
        GatewaySettings(max_reported_other="-1")


@pytest.mark.parametrize(
    ("figure", "why"),
    [
        ("-1", "'-1' is negative"),
        ("NaN", "'NaN' is not a Kubernetes quantity"),
        ("", "'' is not a Kubernetes quantity"),
        ("10000001", "'10000001' is more than a pool may report (at most 10M)"),
    ],
)
def test_a_figure_is_refused_with_its_reason(figure: str, why: str) -> None:
    checked = reported.check({"cpu": figure, "memory": "16Pi", "hugepages-1Gi": "17Pi"})
    assert checked.refused["cpu"] == why
    assert checked.values == {"memory": 16 * 2**50}
    assert "hugepages-1Gi" in checked.refused  # bytes, bounded as memory
