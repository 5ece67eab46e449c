"""The submitter's /metrics says what a site is asked to do and what fails: Submits by outcome and reason, batch
command latency and RPC latency, scraped over HTTP from a real ``interlink-nats submitter shell`` process on a real
nats-server, as an operator's Prometheus would.

Before: /metrics had the poll and connection gauges only; no Submit, failure or latency series.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.backends.proc import run_command, time_commands
from interlink_nats.submitters.core.backend import BackendUnavailable, CommandFailed
from interlink_nats.submitters.core.errors import SubmitterFault
from interlink_nats.submitters.edge.metrics import ANSWERS, CANCELLED, INTERNAL, SUBMIT_ANSWERS, answer_of
from jobs import pod_job
from prometheus_client.parser import text_string_to_metric_families
from shell_submitter import uid
from stack import free_port, new_pool

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 60.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: Samples, name: str, **labels: str) -> float:
    return scrape.get((name, frozenset(labels.items())), 0.0)


@dataclass
class RunningSubmitter:
    pool: str
    metrics_url: str
    log: Path

    async def scrape(self) -> Samples:
        async with httpx.AsyncClient(timeout=30.0) as http:
            response = await http.get(self.metrics_url)
        assert response.status_code == 200, response.text
        return samples(response.text)

    async def scrape_until(self, name: str, least: float, **labels: str) -> Samples:
        """Scrapes until the sample reaches ``least`` (a launch is observed after its Submit has answered)."""
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while value(scrape := await self.scrape(), name, **labels) < least:
            assert asyncio.get_running_loop().time() < deadline, f"{name}{labels} < {least}: {self.log.read_text()}"
            await asyncio.sleep(0.1)
        return scrape


@pytest.fixture
def submitter_process(nats_url: str, tmp_path: Path) -> Iterator[RunningSubmitter]:
    """``interlink-nats submitter shell`` with its probe port, until it says it serves its pool."""
    pool, port, log = new_pool(), free_port(), tmp_path / "submitter.log"
    args = ["submitter", "shell", "--nats-url", nats_url, "--pool", pool, "--state-dir", str(tmp_path / "state")]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, *args, "--probe-port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "serving pool" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield RunningSubmitter(pool, f"http://127.0.0.1:{port}/metrics", log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    await ensure_events_stream(conn.jetstream())  # as the gateway does: pools never create it
    yield conn
    await conn.close()


SUBMITS = "interlink_submitter_submits_total"
RPC = "interlink_submitter_rpc_seconds"
COMMANDS = "interlink_submitter_batch_command_seconds"


async def test_submits_commands_and_rpcs_are_counted_and_timed(
    submitter_process: RunningSubmitter, nc: nats.NATS
) -> None:
    sub = submitter_process
    pool = sub.pool
    before = await sub.scrape()
    for outcome, reason in SUBMIT_ANSWERS:  # every series is there from the start, at 0
        labels = {"pool": pool, "method": "Submit", "outcome": outcome, "reason": reason}
        assert (SUBMITS, frozenset(labels.items())) in before and value(before, SUBMITS, **labels) == 0

    client = submitter_client(nc, pool)
    pod_uid = uid()
    job = pod_job(pod_uid, {"main": "true"})
    first = await client.submit(pb.SubmitRequest(job=job))
    again = await client.submit(pb.SubmitRequest(job=job))  # the gateway's resend: answered with the same job
    assert first.created and not again.created and again.job_id == first.job_id
    bad = pod_job(uid(), {"main": "true"})
    assert bad.pod is not None
    bad.pod.uid = "../not a uid"
    with pytest.raises(GRPCError) as refused:
        await client.submit(pb.SubmitRequest(job=bad))
    assert refused.value.status is Status.INVALID_ARGUMENT

    # The shell backend's batch command is its launch (the job handed to its launcher, the runner's pid back).
    after = await sub.scrape_until(f"{COMMANDS}_count", 1, pool=pool, command="launch", outcome="ok")
    submits = {
        (outcome, reason): value(after, SUBMITS, pool=pool, method="Submit", outcome=outcome, reason=reason)
        for outcome, reason in SUBMIT_ANSWERS
    }
    expected = dict.fromkeys(SUBMIT_ANSWERS, 0.0)
    expected.update({("accepted", "created"): 1, ("accepted", "existing"): 1, ("refused", "invalid_request"): 1})
    assert submits == expected
    assert value(after, f"{COMMANDS}_sum", pool=pool, command="launch", outcome="ok") > 0

    # Each call served is timed by method and outcome; the refused one is an invalid_argument.
    assert value(after, f"{RPC}_count", pool=pool, method="Submit", outcome="ok") == 2
    assert value(after, f"{RPC}_count", pool=pool, method="Submit", outcome="invalid_argument") == 1
    assert value(after, f"{RPC}_sum", pool=pool, method="Submit", outcome="ok") > 0
    await client.get_status(pb.GetStatusRequest(pod_uids=[pod_uid]))
    timed = await sub.scrape()
    assert value(timed, f"{RPC}_count", pool=pool, method="GetStatus", outcome="ok") == 1

    # Bounded labels: nothing of a pod (its uid, the refused one's) became a label value.
    label_values = {v for (_, labels) in timed for _, v in labels}
    assert pod_uid not in label_values and "../not a uid" not in label_values


async def test_every_command_run_is_timed_with_its_outcome() -> None:
    """Real programs through ``run_command``, the one place a backend runs one: each outcome it can have."""
    seen: list[tuple[str, str]] = []
    time_commands(lambda command, outcome, seconds: seen.append((command, outcome)) if seconds >= 0 else None)
    await run_command(["true"], command="squeue")
    await run_command(["false"], check=False, command="condor_q")  # the caller reads the exit: still a failure
    with pytest.raises(CommandFailed):
        await run_command(["false"], command="sbatch")
    with pytest.raises(CommandFailed, match="no answer within"):
        await run_command(["sleep", "30"], time_limit=0.2, command="scancel")
    with pytest.raises(BackendUnavailable):
        await run_command(["/nonexistent/sinfo"])  # unnamed: timed as its program's file name
    sleeping = asyncio.ensure_future(run_command(["sleep", "30"], command="sacct"))
    await asyncio.sleep(0.2)
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    assert seen == [
        ("squeue", "ok"),
        ("condor_q", "failed"),
        ("sbatch", "failed"),
        ("scancel", "timeout"),
        ("sinfo", "not_run"),
        ("sacct", "cancelled"),
    ]
    time_commands(None)


def test_every_error_a_submit_can_answer_has_its_outcome_and_reason() -> None:
    """A new kind of the submitter's errors needs its (outcome, reason): else it would count as ``internal``."""

    def kinds(base: type[SubmitterFault]) -> set[type[SubmitterFault]]:
        return {base, *(k for sub in base.__subclasses__() for k in kinds(sub))}

    assert kinds(SubmitterFault) - {SubmitterFault} == set(ANSWERS)
    assert answer_of(asyncio.CancelledError()) == CANCELLED
    assert answer_of(RuntimeError("a bug")) == INTERNAL
    assert len(set(SUBMIT_ANSWERS)) == len(SUBMIT_ANSWERS)
