"""The contract gates: buf lint/format/breaking, gen/ fresh, the package layout, ruff; plus round-trips."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import missing_service
from interlink_nats.gen.interlink_nats import v1 as pb

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, check=False)


def test_buf_lint_passes_with_standard_rules() -> None:
    result = run(str(BIN / "buf"), "lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_format_is_clean() -> None:
    result = run(str(BIN / "buf"), "format", "-d", "--exit-code")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_breaking_change_against_previous_commit() -> None:
    has_parent = run("git", "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}").returncode == 0
    if not has_parent:
        if run("git", "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            missing_service("the previous commit for buf breaking (a shallow clone: git fetch --deepen=1)")
        pytest.skip("the first commit has nothing to be compatible with")
    result = run(str(BIN / "buf"), "breaking", "--against", ".git#ref=HEAD~1")
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    """Regenerate into a temp dir and compare every file, so stale, edited or missing files all fail."""
    work = tmp_path / "cwd"
    work.mkdir()
    out = tmp_path / "out"
    # Same invocation as `make gen`: from an empty working directory (see the Makefile for why).
    result = run(
        str(BIN / "buf"), "generate", "--template", str(ROOT / "buf.gen.yaml"), "-o", str(out), str(ROOT), cwd=work
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fresh, committed = out / "gen", ROOT / "gen"

    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}

    assert files(fresh) == files(committed), "gen/ has missing or extra files: run `make gen`"
    stale = [name for name in files(fresh) if not filecmp.cmp(fresh / name, committed / name, shallow=False)]
    assert not stale, f"gen/ is stale (run `make gen`, never edit it): {stale}"


def test_every_package_folder_is_listed_and_nothing_generic_lands_top_level() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping: dict[str, str] = config["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    data_only = {name for name in listed - found if name.endswith(".templates")}  # package data, no code
    listed -= data_only
    assert found == listed, f"packages missing from pyproject: {found - listed}; listed but absent: {listed - found}"
    assert all(name == "interlink_nats" or name.startswith("interlink_nats.") for name in listed)


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_job_script_round_trips_bytes_and_json() -> None:
    job = pb.JobScript(
        pod=pb.PodRef(uid="6f1c2e9a-1111-2222-3333-444455556666", namespace="default", name="hello"),
        script="#!/bin/bash\necho 'hi'\n",
        init_containers=["prep"],
        containers=["main", "side"],
        resources=pb.ResourceRequest(cpu_millis=1500, memory_bytes=2**30, gpus=1, wall_time=timedelta(minutes=10)),
        backend_flags=["--partition", "gpu"],
    )
    assert pb.JobScript.parse(bytes(job)) == job
    as_json = job.to_dict()
    assert as_json["resources"]["wallTime"] == "600s"
    assert pb.JobScript.from_dict(as_json) == job


def test_job_event_keeps_optional_exit_code_zero_distinct_from_unset() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    event = pb.JobEvent(
        status=pb.JobStatus(
            pod=pb.PodRef(uid="u"),
            state=pb.JobState.SUCCEEDED,
            containers=[
                pb.ContainerStatus(name="a", phase=pb.ContainerPhase.TERMINATED, exit_code=0, finished_at=now),
                pb.ContainerStatus(name="b", phase=pb.ContainerPhase.WAITING),
            ],
        ),
        revision=3,
    )
    parsed = pb.JobEvent.parse(bytes(event))
    assert parsed.status is not None
    assert parsed.status.containers[0].exit_code == 0
    assert parsed.status.containers[1].exit_code is None
    assert parsed.status.containers[0].finished_at == now


def test_pod_accepts_kubernetes_json_with_unknown_fields() -> None:
    pod = pb.Pod.from_dict(
        {
            "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "creationTimestamp": None, "labels": {"a": "b"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "imagePullPolicy": "Always",
                        "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": 420}}],
                "activeDeadlineSeconds": 60,
            },
            "status": {"phase": "Pending"},
        },
        ignore_unknown_fields=True,
    )
    assert pod.spec is not None
    assert pod.spec.containers[0].volume_mounts[0].read_only is True
    assert pod.spec.volumes[0].config_map is not None and pod.spec.volumes[0].config_map.default_mode == 420
    assert pod.spec.active_deadline_seconds == 60


def test_build_config_json_uses_standard_enum_names() -> None:
    config = pb.BuildConfig.from_dict({"runtime": "CONTAINER_RUNTIME_APPTAINER", "imagePrefix": "docker://"})
    assert config.runtime == pb.ContainerRuntime.APPTAINER
    assert config.to_dict()["runtime"] == "CONTAINER_RUNTIME_APPTAINER"
