"""The FakeBackend's crash scenarios (tests/submitter/test_submitter_fake.py), run against the htcondor backend.

Same step boundaries and the same expected answers as the in-memory FakeBackend, but the batch
system is the condor_* STAND-INS (tests/harness/htcondor_standin.py): the job really reaches the "queue",
really runs, and a crash leaves what kill -9 leaves (committed registry rows, the job directory and
the queued HTCondor job).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import htcondor_standin as standin
import pytest
from conftest import missing_service
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.core.lifecycle import Phase
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import SimulatedCrash, crash, offline_submitter, wait_for
from jobs import pod_job

pytestmark = pytest.mark.htcondor

SUBMIT_STEPS = ["claimed", "job_dir", "submitted", "marked"]


@pytest.fixture
def condor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    try:
        import classad2  # noqa: F401
    except ImportError:
        missing_service("the HTCondor Python bindings the stand-ins use (pip install htcondor)")
    root = tmp_path / "condor"
    for key, value in standin.install(tmp_path / "bin", root).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STANDIN_PERIODIC_INTERVAL", "0.1")
    return root


def submissions(root: Path, uid: str) -> int:
    """Jobs HTCondor was given for this pod, in the queue or gone from it."""
    import json

    ads = [json.loads(p.read_text()) for folder in ("queue", "history") for p in (root / folder).glob("*.json")]
    return sum(1 for ad in ads if ad.get(hp.POD_UID_ATTR) == uid)


def backend() -> HTCondorBackend:
    return HTCondorBackend(HTCondorConfig(), pool="test")  # offline_submitter's pool


async def finished(sub: Submitter, uid: str) -> pb.JobStatus:
    async def done() -> pb.JobStatus | None:
        await sub.poll_once()
        if await sub.queries.job_phase(uid) is not Phase.DONE:
            return None
        return (await sub.queries.get_status([uid])).statuses[0]

    return await wait_for(done, timeout=60, interval=0.2, what=f"pod {uid} to finish")


@pytest.mark.parametrize("step", SUBMIT_STEPS)
async def test_a_crash_between_any_two_submit_steps_runs_the_condor_job_exactly_once(
    condor: Path, tmp_path: Path, step: str
) -> None:
    uid = str(uuid.uuid4())
    job = pod_job(uid, {"main": "echo ran"})
    async with offline_submitter(tmp_path / "state", backend(), instance_id="a") as a:  # type: ignore[arg-type]

        def die(at: str) -> None:
            if at == step:
                raise SimulatedCrash(at)

        a.submissions.on_step = die
        with pytest.raises(SimulatedCrash):
            await a.submissions.submit(job)
        await crash(a)
    async with offline_submitter(tmp_path / "state", backend(), instance_id="a") as a:  # type: ignore[arg-type]
        resp = await a.submissions.submit(job)  # the caller retries (it never got an answer)
        assert resp.job_id
        assert submissions(condor, uid) == 1, "the pod must run exactly once"
        status = await finished(a, uid)
        assert status.state == pb.JobState.SUCCEEDED
        assert status.job_id == resp.job_id


async def test_a_crash_after_condor_submit_is_recovered_without_a_retry(condor: Path, tmp_path: Path) -> None:
    """The submitter dies after condor_submit answered, before the registry heard of the id."""
    uid = str(uuid.uuid4())
    async with offline_submitter(tmp_path / "state", backend(), instance_id="a") as a:  # type: ignore[arg-type]

        def die(at: str) -> None:
            if at == "submitted":
                raise SimulatedCrash(at)

        a.submissions.on_step = die
        with pytest.raises(SimulatedCrash):
            await a.submissions.submit(pod_job(uid, {"main": "true"}))
        await crash(a)
    assert submissions(condor, uid) == 1
    async with offline_submitter(tmp_path / "state", backend(), instance_id="b") as b:  # type: ignore[arg-type]
        # Recovery alone (adoption of the dead instance, reconcile by pod-UID attribute) finds it.
        assert b.tracked == 1
        assert await b.queries.job_phase(uid) is Phase.ACTIVE
        assert (await finished(b, uid)).state == pb.JobState.SUCCEEDED
    assert submissions(condor, uid) == 1
