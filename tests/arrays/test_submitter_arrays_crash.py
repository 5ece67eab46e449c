"""``kill -9`` of a real shell submitter process while arrays are being submitted (SubmitGroup of kind ARRAY),
then a restart: every array's task ran exactly once, none lost, none submitted twice."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import uuid
from pathlib import Path

import nats
import pytest
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.testing import wait_for
from jobs import pod_job
from submitter_process import RETRYABLE, TERMINAL, start_cli, wait_ready

ARRAYS, SIZE = 40, 10


def an_array(ran: Path) -> list[pb.JobScript]:
    array_uid = f"a-{uuid.uuid4().hex}"
    members = []
    for task in range(SIZE):
        u = str(uuid.uuid4())
        job = pod_job(u, {"main": f"echo {u} >> {ran}"}, name=f"scan-{task}")
        job.array = pb.ArrayMember(array_uid=array_uid, job_name="scan", job_uid="j", task=task, size=SIZE)
        members.append(job)
    return members


async def submit_until_done(client: pb.SubmitterServiceStub, members: list[pb.JobScript], answered: list[str]) -> None:
    """What the gateway does: retry a SubmitGroup until some submitter answers it."""
    request = pb.SubmitGroupRequest(members=members, kind=pb.GroupKind.ARRAY)
    while True:
        try:
            reply = await client.submit_group(request, timeout=10)
        except GRPCError as exc:
            if exc.status not in RETRYABLE:
                raise
            await asyncio.sleep(0.2)
            continue
        assert len(reply.member_job_ids) == SIZE and all(reply.member_job_ids)
        answered.append(members[0].array.array_uid if members[0].array else "")
        return


@pytest.mark.timeout(180)
async def test_kill_9_while_arrays_are_submitted_runs_every_task_exactly_once(tmp_path: Path, nats_url: str) -> None:
    pool = f"arrcrash{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    ran = tmp_path / "ran.txt"
    log = tmp_path / "submitter.log"
    nc = await nats.connect(nats_url)
    client = submitter_client(nc, pool, timeout=10)
    arrays = [an_array(ran) for _ in range(ARRAYS)]
    uids = [m.pod.uid for a in arrays for m in a if m.pod is not None]
    proc = await start_cli(state, nats_url, pool, log)
    try:
        await wait_ready(client, proc, log)
        answered: list[str] = []
        sem = asyncio.Semaphore(10)

        async def one(members: list[pb.JobScript]) -> None:
            async with sem:
                await submit_until_done(client, members, answered)

        sending = asyncio.gather(*(one(a) for a in arrays))
        await wait_for(
            lambda: asyncio.sleep(0, len(answered) >= 5), timeout=60, interval=0.01, what="5 arrays answered"
        )
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        assert len(answered) < ARRAYS, "the kill must land while arrays are in flight"
        proc = await start_cli(state, nats_url, pool, log)
        await asyncio.wait_for(sending, 90)
        assert sorted(answered) == sorted(a[0].array.array_uid for a in arrays if a[0].array)

        async def all_terminal() -> bool:
            resp = await client.get_status(pb.GetStatusRequest(pod_uids=uids))
            assert not resp.unknown_pod_uids
            return all(s.state in TERMINAL for s in resp.statuses)

        await wait_for(all_terminal, timeout=90, interval=0.5, what="every task to finish")
        lines = ran.read_text().split()
        assert sorted(lines) == sorted(uids), "every task ran, and exactly once"
        with contextlib.closing(sqlite3.connect(state / "registry.sqlite3")) as db:
            rows = db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        assert rows == [(int(pb.JobState.SUCCEEDED), ARRAYS * SIZE)]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
        await nc.close()
