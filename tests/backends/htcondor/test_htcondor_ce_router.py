"""Remote (CE) mode through the stand-ins' HTCondor-CE mode: what a CE's job router does to a job.

The stand-in models the router's documented transforms (tests/harness/htcondor_standin.py ``_route``, each rule citing
htcondor-ce ``config/01-ce-router-defaults.conf``): memory from ``maxMemory`` (default 2000), cpus from
``xcount``, wall time from ``maxWallTime`` (default 4320 minutes), ``PeriodicRemove`` deleted. The submitter,
NATS, the job script and the registry are real.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import htcondor_standin as standin
import pytest
from htcondor_harness import (  # noqa: F401 (client_fixture, pool_fixture: the fixtures client and pool)
    Condor,
    client_fixture,
    deadline_pod_ends_deadline_exceeded,
    htc_settings,
    pool_fixture,
    start_condor,
    until,
    until_terminal,
)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor.backend import ORPHAN_FILE, HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.core.backend import (
    BackendState,
    BackendUnavailable,
    JobHandle,
    JobSpec,
    SubmitRejected,
)
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import wait_for
from jobs import pod_job

pytestmark = pytest.mark.htcondor

CE = {"mode": "remote", "collector": "ce.example:9619", "schedd": "ce.example"}


@pytest.fixture
def ce(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Condor]:
    yield from start_condor(tmp_path, monkeypatch, ce=True)


def routed(condor: Condor, uid: str) -> dict[str, Any]:
    """The routed copy the CE's router made of the pod's job (what the site's batch system runs)."""
    ads = [ad for ad in condor.queue() + condor.history() if ad.get(hp.POD_UID_ATTR) == uid]
    assert len(ads) == 1
    return dict(ads[0]["_routed"])


async def test_an_8_gib_pod_gets_8_gib_and_its_cpus_at_the_site(
    ce: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    async with Submitter(htc_settings(tmp_path, nats_url, pool, **CE)):
        u = str(uuid.uuid4())
        job = pod_job(u, {"main": "echo ok"}, limits={"cpu": "4", "memory": "8Gi"})
        await client.submit(pb.SubmitRequest(job=job))
        st = await until_terminal(client, u)
        assert st.state == pb.JobState.SUCCEEDED
    site = routed(ce, u)
    assert (site["RequestMemory"], site["RequestCpus"]) == (8192, 4)
    assert site["BatchRuntime"] == 4320 * 60, "no deadline: the CE's ROUTED_JOB_MAX_TIME"
    assert "PeriodicRemove" not in site


def test_request_memory_alone_would_get_the_routers_2000_mb(ce: Condor, tmp_path: Path) -> None:
    """The stand-in's router, on a description without the router's attributes (as the backend wrote before)."""
    job_dir = tmp_path / "plain"
    jobfiles.prepare_job_dir(job_dir, "exit 0\n")
    text = 'executable = job.sh\nrequest_memory = 8192\nrequest_cpus = 4\n+InterlinkPodUID = "plain"\nqueue 1\n'
    (job_dir / "condor.sub").write_text(text)
    done = subprocess.run(["condor_submit", "-terse", "-spool", str(job_dir / "condor.sub")], cwd=job_dir, check=True)
    assert done.returncode == 0
    site = routed(ce, "plain")
    assert (site["RequestMemory"], site["RequestCpus"]) == (2000, 4), "cpus kept when > 1; memory from maxMemory only"


async def test_a_deadline_pod_ends_deadline_exceeded_in_time_through_a_ce(
    ce: Condor, tmp_path: Path, nats_url: str, pool: str, client: pb.SubmitterServiceStub
) -> None:
    async with Submitter(htc_settings(tmp_path, nats_url, pool, **CE)) as sub:
        u = await deadline_pod_ends_deadline_exceeded(client)
        assert layout.deadline_path(sub.state_dir / "jobs" / u).exists(), "the marker came back in containers/"
    site = routed(ce, u)
    assert site["BatchRuntime"] == 2 * 60, "maxWallTime: 1 s + 60 s margin, in minutes rounded up"
    assert "PeriodicRemove" not in site


async def test_the_ces_wall_time_removes_a_job_that_outruns_it(ce: Condor, tmp_path: Path) -> None:
    """A site default of maxWallTime = 0 minutes (a submit command): the routed job is removed at once, and the
    CE's reason reaches the pod (01-ce-router-defaults.conf, REMOVE_REASON_4)."""
    backend = HTCondorBackend(HTCondorConfig(**CE, submit_commands={"+maxWallTime": "0"}), pool="p")
    job_dir = tmp_path / "jobs" / "w"
    jobfiles.prepare_job_dir(job_dir, "sleep 300\n")
    handle = JobHandle("w", job_dir, await backend.submit(JobSpec("w", job_dir, job_dir / "job.sh")))

    async def ended() -> Any:
        obs = (await backend.poll([handle])).get("w")
        return obs if obs is not None and obs.state.terminal else None

    obs = await wait_for(ended, timeout=60, interval=0.2, what="the CE to remove the job")
    assert obs.state is BackendState.CANCELLED
    assert "exceeded allowed walltime" in obs.reason
    assert routed(ce, "w")["BatchRuntime"] == 0


async def test_a_spool_failure_leaves_no_job_behind(
    ce: Condor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = HTCondorBackend(HTCondorConfig(**CE), pool="p")
    job_dir = tmp_path / "jobs" / "a"
    jobfiles.prepare_job_dir(job_dir, "exit 0\n")
    spec = JobSpec("a", job_dir, job_dir / "job.sh", pb.ResourceRequest(cpu_millis=1000))
    monkeypatch.setenv("STANDIN_SPOOL_FAIL", "1")
    with pytest.raises(SubmitRejected, match="Failed to spool job files"):
        await backend.submit(spec)
    assert not ce.queue(), "the job condor_submit queued before spooling was removed"
    assert [ad["JobStatus"] for ad in ce.history()] == [3]

    # condor_rm cannot be reached right then: the id is kept and removed before the next attempt.
    real_remove = backend._remove

    async def unreachable(job_ids: list[str], **kw: Any) -> None:
        raise BackendUnavailable("Failed to connect to <10.0.0.5:9619>")

    monkeypatch.setattr(backend, "_remove", unreachable)
    with pytest.raises(BackendUnavailable, match="could not be removed"):
        await backend.submit(spec)
    monkeypatch.setattr(backend, "_remove", real_remove)
    assert (job_dir / ORPHAN_FILE).exists()
    assert [ad["HoldReasonCode"] for ad in ce.queue()] == [16]
    monkeypatch.delenv("STANDIN_SPOOL_FAIL")
    monkeypatch.setenv("STANDIN_USER", "someone-else")  # the token now maps to an identity that may not remove it
    with pytest.raises(BackendUnavailable, match="1 permission denied"):
        await backend.submit(spec)
    assert len(ce.queue()) == 1, "nothing new is queued while the old job stays"
    monkeypatch.delenv("STANDIN_USER")
    job_id = await backend.submit(spec)
    assert [f"{ad['ClusterId']}.0" for ad in ce.queue()] == [job_id], "one job for the pod, never two"
    assert not (job_dir / ORPHAN_FILE).exists()


async def test_queries_follow_the_pool_not_the_tokens_identity_and_rm_tells_denied_from_gone(
    ce: Condor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = HTCondorBackend(HTCondorConfig(**CE), pool="p")
    job_dir = tmp_path / "jobs" / "b"
    jobfiles.prepare_job_dir(job_dir, "sleep 300\n")
    job_id = await backend.submit(JobSpec("b", job_dir, job_dir / "job.sh"))
    handle = JobHandle("b", job_dir, job_id)
    monkeypatch.setenv("STANDIN_USER", "remapped")  # the CE now maps the token to another user
    seen = await backend.poll([handle])
    assert "b" in seen, "condor_q -allusers: the pool constraint finds it whoever owns it"
    with pytest.raises(BackendUnavailable, match="1 permission denied"):
        await backend.cancel(handle)  # not "already gone": the job still runs
    assert [ad["JobStatus"] for ad in ce.queue()] != []
    monkeypatch.delenv("STANDIN_USER")
    await backend.cancel(handle)
    await backend.cancel(handle)  # gone now: quiet
    assert not ce.queue()
    # condor_history -json prints [] for nothing: a job neither queued nor in the history is simply gone.
    assert await backend.poll([JobHandle("c", tmp_path, "424242.0")]) == {}


def _finished(cluster: int, uid: str, pool: str) -> dict[str, Any]:
    return {
        "ClusterId": cluster,
        "ProcId": 0,
        "JobStatus": 4,
        "ExitCode": 0,
        "ExitBySignal": False,
        "CompletionDate": 1_700_000_000,
        hp.POOL_ATTR: pool,
        hp.POD_UID_ATTR: uid,
        "Owner": "nobody",
    }


@pytest.mark.timeout(600)
async def test_twenty_thousand_jobs_are_polled_and_fetched_in_chunks_none_over_the_argument_limit(
    ce: Condor, tmp_path: Path
) -> None:
    """A CE's cluster ids run to eight digits: 20,000 of them do not fit one 128 KiB argument."""
    n, first = 20_000, 10_000_000
    uids = [f"pod-{i:05d}" for i in range(n)]
    standin.seed(ce.root, queued=[], finished=[_finished(first + i, u, "big") for i, u in enumerate(uids)])
    backend = HTCondorBackend(HTCondorConfig(**CE, command_timeout_s=300), pool="big")
    handles = [JobHandle(u, tmp_path / "jobs" / u, f"{first + i}.0") for i, u in enumerate(uids)]
    seen = await backend.poll(handles)
    assert len(seen) == n and all(o.state is BackendState.COMPLETED for o in seen.values())
    sizes = standin.arg_sizes(ce.root)
    assert [t for t, _, _ in sizes] == ["condor_q", "condor_history", "condor_history"], "member(...) in 2 chunks"
    assert all(longest <= hp.ARG_MAX_BYTES + 1 for _, longest, _ in sizes)

    # The same jobs finished in the CE's queue, their output still to fetch: transfer batches.
    for path in (ce.root / "history").glob("*.json"):
        path.rename(ce.root / "queue" / path.name)
    for h in handles:
        h.job_dir.mkdir(parents=True)
    backend = HTCondorBackend(HTCondorConfig(**CE, command_timeout_s=300, transfer_batch=n), pool="big")
    before = len(sizes)
    seen = await backend.poll(handles)
    assert all(o.state is BackendState.COMPLETED for o in seen.values()), "every output fetched in this poll"
    transfers = [row for row in standin.arg_sizes(ce.root)[before:] if row[0] == "condor_transfer_data"]
    assert len(transfers) == 2, "20,000 ids do not fit one argument's size"
    assert all(total <= hp.ARG_MAX_BYTES + 64 for _, _, total in transfers)  # + the -pool/-name words
