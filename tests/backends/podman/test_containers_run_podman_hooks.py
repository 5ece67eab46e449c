"""Lifecycle hooks and probes under real podman (``pytest -m podman``): exec handlers run inside the running
container (``podman exec``), a failing postStart stops it with reason FailedPostStartHook, a preStop runs before
its TERM, readiness reaches the container files and a liveness failure stops it with reason Unhealthy.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_runs import RT, Job, Runtime, eventually, make_pod, sh
from container_runs import start_job as start_job
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.jobdirs.files import read_container_files
from podman_host import IMAGE, PodmanHost
from storage_sites import OPEN_HOST_PATHS

pytestmark = pytest.mark.podman


@pytest.fixture
def podman(podman_host: PodmanHost) -> Runtime:
    def left(uid: str) -> list[str]:
        return [c["Id"] for c in podman_host.containers(f"{layout.LABEL_POD_UID}={uid}")]

    return Runtime("podman", pb.BuildConfig(runtime=RT.PODMAN, storage=OPEN_HOST_PATHS), IMAGE, left)


def gated(gate: Path, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    for c in containers:
        c["volumeMounts"] = [{"name": "gate", "mountPath": "/gate"}]
    return make_pod(containers, volumes=[{"name": "gate", "hostPath": {"path": str(gate)}}], **spec)


def hook(script: str) -> dict[str, Any]:
    return {"exec": {"command": ["sh", "-c", script]}}


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    g = tmp_path / "gate"
    g.mkdir()
    return g


def test_post_start_execs_inside_the_running_container(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    main = sh("main", "while [ ! -e /gate/hooked ]; do sleep 0.1; done", podman.image)
    main["env"] = [{"name": "WHO", "value": "the container's env"}]
    main["lifecycle"] = {"postStart": hook('echo "$WHO" > /gate/hooked')}
    job = start_job(podman, gated(gate, [main]))
    assert job.wait() == 0
    assert (gate / "hooked").read_text() == "the container's env\n", "only the container has WHO"
    assert podman.leftovers(job.uid) == []


def test_a_container_that_ends_while_its_post_start_runs_keeps_its_own_exit(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    """The container ends as soon as the hook has touched the gate, so the hook's own process (still sleeping)
    dies with it and `podman exec` fails. On a node the kubelet's kill of an ended container does nothing and
    the status is the container's own exit; here the failure must not stop the runtime's client either."""
    main = sh("main", "while [ ! -e /gate/hooked ]; do sleep 0.01; done", podman.image)
    main["lifecycle"] = {"postStart": hook("touch /gate/hooked; sleep 60")}
    keeper = sh("keeper", "while [ ! -e /gate/done ]; do sleep 0.1; done", podman.image)  # the job outlives the hook
    job = start_job(podman, gated(gate, [main, keeper]))
    eventually(lambda: layout.exit_path(job.job_dir, "main").exists(), "the container's end")
    seen = read_container_files(job.job_dir, ["main"])["main"]
    assert (seen.exit_code, seen.reason) == (0, ""), "not stopped for its hook's failure"
    eventually(lambda: "the container ended while its hook ran" in job.log("main"), "the hook's verdict")
    (gate / "done").touch()
    assert job.wait() == 0
    assert podman.leftovers(job.uid) == []


def test_a_container_that_ends_while_its_liveness_probe_runs_keeps_its_own_exit(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    """As for a hook: the container ends once the probe's try has touched the gate, so the try's `podman exec`
    fails, at the failure threshold (1). A failure seen once the container has ended is no verdict (the kubelet's
    kill of an ended container does nothing): the status is the container's own exit, and its client is not
    stopped while it cleans up."""
    main = sh("main", "while [ ! -e /gate/probed ]; do sleep 0.01; done", podman.image)
    main["livenessProbe"] = {**hook("touch /gate/probed; sleep 60"), "timeoutSeconds": 120, "failureThreshold": 1}
    keeper = sh("keeper", "while [ ! -e /gate/done ]; do sleep 0.1; done", podman.image)  # the job outlives the try
    job = start_job(podman, gated(gate, [main, keeper], terminationGracePeriodSeconds=5))
    eventually(lambda: layout.exit_path(job.job_dir, "main").exists(), "the container's end")
    seen = read_container_files(job.job_dir, ["main"])["main"]
    assert (seen.exit_code, seen.reason, seen.message) == (0, "", ""), "not stopped for its probe's failure"
    (gate / "done").touch()
    assert job.wait() == 0
    assert podman.leftovers(job.uid) == []


def test_a_failing_post_start_stops_the_container_with_its_reason(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    main = sh("main", "trap 'exit 143' TERM; while :; do sleep 0.1; done", podman.image)
    main["lifecycle"] = {"postStart": hook("echo refusing; exit 2")}
    job = start_job(podman, gated(gate, [main], terminationGracePeriodSeconds=5))
    assert job.wait() == 143
    seen = read_container_files(job.job_dir, ["main"])["main"]
    assert (seen.exit_code, seen.reason) == (143, "FailedPostStartHook")
    assert "exit code 2" in seen.message and "refusing" in job.log("main")
    assert podman.leftovers(job.uid) == []


def test_pre_stop_runs_inside_the_container_before_its_term(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    noter = (
        "trap 'if [ -e /gate/prestop ]; then echo after > /gate/termed; else echo no > /gate/termed; fi; exit 0' TERM;"
        " echo up; while :; do sleep 0.1; done"
    )
    main = sh("main", noter, podman.image)
    main["lifecycle"] = {"preStop": hook("hostname > /gate/prestop")}
    job = start_job(podman, gated(gate, [main], terminationGracePeriodSeconds=20))
    eventually(lambda: layout.log_path(job.job_dir, "main").exists() and "up" in job.log("main"), "the container up")
    os.killpg(job.proc.pid, signal.SIGTERM)  # what the shell backend's cancel does first
    job.wait()
    assert (gate / "termed").read_text() == "after\n"
    assert (gate / "prestop").read_text().strip(), "ran inside the container (its own hostname)"
    assert job.exit_code("main") == 0
    assert podman.leftovers(job.uid) == []


def test_probes_exec_inside_the_container_readiness_then_liveness(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], gate: Path
) -> None:
    main = sh("main", "trap 'exit 143' TERM; touch /tmp/live; while :; do sleep 0.1; done", podman.image)
    main["readinessProbe"] = {"exec": {"command": ["test", "-e", "/gate/ready"]}, "periodSeconds": 1}
    main["livenessProbe"] = {"exec": {"command": ["test", "-e", "/tmp/live"]}, "periodSeconds": 1}
    job = start_job(podman, gated(gate, [main], terminationGracePeriodSeconds=5))

    def ready() -> bool | None:
        return read_container_files(job.job_dir, ["main"])["main"].ready

    eventually(lambda: layout.started_path(job.job_dir, "main").exists(), "the start")
    assert ready() is False
    (gate / "ready").touch()  # the host's file, seen through the container's mount
    eventually(lambda: ready() is True, "ready")
    name = f"il-{job.uid}-main"
    eventually(lambda: podman.leftovers(job.uid) != [], "the container")
    subprocess.run(
        [podman.build_config.executable or "podman", "exec", name, "rm", "/tmp/live"], check=True
    )  # only inside the container
    assert job.wait() == 143
    seen = read_container_files(job.job_dir, ["main"])["main"]
    assert (seen.reason, seen.message) == ("Unhealthy", "Liveness probe failed 3 times in a row")
    assert podman.leftovers(job.uid) == []
