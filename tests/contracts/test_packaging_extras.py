"""A site's login node gets a submitter and nothing of the gateway or the controller.

`pip install 'interlink-nats[submitter]'` must bring what a submitter needs (checked on the installed
metadata) and a submitter must run jobs without the other extras' libraries (checked by running one
with them made unimportable, see tests/harness/without_extras.py). Before the extras split the base install
pulled the gateway's and the controller's dependencies (a 140 MB venv) into every submitter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib.metadata import distribution
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parents[1] / "harness"
WITHOUT_EXTRAS = [sys.executable, str(HERE / "without_extras.py")]
GATEWAY_OR_CONTROLLER = {"starlette", "uvicorn", "httptools", "redis", "jinja2", "lightkube", "httpx2", "httpx"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirement: str) -> set[str]:
    """Every distribution pip installs for ``requirement`` (resolved on this environment's metadata)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(requirement)]
    while todo:
        req = todo.pop()
        key = (_norm(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        for raw in distribution(req.name).requires or []:
            sub = Requirement(raw)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in {*req.extras, ""}):
                todo.append(sub)
    return {name for name, _ in seen}


def test_the_submitter_extra_brings_nothing_of_the_gateway_or_the_controller() -> None:
    submitter = closure("interlink-nats[submitter]")
    assert {"aiosqlite", "nats-py", "betterproto2", "pydantic-settings", "aiohttp"} <= submitter
    assert not submitter & GATEWAY_OR_CONTROLLER, sorted(submitter & GATEWAY_OR_CONTROLLER)
    assert {"starlette", "uvicorn", "redis", "jinja2"} <= closure("interlink-nats[gateway]")
    assert {"lightkube", "httpx2"} <= closure("interlink-nats[controller]")
    assert "starlette" not in closure("interlink-nats[controller]")


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["render", "pod.json"], "gateway"),
        (["gateway"], "gateway"),
        (["controller", "run"], "controller"),
        (["up"], "all"),  # was pointed at [gateway], the one other extra, then lacked the nats-server binary
    ],
)
def test_commands_of_a_missing_extra_name_it(args: list[str], extra: str) -> None:
    result = subprocess.run([*WITHOUT_EXTRAS, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"pip install 'interlink-nats[{extra}]'" in result.stderr.strip().splitlines()[-1]


@contextlib.contextmanager
def submitter_process(nats_url: str, pool: str, state_dir: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            *WITHOUT_EXTRAS,
            "submitter",
            "shell",
            "--pool",
            pool,
            "--nats-url",
            nats_url,
            "--state-dir",
            str(state_dir),
            "--poll-interval",
            "0.2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def test_a_submitter_without_the_other_extras_runs_a_job(nats_url: str, tmp_path: Path) -> None:
    pool = f"extras-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    try:
        await ensure_events_stream(nc.jetstream())  # the gateway's (or an admin's) step, not the pool's
        uid = str(uuid.uuid4())
        pod = {
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]},
        }
        job = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        client = submitter_client(nc, pool, timeout=5.0)
        with submitter_process(nats_url, pool, tmp_path / "state") as proc:
            deadline = asyncio.get_running_loop().time() + 90
            while True:
                assert proc.poll() is None, f"the submitter exited: {proc.stderr.read() if proc.stderr else ''}"
                with contextlib.suppress(Exception):
                    await client.describe(pb.DescribeRequest())
                    break
                assert asyncio.get_running_loop().time() < deadline, "the submitter never answered"
                await asyncio.sleep(0.2)
            await client.submit(pb.SubmitRequest(job=job))
            while True:
                status = (await client.get_status(pb.GetStatusRequest(pod_uids=[uid]))).statuses[0]
                codes = [c.exit_code for c in status.containers if c.exit_code is not None]
                if codes:
                    break
                assert asyncio.get_running_loop().time() < deadline, f"the job never finished: {status}"
                await asyncio.sleep(0.2)
        assert codes == [3]
    finally:
        await nc.close()
