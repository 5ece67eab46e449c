"""Fault tests of the shell submitter run as a real process through its CLI.

- ``kill -9`` while 1,000 creates are in flight, restart: exactly 1,000 jobs, none lost, none run twice.
- nats-server restarted mid-run: in-flight creates complete or fail clearly; events resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import events_subject
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from submitter_process import RETRYABLE, TERMINAL, start_cli, wait_ready


async def submit_until_done(client: pb.SubmitterServiceStub, job: pb.JobScript, answered: list[str]) -> None:
    """What a gateway does: retry a create until some submitter answers it."""
    while True:
        try:
            await client.submit(pb.SubmitRequest(job=job), timeout=10)
        except GRPCError as exc:
            if exc.status not in RETRYABLE:
                raise
            await asyncio.sleep(0.2)
            continue
        answered.append(job.pod.uid)
        return


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


@pytest.mark.timeout(120)
async def test_kill_9_during_1000_creates_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, nats_url: str, nc: nats.NATS
) -> None:
    pool = f"crash{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    ran = tmp_path / "ran.txt"
    log = tmp_path / "submitter.log"
    client = submitter_client(nc, pool, timeout=10)
    uids = [str(uuid.uuid4()) for _ in range(1000)]
    jobs = [pod_job(u, {"main": f"echo {u} >> {ran}"}) for u in uids]

    proc = await start_cli(state, nats_url, pool, log)
    await wait_ready(client, proc, log)
    answered: list[str] = []
    sem = asyncio.Semaphore(200)

    async def one(job: pb.JobScript) -> None:
        async with sem:
            await submit_until_done(client, job, answered)

    t0 = time.monotonic()
    creates = asyncio.gather(*(one(j) for j in jobs))
    await wait_for(
        lambda: asyncio.sleep(0, len(answered) >= 250), timeout=40, interval=0.01, what="250 answered creates"
    )
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    killed_at = len(answered)
    assert killed_at < 1000, "the kill must land while creates are in flight"

    proc = await start_cli(state, nats_url, pool, log)
    try:
        await asyncio.wait_for(creates, 60)
        assert sorted(answered) == sorted(uids)

        async def all_terminal() -> bool:
            states: list[pb.JobState] = []
            for i in range(0, len(uids), 500):
                resp = await client.get_status(pb.GetStatusRequest(pod_uids=uids[i : i + 500]))
                assert not resp.unknown_pod_uids
                states += [s.state for s in resp.statuses]
            return all(s in TERMINAL for s in states)

        await wait_for(all_terminal, timeout=60, interval=0.5, what="every job to finish")
        lines = ran.read_text().split()
        assert len(lines) == 1000, f"{len(lines)} runs for 1000 jobs"
        assert set(lines) == set(uids)
        with contextlib.closing(sqlite3.connect(state / "registry.sqlite3")) as db:
            rows = db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        assert rows == [(int(pb.JobState.SUCCEEDED), 1000)]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
    print(f"killed after {killed_at} answers; total {time.monotonic() - t0:.1f}s")


async def test_sigterm_drains_and_exits_cleanly(tmp_path: Path, nats_url: str, nc: nats.NATS) -> None:
    pool = f"term{uuid.uuid4().hex[:8]}"
    log = tmp_path / "submitter.log"
    client = submitter_client(nc, pool, timeout=5)
    proc = await start_cli(tmp_path / "state", nats_url, pool, log)
    await wait_ready(client, proc, log)
    u = str(uuid.uuid4())
    await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "sleep 2; echo done"})))
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0, log.read_text()[-2000:]
    # The job outlives its submitter, and a new one picks it up where it was.
    proc = await start_cli(tmp_path / "state", nats_url, pool, log)
    try:
        await wait_ready(client, proc, log)

        async def succeeded() -> bool:
            st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
            return st.state == pb.JobState.SUCCEEDED

        await wait_for(succeeded, what="the job to succeed under the new submitter")
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)


@pytest.mark.timeout(120)
async def test_nats_restart_mid_run_creates_finish_or_fail_clearly_and_events_resume(
    tmp_path: Path, fresh_nats_server: NatsServerProcess
) -> None:
    pool = f"nrs{uuid.uuid4().hex[:8]}"
    url = fresh_nats_server.url
    settings = settings_for(tmp_path / "state", url, pool=pool, reconnect_wait_max=0.5)
    admin = await nats.connect(url)
    await ensure_events_stream(admin.jetstream())  # as the gateway or an admin step does: pools never create it
    await admin.close()
    async with Submitter(settings) as sub:
        client_nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            client = submitter_client(client_nc, pool, timeout=5)
            uids = [str(uuid.uuid4()) for _ in range(60)]
            outcomes: dict[str, str] = {}

            async def create(u: str) -> None:
                try:
                    await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "sleep 0.5"})))
                    outcomes[u] = "ok"
                except GRPCError as exc:
                    outcomes[u] = f"{exc.status.name}: {exc.message}"

            first = [asyncio.create_task(create(u)) for u in uids[:30]]
            await asyncio.sleep(0.05)
            await asyncio.to_thread(fresh_nats_server.restart_blocking)
            await asyncio.gather(*first)
            assert set(outcomes) == set(uids[:30])
            for outcome in outcomes.values():  # each either went through or failed with a clear, retryable error
                name, _, message = outcome.partition(": ")
                assert outcome == "ok" or (Status[name] in RETRYABLE and message), outcome

            async def reconnected() -> bool:
                return bool(sub.nc and sub.nc.is_connected and client_nc.is_connected)

            await wait_for(reconnected, what="both sides to reconnect")
            # Whatever failed is retried (idempotent), and the rest go through.
            await asyncio.gather(*(submit_until_done(client, pod_job(u, {"main": "sleep 0.5"}), []) for u in uids))

            js = client_nc.jetstream()
            events = await js.subscribe(events_subject(pool), ordered_consumer=True)
            final: dict[str, pb.JobState] = {}

            async def every_job_succeeded() -> bool:
                with contextlib.suppress(nats.errors.TimeoutError):
                    while True:
                        ev = pb.JobEvent.parse((await events.next_msg(timeout=0.2)).data)
                        final[ev.status.pod.uid] = ev.status.state
                return all(final.get(u) == pb.JobState.SUCCEEDED for u in uids)

            await wait_for(every_job_succeeded, timeout=60, what="SUCCEEDED events for every job")
            await events.unsubscribe()  # an ordered consumer's heartbeat task ends only with its subscription
            assert sub.unpublished == 0
        finally:
            await client_nc.close()
