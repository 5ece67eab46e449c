"""Opt-in: the htcondor backend against a REAL HTCondor-CE (skipped unless the environment names one).

    INTERLINK_TEST_HTCONDOR_CE=ce.example.org:9619       # -pool (collector)
    INTERLINK_TEST_HTCONDOR_SCHEDD=ce.example.org        # -name (default: the host of the CE)
    and either INTERLINK_TEST_HTCONDOR_TOKEN_FILE=/path/to/bearer-token
    or INTERLINK_TEST_HTCONDOR_ISSUER=https://iam.example + INTERLINK_TEST_HTCONDOR_CLIENT_ID=...
       with INTERLINK_HTCONDOR_CLIENT_SECRET / INTERLINK_HTCONDOR_REFRESH_TOKEN (secrets via env only)

The condor_* commands must be installed (HTCondor's client tools). Like the real-cluster Kueue
test, this never runs in CI: no CE and no credentials exist on these machines.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.backends.htcondor.tokens import OidcTokenSource, TokenConfig
from interlink_nats.submitters.core.backend import BackendState, JobHandle, JobSpec
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.testing import wait_for

pytestmark = [pytest.mark.htcondor, pytest.mark.e2e]

CE = os.environ.get("INTERLINK_TEST_HTCONDOR_CE", "")


@pytest.fixture
def backend(tmp_path: Path) -> HTCondorBackend:
    if not CE:
        pytest.skip("opt-in: set INTERLINK_TEST_HTCONDOR_CE (and a token) to test against a real HTCondor-CE")
    if shutil.which("condor_submit") is None:
        pytest.skip("HTCondor's client tools (condor_submit, condor_q, ...) are not installed")
    schedd = os.environ.get("INTERLINK_TEST_HTCONDOR_SCHEDD") or CE.split(":", 1)[0]
    env: dict[str, str] = {}
    token: OidcTokenSource | None = None
    if os.environ.get("INTERLINK_TEST_HTCONDOR_ISSUER"):
        token = OidcTokenSource(
            TokenConfig(
                issuer=os.environ["INTERLINK_TEST_HTCONDOR_ISSUER"],
                client_id=os.environ["INTERLINK_TEST_HTCONDOR_CLIENT_ID"],
            ),
            tmp_path / "state",
        )
    elif os.environ.get("INTERLINK_TEST_HTCONDOR_TOKEN_FILE"):
        path = os.environ["INTERLINK_TEST_HTCONDOR_TOKEN_FILE"]
        env = {"BEARER_TOKEN_FILE": path, "_CONDOR_SCITOKENS_FILE": path}
    else:
        pytest.skip("opt-in: set INTERLINK_TEST_HTCONDOR_TOKEN_FILE or INTERLINK_TEST_HTCONDOR_ISSUER")
    settings = HTCondorConfig(mode="remote", collector=CE, schedd=schedd, environment=env, command_timeout_s=120)
    return HTCondorBackend(settings, pool=f"ce-test-{uuid.uuid4().hex[:6]}", token=token)


@pytest.mark.timeout(1800)
async def test_a_job_runs_on_a_real_ce_and_its_output_comes_back(backend: HTCondorBackend, tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    job_dir = tmp_path / "jobs" / uid
    script = "mkdir -p containers; echo hello > containers/main.log; echo 7 > containers/main.exit; exit 7\n"
    jobfiles.prepare_job_dir(job_dir, script)
    await backend.start()
    try:
        spec = JobSpec(uid, job_dir, job_dir / "job.sh", pb.ResourceRequest(cpu_millis=1000, memory_bytes=2**28))
        job_id = await backend.submit(spec)
        found = await backend.reconcile([JobHandle(uid, job_dir)])
        assert found[uid].job_id == job_id, "found again by its pod-UID attribute"

        async def ended() -> BackendState | None:
            obs = (await backend.poll([JobHandle(uid, job_dir, job_id)])).get(uid)
            return obs.state if obs is not None and obs.state.terminal else None

        assert await wait_for(ended, timeout=1700, interval=30, what=f"CE job {job_id} to end") is BackendState.FAILED
        assert (job_dir / "containers" / "main.exit").read_text().strip() == "7"
        await backend.cancel(JobHandle(uid, job_dir, job_id))  # idempotent on a finished job
    finally:
        await backend.close()
