"""A real submitter process for crash tests: started from the CLI, waited for until it answers RPC."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.testing import wait_for

RETRYABLE = {Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.CANCELLED, Status.UNKNOWN}


TERMINAL = {pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST}


async def start_cli(state_dir: Path, nats_url: str, pool: str, log: Path) -> asyncio.subprocess.Process:
    args = [
        sys.executable,
        "-m",
        "interlink_nats.submitters.cli",
        "shell",
        "--pool",
        pool,
        "--nats-url",
        nats_url,
        "--state-dir",
        str(state_dir),
        "--poll-interval",
        "0.2",
        "--max-concurrent-jobs",
        "32",
        "--log-level",
        "warning",
    ]
    fh = log.open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            *args, stdout=fh, stderr=fh, stdin=asyncio.subprocess.DEVNULL, start_new_session=True
        )
    finally:
        fh.close()


async def wait_ready(client: pb.SubmitterServiceStub, proc: asyncio.subprocess.Process, log: Path) -> None:
    async def ready() -> bool:
        if proc.returncode is not None:
            tail = await asyncio.to_thread(log.read_text)
            raise AssertionError(f"submitter exited {proc.returncode}: {tail[-3000:]}")
        try:
            await client.describe(pb.DescribeRequest(), timeout=1)
        except GRPCError:
            return False
        return True

    await wait_for(ready, timeout=30, what="the submitter to serve")
