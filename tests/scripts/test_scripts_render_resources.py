"""Unit tests of the pure renderer's resources: quantities, the pod's sum and max, flags, per-container limits."""

from __future__ import annotations

import datetime
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import parse_quantity, pod_resources, render_job
from interlink_nats.services.scripts.pod_resources import UNIT_CACHE_MAX_CHARS, resource_units
from render_cases import NONE, RT, ctr, data, rejected

# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1Gi", Fraction(2**30)),
        ("1e3", Fraction(1000)),
        ("128M", Fraction(128_000_000)),
        ("0.5", Fraction(1, 2)),
        ("100k", Fraction(100_000)),
        ("1.5Ki", Fraction(1536)),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1GB", "abc", "-1", "1.2.3", "Gi"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_pod_resources_sum_main_max_init() -> None:
    pod = data(
        [
            ctr("a", resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}),
            ctr("b", resources={"limits": {"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "2"}}),
        ],
        init=[ctr("i1", resources={"limits": {"cpu": "3"}}), ctr("i2", resources={"requests": {"memory": "4Gi"}})],
        activeDeadlineSeconds=600,
    )["pod"]
    r = pod_resources(pod)
    assert r.cpu_millis == 3000  # max(sum main = 1250, max init = 3000)
    assert r.memory_bytes == 4 * 2**30  # max(1.5Gi, 4Gi)
    assert r.gpus == 2
    assert r.wall_time == datetime.timedelta(seconds=600)


def test_pod_resources_main_sum_wins() -> None:
    pod = data(
        [ctr("a", resources={"limits": {"cpu": "1"}}), ctr("b", resources={"requests": {"cpu": "1500m"}})],
        init=[ctr("i", resources={"limits": {"cpu": "2"}})],
    )["pod"]
    r = pod_resources(pod)
    assert r.cpu_millis == 2500
    assert r.wall_time is None


def test_render_carries_resources_and_backend_flags() -> None:
    d = data(
        [ctr(resources={"limits": {"cpu": "2", "memory": "1Gi"}})],
        annotations={"slurm-job.vk.io/flags": "--time=00:10:00 -p 'geant 4' --gres=gpu:1"},
    )
    job = render_job(d, NONE)
    assert job.resources.cpu_millis == 2000
    assert job.backend_flags == ["--time=00:10:00", "-p", "geant 4", "--gres=gpu:1"]
    assert job.pod == pb.PodRef(uid="uid-1", namespace="ns", name="p")
    assert job.containers == ["main"]


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"limits": {"cpu": "lots"}}, 'spec.containers[0].resources.limits["cpu"]'),
        ({"requests": {"amd.com/gpu": "1"}}, 'spec.containers[0].resources.requests["amd.com/gpu"]'),
        ({"limits": {"nvidia.com/gpu": "0.5"}}, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ],
)
def test_bad_resources_rejected(resources: dict[str, Any], field: str) -> None:
    assert rejected(data([ctr(resources=resources)])).field == field


QUANTITY_TEXT = st.builds(
    lambda whole, frac, suffix: f"{whole}{frac}{suffix}",
    st.integers(0, 10**12).map(str),
    st.sampled_from(["", ".5", ".25", ".001", ".3333333"]),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "n", "u", "e3", "e-2"]),
)


@given(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITY_TEXT, st.integers(0, 80))
def test_resource_units_are_the_exact_quantity_rounded_up(name: str, text: str, padding: int) -> None:
    """The cached int conversion agrees with the exact arithmetic it replaced, at any length (past
    ``UNIT_CACHE_MAX_CHARS`` uncached), errors included."""
    text = "0" * padding + text if text[0].isdigit() else text  # leading zeros: same value, longer string
    exact = parse_quantity(text) * (1000 if name == "cpu" else 1)
    if exact > 2**63 - 1:
        expected: object = "too large"
    elif name == "nvidia.com/gpu" and parse_quantity(text).denominator != 1:
        expected = "GPU counts must be whole numbers"
    else:
        expected = -(-exact.numerator // exact.denominator)
    try:
        got: object = resource_units(name, text)
    except ValueError as exc:
        got = str(exc)
    assert got == expected, (name, text, len(text) > UNIT_CACHE_MAX_CHARS)


def test_resources_reach_the_job_in_units() -> None:
    job = render_job(
        data([ctr(resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}})]), NONE
    )
    assert (job.resources.cpu_millis, job.resources.memory_bytes) == (100, 128 * 2**20)


def test_ephemeral_storage_is_ignored() -> None:
    render_job(data([ctr(resources={"requests": {"ephemeral-storage": "1Gi"}})]), NONE)


@pytest.mark.parametrize(
    ("limits", "flags"),
    [
        ({"cpu": "1500m", "memory": "64Mi"}, "--memory 67108864 --cpus 1.5"),
        ({"cpu": "250m"}, "--cpus 0.25"),
        ({"cpu": "2"}, "--cpus 2"),
        ({"cpu": "1m"}, "--cpus 0.001"),
        ({"memory": "1G"}, "--memory 1000000000"),
    ],
)
def test_podman_gets_each_containers_limits(limits: dict[str, str], flags: str) -> None:
    s = render_job(data([ctr(resources={"limits": limits})]), pb.BuildConfig(runtime=RT.PODMAN)).script
    assert f'"interlink-nats.job-dir=$__job_dir" {flags} --entrypoint' in s


def test_podman_without_resources_gets_no_limits() -> None:
    s = render_job(data([ctr()]), pb.BuildConfig(runtime=RT.PODMAN)).script
    assert "--memory" not in s and "--cpus" not in s
