"""Podman-only behaviour of rendered scripts, checked by what the containers really did (``pytest -m podman``).

Labels, ``--memory``/``--cpus`` as the container's cgroup sees them, command and args over the image's
entrypoint, a memory-limit kill (137, reported honestly), a cancel that removes every container.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_runs import RT, Job, Runtime, eventually, make_pod, sh
from container_runs import start_job as start_job
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.status import JobMeta, map_status
from interlink_nats.submitters.jobdirs.files import read_container_files
from podman_host import IMAGE, IMAGE_WITH_ENTRYPOINT, PodmanHost
from storage_sites import OPEN_HOST_PATHS


@pytest.fixture
def podman(podman_host: PodmanHost) -> Runtime:
    def left(uid: str) -> list[str]:
        return [c["Id"] for c in podman_host.containers(f"{layout.LABEL_POD_UID}={uid}")]

    return Runtime("podman", pb.BuildConfig(runtime=RT.PODMAN, storage=OPEN_HOST_PATHS), IMAGE, left)


# --- podman only -----------------------------------------------------------------------------------


@pytest.mark.podman
def test_podman_labels_and_resources(
    podman: Runtime, podman_host: PodmanHost, start_job: Callable[[Runtime, dict[str, Any]], Job], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    limits = r"""
cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us
while [ ! -e /gate/open ]; do sleep 0.1; done
"""
    data = make_pod(
        [
            {
                **sh("limited", limits, podman.image),
                "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}, "requests": {"cpu": "250m"}},
                "volumeMounts": [{"name": "gate", "mountPath": "/gate"}],
            }
        ],
        volumes=[{"name": "gate", "hostPath": {"path": str(gate)}}],
    )
    job = start_job(podman, data)
    eventually(lambda: len(podman_host.containers(f"{layout.LABEL_POD_UID}={job.uid}")) == 1, "the running container")
    [container] = podman_host.containers(f"{layout.LABEL_POD_UID}={job.uid}")
    assert container["Labels"][layout.LABEL_CONTAINER] == "limited"
    assert container["Labels"][layout.LABEL_JOB_DIR] == str(job.job_dir)
    (gate / "open").touch()
    assert job.wait() == 0
    assert job.log("limited").split() == [str(64 * 2**20), "50000", "100000"]
    assert podman.leftovers(job.uid) == []


@pytest.mark.podman
def test_podman_command_and_args_follow_kubernetes_over_the_image(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    # command replaces the image's ENTRYPOINT and drops its CMD; args alone replace only the CMD.
    img = IMAGE_WITH_ENTRYPOINT
    data = make_pod(
        [
            {"name": "image-defaults", "image": img},
            {"name": "args-only", "image": img, "args": ["a 1", "$(X)"], "env": [{"name": "X", "value": "x"}]},
            {"name": "command-only", "image": img, "command": ["echo", "mine"]},
            {"name": "both", "image": img, "command": ["echo", "mine"], "args": ["b"]},
        ]
    )
    job = start_job(podman, data)
    assert job.wait() == 0
    assert job.log("image-defaults") == "entrypoint cmd\n"
    assert job.log("args-only") == "entrypoint a 1 x\n"
    assert job.log("command-only") == "mine\n"
    assert job.log("both") == "mine b\n"


@pytest.mark.podman
def test_podman_memory_limit_kills_with_137(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    data = make_pod(
        [
            {
                **sh("hog", "dd if=/dev/zero of=/dev/null bs=128M count=1", podman.image),
                "resources": {"limits": {"memory": "32Mi"}},
            }
        ]
    )
    job = start_job(podman, data)
    assert job.wait() == 137
    assert job.exit_code("hog") == 137
    # podman reports OOMKilled=false on these cgroups: the status says it cannot tell, rather than guessing.
    meta = JobMeta(job.uid, "ns", "p", "pool", "1", (), ("hog",), "shell")
    files = read_container_files(job.job_dir, ["hog"])
    [hog] = map_status(meta, Observation(BackendState.FAILED, 137), files, now=time.time()).containers
    assert (hog.exit_code, hog.reason) == (137, "Error")
    assert "memory limit" in hog.message and "did not say which" in hog.message


@pytest.mark.podman
def test_podman_cancel_removes_every_container(
    podman: Runtime, podman_host: PodmanHost, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    # "trap" makes PID 1 honour TERM in one container; the other ignores it and must be killed after the grace.
    data = make_pod(
        [
            sh("polite", "trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done", podman.image),
            sh("stubborn", "echo up; sleep 600", podman.image),
        ],
        terminationGracePeriodSeconds=2,
    )
    job = start_job(podman, data)
    label = f"{layout.LABEL_POD_UID}={job.uid}"
    eventually(
        lambda: all(layout.log_path(job.job_dir, n).exists() and "up" in job.log(n) for n in ("polite", "stubborn")),
        "both containers up",
    )
    os.killpg(job.proc.pid, signal.SIGTERM)  # what the shell backend's cancel does first
    job.wait()
    assert job.exit_code("polite") == 0 and "bye" in job.log("polite")
    assert job.exit_code("stubborn") == 137
    assert podman_host.containers(label) == []
