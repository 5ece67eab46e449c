"""Rendered scripts started as the shell backend starts them, for a real container runtime.

``Runtime`` is one runtime the tests run pods with; ``make_pod`` and ``sh`` build pods of shell containers;
the ``start_job`` fixture (each test module imports it by name) renders a pod and starts its script in its own
process group, and kills what is left at the end. Used by ``test_containers_run*.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job

RT = pb.ContainerRuntime


@dataclass
class Runtime:
    name: str
    build_config: pb.BuildConfig
    image: str
    leftovers: Callable[[str], list[str]]
    """Containers of one pod UID still known to the runtime after its script ended."""


# --- pods and jobs ---------------------------------------------------------------------------------


def make_pod(
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    data: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": str(uuid.uuid4()), "annotations": {"app": 'ütf-8 "x"'}},
            "spec": {"containers": containers, "initContainers": init or [], "volumes": volumes or [], **spec},
        },
        "container": [data] if data else [],
    }


def sh(name: str, script: str, image: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["sh", "-c", script, name], "args": list(args), **extra}


@dataclass
class Job:
    job_dir: Path
    uid: str
    proc: subprocess.Popen[bytes]

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)

    def exit_code(self, name: str) -> int:
        return int(layout.exit_path(self.job_dir, name).read_text())

    def log(self, name: str) -> str:
        return layout.log_path(self.job_dir, name).read_text()


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[[Runtime, dict[str, Any]], Job]]:
    """Render a pod for the runtime and start its script as the shell backend does (own process group)."""
    jobs: list[Job] = []

    def start(rt: Runtime, data: dict[str, Any]) -> Job:
        job_dir = tmp_path / f"job{len(jobs)}"
        job_dir.mkdir()
        (job_dir / layout.SCRIPT_NAME).write_text(render_job(data, rt.build_config).script)
        with (job_dir / layout.JOB_STDOUT).open("wb") as job_out:
            proc = subprocess.Popen(
                ["bash", layout.SCRIPT_NAME],
                cwd=job_dir,
                env={**os.environ, layout.JOB_DIR_ENV: str(job_dir)},
                stdin=subprocess.DEVNULL,
                stdout=job_out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        job = Job(job_dir, data["pod"]["metadata"]["uid"], proc)
        jobs.append(job)
        return job

    yield start
    for job in jobs:  # a failed test's job: cancelled as a delete would (its containers stopped), then killed
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGTERM)
            try:
                job.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()


def eventually(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    """Wait for an event with a generous deadline (the machine may be loaded); back-off capped at 0.2 s."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
