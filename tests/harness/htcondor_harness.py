"""The htcondor tests' harness: the condor_* STAND-INS on PATH (plain schedd or HTCondor-CE mode), a pool, a
submitter client and the waits the stand-in tests share
(tests/backends/htcondor/test_htcondor.py, tests/backends/htcondor/test_htcondor_ce_router.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import htcondor_standin as standin
import nats
import pytest
from conftest import missing_service
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.testing import settings_for, wait_for

TERMINAL = {pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST}


class Condor:
    """The stand-ins on PATH, and what they were asked."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def calls(self, tool: str | None = None) -> list[str]:
        return [c for c in standin.calls(self.root) if tool is None or c.split()[0] == tool]

    def history(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in (self.root / "history").glob("*.json")]

    def queue(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in (self.root / "queue").glob("*.json")]


def start_condor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, ce: bool = False) -> Iterator[Condor]:
    """The stand-ins on PATH for one test (``ce``: an HTCondor-CE's schedd and job router); no job left behind."""
    try:
        import classad2  # noqa: F401
        import htcondor2  # noqa: F401
    except ImportError:
        missing_service("the HTCondor Python bindings the stand-ins use (pip install htcondor)")
    env = standin.install(tmp_path / "bin", tmp_path / "condor", ce=ce)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STANDIN_PERIODIC_INTERVAL", "0.1")
    yield Condor(tmp_path / "condor")
    for ad in Condor(tmp_path / "condor").queue():  # leave no job process behind
        if ad.get("_pid"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(ad["_pid"]), signal.SIGKILL)


@pytest.fixture(name="pool")
def pool_fixture() -> str:
    return f"htc{uuid.uuid4().hex[:8]}"


def htc_settings(tmp_path: Path, nats_url: str, pool: str, **htcondor: Any) -> Any:
    return settings_for(
        tmp_path / "state", nats_url, pool=pool, backend="htcondor", poll_interval=0.3, htcondor=htcondor
    )


@pytest.fixture(name="client")
async def client_fixture(nats_url: str, pool: str) -> AsyncIterator[pb.SubmitterServiceStub]:
    nc = await nats.connect(nats_url)
    yield submitter_client(nc, pool, timeout=30)
    await nc.close()


async def status_of(client: pb.SubmitterServiceStub, u: str) -> pb.JobStatus:
    return (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]


async def until(client: pb.SubmitterServiceStub, u: str, ok: Any, what: str, within: float = 60) -> pb.JobStatus:
    async def check() -> pb.JobStatus | None:
        resp = await client.get_status(pb.GetStatusRequest(pod_uids=[u]))
        st = resp.statuses[0] if resp.statuses else None
        return st if st is not None and ok(st) else None

    return await wait_for(check, timeout=within, interval=0.2, what=what)


async def until_terminal(client: pb.SubmitterServiceStub, u: str, within: float = 60) -> pb.JobStatus:
    return await until(client, u, lambda st: st.state in TERMINAL, f"pod {u} to end", within)


async def deadline_pod_ends_deadline_exceeded(client: pb.SubmitterServiceStub) -> str:
    """Submit a pod of ``activeDeadlineSeconds: 1`` that would sleep 300 s; it must end DeadlineExceeded
    (143, the reason naming the field). Returns its UID, for what a test checks beyond."""
    from jobs import pod_job

    u = str(uuid.uuid4())
    await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": "sleep 300"}, active_deadline_seconds=1)))
    st = await until_terminal(client, u, within=60)
    assert st.state == pb.JobState.FAILED
    assert st.reason == "DeadlineExceeded"
    assert "activeDeadlineSeconds" in st.message
    assert st.containers[0].exit_code == 143
    return u


async def logs_of(client: pb.SubmitterServiceStub, u: str, container: str) -> bytes:
    return b"".join([c.data async for c in client.get_logs(pb.GetLogsRequest(pod_uid=u, container=container))])
