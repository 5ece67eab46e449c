"""Flavors (the SLURM plugin's named per-pool defaults): which one a pod gets, what it fills, how a site writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.flavors import check_flavors, memory_bytes
from interlink_nats.services.scripts import PodRejected, render_job
from interlink_nats.services.scripts.cli import load_build_config
from interlink_nats.services.scripts.flavors import select_flavor
from interlink_nats.submitters.backends.htcondor import submit as htcondor_submit
from interlink_nats.submitters.backends.slurm import flags as slurm_flags
from interlink_nats.submitters.settings import ConfigFileError, SubmitterSettings, parse_build_config
from render_cases import NONE, ctr, data, rejected

FLAVOR = "slurm-job.vk.io/flavor"
TABLE = {
    "small": pb.Flavor(cpu_default="1", memory_default="2G", backend_flags=["--qos=short"]),
    "gpu-a100": pb.Flavor(cpu_default="8", backend_flags=["--gres=gpu:a100:1", "--partition=gpu"], gpu=True),
    "gpu-v100": pb.Flavor(cpu_default="4", backend_flags=["--gres=gpu:v100:1"], gpu=True),
    "big": pb.Flavor(cpu_default="32", memory_default="128Gi"),
}
POOL = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, flavors=TABLE, default_flavor="small", gpu_support=True)
NO_DEFAULT = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, flavors=TABLE)


@pytest.mark.parametrize(
    ("bc", "annotation", "gpus", "chosen"),
    [
        (POOL, "big", 0, "big"),  # the annotation wins over the default
        (POOL, "big", 2, "big"),  # and over GPU auto-detection
        (POOL, " big ", 0, "big"),
        (POOL, None, 1, "gpu-a100"),  # GPU auto-detection: the first GPU flavor by name
        (POOL, None, 0, "small"),  # the pool's default
        (NO_DEFAULT, None, 0, None),  # no default: nothing filled
        (NO_DEFAULT, None, 3, "gpu-a100"),
        (pb.BuildConfig(flavors={"small": TABLE["small"]}, default_flavor="small"), None, 2, "small"),  # no GPU one
        (NONE, "anything", 1, None),  # a pool without flavors: as before, the annotation means nothing
    ],
)
def test_which_flavor_a_pod_gets(bc: pb.BuildConfig, annotation: str | None, gpus: int, chosen: str | None) -> None:
    expected = TABLE[chosen] if chosen else None
    assert select_flavor(bc, annotation, gpus) == expected


def test_an_unknown_flavor_is_rejected_naming_the_annotation_and_the_pools_flavors() -> None:
    with pytest.raises(PodRejected) as e:
        select_flavor(POOL, "huge", 0)
    assert e.value.field == f'metadata.annotations["{FLAVOR}"]'
    assert "'huge'" in e.value.message and "big, gpu-a100, gpu-v100, small" in e.value.message
    assert rejected(data(annotations={FLAVOR: "huge"}), POOL).field == e.value.field  # the whole render too


def test_a_flavor_fills_cpu_and_memory_where_the_pod_asks_for_none() -> None:
    job = render_job(data([ctr()]), POOL)
    assert (job.resources.cpu_millis, job.resources.memory_bytes) == (1000, 2 * 2**30)  # "2G": 1024-based
    job = render_job(data([ctr(resources={"limits": {"cpu": "3"}})], annotations={FLAVOR: "big"}), POOL)
    assert (job.resources.cpu_millis, job.resources.memory_bytes) == (3000, 128 * 2**30)  # the pod's cpu kept
    job = render_job(data([ctr(resources={"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}})]), POOL)
    assert (job.resources.cpu_millis, job.resources.memory_bytes, job.resources.gpus) == (8000, 2**30, 1)


def test_flavor_flags_come_before_the_pods_own_so_the_pods_win() -> None:
    job = render_job(data(annotations={"slurm-job.vk.io/flags": "--qos=long --time=10"}), POOL)
    assert job.backend_flags == ["--qos=short", "--qos=long", "--time=10"]
    assert render_job(data(), NO_DEFAULT).backend_flags == []
    assert render_job(data(annotations={FLAVOR: "x"}), NONE).resources.cpu_millis == 0  # no flavors: as today


SITE_TABLE: dict[str, Any] = {
    "runtime": "none",
    "default_flavor": "cpu",
    "flavors": {
        "cpu": {"description": "default", "cpu_default": "2", "memory_default": "4G"},
        "gpu": {"cpuDefault": "8", "memoryDefault": "64Gi", "backend_flags": ["--gres=gpu:1"], "gpu": True},
    },
}


def test_a_site_files_flavor_table_is_parsed(tmp_path: Path) -> None:
    assert parse_build_config({"flavors": {"f": {"cpu_default": 4, "memoryDefault": 1024}}}).flavors["f"] == pb.Flavor(
        cpu_default="4", memory_default="1024"
    )  # YAML's unquoted numbers, and proto3 JSON's camelCase
    bc = parse_build_config(SITE_TABLE)
    assert bc.default_flavor == "cpu" and bc.flavors["gpu"].backend_flags == ["--gres=gpu:1"]
    assert bc.flavors["gpu"].gpu and bc.flavors["cpu"].memory_default == "4G"
    site = tmp_path / "site.yaml"
    site.write_text(
        f"pool: a\nstate_dir: {tmp_path / 'state'}\nbuild_config:\n  default_flavor: cpu\n  flavors:\n"
        "    cpu: {cpu_default: '2', backend_flags: ['--comment=from-flavor']}\n"
    )
    assert SubmitterSettings.load(site).read_build_config().flavors["cpu"].backend_flags == ["--comment=from-flavor"]
    previewed = load_build_config(site, "none")  # `interlink-nats render --build-config <site file>` reads the same
    assert render_job(data(), previewed).backend_flags == ["--comment=from-flavor"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"flavors": {"gpu": {"cpu": "4"}}}, "flavors.gpu.cpu: unknown key"),
        (
            {"flavors": {"gpu": {"CPUDefault": 4}}},
            "flavors.gpu.CPUDefault: unknown key; the SLURM plugin's CPUDefault is",
        ),
        ({"flavors": {"gpu": {"UID": 1000}}}, "flavors.gpu.UID: unknown key; the SLURM plugin's UID has no place"),
        ({"flavors": {"gpu": {"cpu_default": "lots"}}}, "flavors.gpu.cpu_default: invalid quantity"),
        ({"flavors": {"gpu": {"cpu_default": True}}}, "flavors.gpu.cpu_default: must be a str"),
        ({"flavors": {"gpu": {"memory_default": "-1"}}}, "flavors.gpu.memory_default: negative"),
        ({"flavors": {"gpu": {"backend_flags": ["--qos=a", " "]}}}, "flavors.gpu.backend_flags: every flag"),
        ({"flavors": {"gpu": {"backend_flags": "--qos=a"}}}, "flavors.gpu.backend_flags: must be a list"),
        ({"flavors": {"gpu": {"gpu": "yes"}}}, "flavors.gpu.gpu: must be a bool"),
        ({"flavors": {"gpu": ["--gres=gpu:1"]}}, "flavors.gpu: must be a mapping"),
        ({"flavors": ["gpu"]}, "flavors: must be a mapping"),
        ({"default_flavor": "huge"}, "default_flavor: 'huge' is not a flavor of this pool (flavors: cpu, gpu)"),
    ],
)
def test_a_bad_flavor_table_is_rejected_naming_the_key(change: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigFileError) as e:
        parse_build_config({**SITE_TABLE, **change})
    assert named in str(e.value) and "\n" not in str(e.value)


def test_memory_in_the_slurm_plugins_form_and_kubernetes_form() -> None:
    figures = [memory_bytes(t) for t in ("16G", "1.5G", "512M", "1T", "1Gi", "1000", "1k")]
    assert figures == [16 * 2**30, 3 * 2**29, 512 * 2**20, 2**40, 2**30, 1000, 1000]
    check_flavors({})  # no table: nothing to check


def test_a_flavors_flags_meet_each_backends_check_of_pod_flags() -> None:
    """No way round the backends' refusals: a flavor's flags reach them in ``backend_flags`` like a pod's."""
    sneaky = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, flavors={"f": pb.Flavor(backend_flags=["--output=/x"])})
    flags = render_job(data(annotations={FLAVOR: "f"}), sneaky).backend_flags
    with pytest.raises(slurm_flags.FlagError, match="--output"):
        slurm_flags.FlagPolicy().check(flags, account_by_policy=False)
    condor = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, flavors={"f": pb.Flavor(backend_flags=["executable=/x"])})
    with pytest.raises(ValueError, match="executable"):
        htcondor_submit.pod_commands(render_job(data(annotations={FLAVOR: "f"}), condor).backend_flags)
