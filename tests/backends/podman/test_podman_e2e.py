"""Runtime podman through the submitter: the shell backend's clean-up (cancel, restart after a crash) and
the whole stack over HTTP (gateway → NATS → shell submitter configured by its file → bash → podman)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.core.backend import BackendState, JobSpec
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings
from podman_host import IMAGE, PodmanHost
from stack import create_body, eventually, gateway_only, logs_body, new_pool, terminated
from storage_sites import OPEN_HOST_PATHS, OPEN_HOST_PATHS_SECTION

pytestmark = pytest.mark.podman

PODMAN = pb.BuildConfig(runtime=pb.ContainerRuntime.PODMAN, storage=OPEN_HOST_PATHS)
SITE = pb.BuildConfig(
    runtime=pb.ContainerRuntime.PODMAN, limits=pb.PodLimits(max_termination_grace_seconds=1), storage=OPEN_HOST_PATHS
)
"""The submitter's own site: a longest grace (1 s) far below the pods' (300 s, rendered without it)."""


def bbox_pod(containers: dict[str, str], *, gate: Path | None = None, **spec: Any) -> dict[str, Any]:
    """A pod of busybox containers running ``sh -c <script>``; ``gate`` is mounted at /gate."""
    mounts = [{"name": "gate", "mountPath": "/gate"}] if gate else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {
            "containers": [
                {"name": n, "image": IMAGE, "command": ["sh", "-c", script], "volumeMounts": mounts}
                for n, script in containers.items()
            ],
            "volumes": [{"name": "gate", "hostPath": {"path": str(gate)}}] if gate else [],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def of_pod(host: PodmanHost, uid: str) -> list[dict[str, Any]]:
    return host.containers(f"{layout.LABEL_POD_UID}={uid}")


async def until(check: Any, what: str, within: float = 90) -> None:
    async def ok() -> bool:
        return bool(await asyncio.to_thread(check))

    await eventually(ok, within=within, what=what)


# --- the shell backend's janitor ---------------------------------------------------------------------


@pytest.fixture
async def backend() -> AsyncIterator[ShellBackend]:
    # A site's longest grace far shorter than the pods' own: the script's tree is killed before it can clean up.
    shell = ShellBackend(max_concurrent=4, kill_grace_s=0.5)
    shell.configure(SITE)
    await shell.start()
    yield shell
    await shell.close()


def job_spec(tmp_path: Path, p: dict[str, Any]) -> JobSpec:
    uid = p["metadata"]["uid"]
    job_dir = tmp_path / uid
    job_dir.mkdir(mode=0o700)
    (job_dir / layout.SCRIPT_NAME).write_text(render_job({"pod": p}, PODMAN).script)
    return JobSpec(uid=uid, job_dir=job_dir, script=job_dir / layout.SCRIPT_NAME)


async def test_cancel_removes_every_container_of_the_pod(
    podman_host: PodmanHost, backend: ShellBackend, tmp_path: Path
) -> None:
    p = bbox_pod({"a": "echo up; sleep 600", "b": "echo up; sleep 600"}, terminationGracePeriodSeconds=300)
    spec = job_spec(tmp_path, p)
    await backend.submit(spec)
    await until(lambda: len(of_pod(podman_host, spec.uid)) == 2, "both containers running")
    await backend.cancel(spec.handle)
    await until(lambda: of_pod(podman_host, spec.uid) == [], "the pod's containers removed once its tree is killed")
    obs = (await backend.poll([spec.handle]))[spec.uid]
    assert obs.state in (BackendState.CANCELLED, BackendState.FAILED)


async def test_a_restarted_backend_removes_containers_of_jobs_that_no_longer_run(
    podman_host: PodmanHost, backend: ShellBackend, tmp_path: Path
) -> None:
    gone = job_spec(tmp_path, bbox_pod({"main": "sleep 600"}))
    alive = job_spec(tmp_path, bbox_pod({"main": "sleep 600"}))
    await backend.submit(gone)
    await backend.submit(alive)
    for spec in (gone, alive):
        await until(lambda s=spec: len(of_pod(podman_host, s.uid)) == 1, "the container running")  # type: ignore[misc]
    # The job script of `gone` dies at once (a crash, the OOM killer, a reboot of the runner): its container
    # runs on, since each podman client has a process group of its own.
    runner = int((gone.job_dir / ".shell.pid").read_text())
    os.killpg(runner, signal.SIGKILL)
    await backend.close()

    restarted = ShellBackend(max_concurrent=4, kill_grace_s=0.5)
    restarted.configure(SITE)
    await restarted.start()
    try:
        assert of_pod(podman_host, gone.uid) == []
        assert len(of_pod(podman_host, alive.uid)) == 1  # its job still runs: left alone
        await restarted.cancel(alive.handle)
        await until(lambda: of_pod(podman_host, alive.uid) == [], "the cancelled pod's containers removed")
    finally:
        await restarted.close()


# --- end to end over HTTP ----------------------------------------------------------------------------


@pytest.fixture
async def podman_stack(podman_host: PodmanHost, nats_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    pool = new_pool()
    config = tmp_path / "submitter.yaml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "pool": pool,
                "backend": "shell",
                "nats_url": [nats_url],
                "state_dir": str(tmp_path / "state"),
                "poll_interval": 0.2,
                "announce_interval": 5.0,
                "kill_grace": 1.0,
                "build_config": {"runtime": "CONTAINER_RUNTIME_PODMAN", "limits": {"maxTerminationGraceSeconds": 1}},
                "storage": OPEN_HOST_PATHS_SECTION,
            }
        )
    )
    async with (
        Submitter(SubmitterSettings.load(config)) as submitter,
        gateway_only(nats_url, default_pool=pool) as stack,
    ):
        assert submitter.build_config.runtime == pb.ContainerRuntime.PODMAN
        stack.submitter = submitter
        yield stack


async def test_a_pod_runs_in_podman_end_to_end(podman_stack: Any, podman_host: PodmanHost, tmp_path: Path) -> None:
    stack = podman_stack
    gate = tmp_path / "gate"
    gate.mkdir()
    script = 'echo "in podman: $(grep -c libpod /proc/1/cgroup)"; until [ -e /gate/open ]; do sleep 0.1; done; echo bye'
    p = bbox_pod({"main": script, "fails": "echo failing; exit 4"}, gate=gate)
    created = await stack.post("/create", create_body(p))
    assert created.status_code == 200, created.text
    uid = p["metadata"]["uid"]
    await until(lambda: len(of_pod(podman_host, uid)) >= 1, "a container of the pod in podman")

    async def main_running() -> bool:
        status = await stack.status_of(p)
        return any(c["name"] == "main" and "running" in c["state"] for c in status["containers"])

    await eventually(main_running, within=60, what="main running")
    lines: list[str] = []
    async with stack.http.stream("GET", "/getLogs", json=logs_body(p, "main", Follow=True)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                lines.append(line)
                if line.startswith("in podman"):
                    (gate / "open").touch()  # the follow is live: only now may the container finish
    assert lines[0].startswith("in podman: ") and int(lines[0].split(": ")[1]) >= 1  # its cgroup is podman's
    assert lines[1:] == ["bye"]

    async def done() -> bool:
        return terminated(await stack.status_of(p))

    await eventually(done, within=60, what="every container terminated")
    status = await stack.status_of(p)
    codes = {c["name"]: c["state"]["terminated"]["exitCode"] for c in status["containers"]}
    assert codes == {"main": 0, "fails": 4}
    logs = await stack.get("/getLogs", logs_body(p, "fails"))
    assert logs.status_code == 200 and logs.text == "failing\n"
    assert of_pod(podman_host, uid) == []  # --rm: ended containers are gone
    assert (await stack.post("/delete", p)).status_code == 200


async def test_delete_stops_and_removes_the_pods_containers(podman_stack: Any, podman_host: PodmanHost) -> None:
    stack = podman_stack
    p = bbox_pod({"stubborn": "echo up; sleep 600"}, terminationGracePeriodSeconds=300)
    assert (await stack.post("/create", create_body(p))).status_code == 200
    uid = p["metadata"]["uid"]
    await until(lambda: len(of_pod(podman_host, uid)) == 1, "the container running")
    deleted = await stack.post("/delete", p)
    assert deleted.status_code == 200
    await until(lambda: of_pod(podman_host, uid) == [], "the container removed within the site's grace (1 s)")
    after = await stack.get("/status", [p])
    assert after.status_code == 200 and after.json() == []
