"""A Slurm submitter that cannot submit says so, as a real process on a real Slurm.

Before: without ``sbatch`` on PATH it started, answered /healthz 200, turned every Submit into a transient error
the gateway waited out ("no submitter answered within 5s"), logged nothing, and once restarted with ``sbatch``
back it ran Slurm jobs for pods the gateway had already refused. Now: the start is refused in one line (exit 2);
a program removed while serving fails /healthz and refuses each Submit at once, naming it; and what was refused
is never submitted later, which Slurm itself (``squeue``) confirms.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.testing import wait_for
from jobs import pod_job
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = pytest.mark.slurm

TOOLS = ("sbatch", "squeue", "scancel", "sinfo")
"""What the slurm backend runs on the submitter's host (sacct only with accounting, which the test cluster lacks)."""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    await ensure_events_stream(conn.jetstream(timeout=5))
    yield conn
    await conn.close()


def tool_dir(path: Path, tools: tuple[str, ...] = TOOLS) -> Path:
    """A directory holding only ``tools`` (links to Slurm's own): the submitter's whole PATH."""
    path.mkdir()
    for tool in tools:
        real = shutil.which(tool)
        assert real is not None, f"{tool} is not installed"
        (path / tool).symlink_to(real)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmSubmitter:
    """``interlink-nats submitter slurm`` as a child process whose PATH is ``bin_dir`` alone."""

    def __init__(self, tmp: Path, bin_dir: Path, nats_url: str, pool: str) -> None:
        self.port = free_port()
        self.log = tmp / "submitter.log"
        self.argv = [
            *(str(Path(sys.executable).parent / "interlink-nats"), "submitter", "slurm", "--pool", pool),
            *("--nats-url", nats_url, "--state-dir", str(tmp / "state"), "--poll-interval", "0.5"),
            *("--probe-port", str(self.port), "--log-level", "info"),
        ]
        self.env = {**os.environ, "PATH": str(bin_dir)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SlurmSubmitter:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    async def health(self, status: int) -> dict[str, Any]:
        """/healthz once it answers ``status``."""

        async def answered() -> dict[str, Any] | None:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                async with httpx.AsyncClient(timeout=10) as http:
                    response = await http.get(f"http://127.0.0.1:{self.port}/healthz")
            except httpx.TransportError:
                return None
            body: dict[str, Any] = response.json()
            return body if response.status_code == status else None

        return await wait_for(answered, timeout=90, interval=0.2, what=f"/healthz {status}")


def slurm_jobs_named(slurm: SlurmCluster, names: list[str]) -> list[str]:
    """Jobs Slurm holds (queued, running or ended within MinJobAge) whose name is one of ``names``: what ran."""
    listed = slurm.run("squeue", "-h", "--states=all", "-o", "%j").stdout.split()
    return [name for name in listed if name in names]


def test_without_sbatch_the_start_is_refused_in_one_line(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path / "bin", ("squeue", "scancel", "sinfo"))
    submitter = SlurmSubmitter(tmp_path, bin_dir, "nats://127.0.0.1:1", "nosbatch")
    argv = submitter.argv[: submitter.argv.index("--probe-port")]  # no probes: their address is logged at start
    done = subprocess.run(argv, env=submitter.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == (
        f"interlink-nats: error: slurm cannot submit: not on PATH ({bin_dir}) or not executable: "
        "sbatch (set its path with slurm.sbatch)"
    )


async def test_sbatch_removed_while_serving_fails_health_and_each_submit_at_once(
    slurm: SlurmCluster, tmp_path: Path, nats_url: str, nc: nats.NATS
) -> None:
    pool = f"cmds{uuid.uuid4().hex[:8]}"
    bin_dir = tool_dir(tmp_path / "bin")
    submitter = SlurmSubmitter(tmp_path, bin_dir, nats_url, pool).start()
    try:
        assert (await submitter.health(200))["checks"]["commands"]["ok"]
        (bin_dir / "sbatch").unlink()
        failing = await submitter.health(503)
        detail = failing["checks"]["commands"]["detail"]
        missing = f"not on PATH ({bin_dir}) or not executable: sbatch (set its path with slurm.sbatch)"
        assert detail == f"slurm cannot submit: {missing}"
        client = submitter_client(nc, pool, timeout=30)
        uids = [str(uuid.uuid4()) for _ in range(2)]
        for uid in uids:
            started = time.monotonic()
            with pytest.raises(GRPCError) as refused:
                await client.submit(pb.SubmitRequest(job=pod_job(uid, {"main": "true"})))
            elapsed = time.monotonic() - started
            # FAILED_PRECONDITION: the gateway answers its create with it at once (409), it does not wait 5 s for
            # another submitter as it does on UNAVAILABLE.
            assert refused.value.status is Status.FAILED_PRECONDITION, refused.value
            assert refused.value.message == detail
            assert elapsed < 2.0, f"answered after {elapsed:.1f}s"
        (bin_dir / "sbatch").symlink_to(shutil.which("sbatch", path=os.environ["PATH"]) or "sbatch")
        await submitter.health(200)
        uid = str(uuid.uuid4())
        assert (await client.submit(pb.SubmitRequest(job=pod_job(uid, {"main": "true"})))).job_id
        assert slurm_jobs_named(slurm, [*uids, uid]) == [uid]
    finally:
        submitter.stop()
    logged = [line for line in submitter.log.read_text().splitlines() if "cannot submit" in line]
    assert len(logged) == 1, logged  # once, when sbatch went missing: not per Submit or per check


async def test_pods_refused_while_sbatch_was_missing_never_run_after_a_restart(
    slurm: SlurmCluster, tmp_path: Path, nats_url: str, nc: nats.NATS
) -> None:
    pool = f"cmds{uuid.uuid4().hex[:8]}"
    bin_dir = tool_dir(tmp_path / "bin")
    submitter = SlurmSubmitter(tmp_path, bin_dir, nats_url, pool).start()
    client = submitter_client(nc, pool, timeout=5)  # the Submit's deadline (Rpc-Timeout): 5 s
    uids = [str(uuid.uuid4()) for _ in range(2)]
    try:
        await submitter.health(200)
        (bin_dir / "sbatch").unlink()
        deadline = time.monotonic() + 5
        for uid in uids:  # answered with an error (before: UNAVAILABLE, which the gateway waited out, then 503)
            with pytest.raises(GRPCError):
                await client.submit(pb.SubmitRequest(job=pod_job(uid, {"main": "true"})))
    finally:
        submitter.stop()
    (bin_dir / "sbatch").symlink_to(shutil.which("sbatch", path=os.environ["PATH"]) or "sbatch")
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))  # the callers' deadline has passed
    restarted = SlurmSubmitter(tmp_path, bin_dir, nats_url, pool).start()
    try:
        await restarted.health(200)  # recovery is over before the submitter serves
        assert slurm_jobs_named(slurm, uids) == [], "a refused pod ran on Slurm"
        for uid in uids:
            status = (await client.get_status(pb.GetStatusRequest(pod_uids=[uid]))).statuses[0]
            assert status.state == pb.JobState.FAILED and "gave up" in status.message, status
        control = str(uuid.uuid4())  # the count below does see what this submitter submits
        assert (await client.submit(pb.SubmitRequest(job=pod_job(control, {"main": "true"})))).job_id
        assert slurm_jobs_named(slurm, [*uids, control]) == [control], "a refused pod ran on Slurm"
    finally:
        restarted.stop()
