"""Site storage through real Slurm: a pod with a mapped claim runs as its namespace's account (``sbatch --uid``)
and sees the data the site keeps for that claim; an unmapped one is refused at Submit, nothing queued."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from accounts import ThrowAway
from accounts import account as account
from accounts import reachable_dir as reachable_dir
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for
from jobs import pod_dict
from slurm_cluster import SlurmCluster
from slurm_stack import nc as nc
from slurm_stack import pool as pool
from slurm_stack import slurm as slurm
from slurm_stack import until_terminal

pytestmark = pytest.mark.slurm


@pytest.fixture
async def submitter(
    slurm: SlurmCluster, reachable_dir: Path, nats_url: str, pool: str, nc: nats.NATS, account: ThrowAway
) -> AsyncIterator[Submitter]:
    """team-* runs as the throw-away account; claims at ``projects/{namespace}/{claim}`` on the site."""
    claim_dir = reachable_dir / "projects" / "team-a" / "dataset"
    claim_dir.mkdir(parents=True)
    for path in (reachable_dir / "projects", claim_dir.parent):
        path.chmod(0o711)
    os.chown(claim_dir, account.uid, account.gid)
    claim_dir.chmod(0o700)
    (claim_dir / "events.txt").write_text("42 events\n")
    os.chown(claim_dir / "events.txt", account.uid, account.gid)
    storage = {"claims": [{"namespace": "team-*", "path": f"{reachable_dir}/projects/{{namespace}}/{{claim}}"}]}
    settings = settings_for(
        reachable_dir / "state",
        nats_url,
        pool=pool,
        backend="slurm",
        poll_interval=0.5,
        slurm={"accounting": {"namespaces": {"team-*": {"run_as_user": account.name}}}},
        storage=storage,
        build_config={"runtime": "none"},
    )
    async with Submitter(settings) as s:
        yield s


def claim_job(submitter: Submitter, u: str, claim: str) -> pb.JobScript:
    pod = pod_dict(u, {"main": 'id -u; cat "$INTERLINK_ROOTFS/data/events.txt"'}, namespace="team-a")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data", "readOnly": True}]
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return render_job(pod, submitter.build_config)


async def test_a_mapped_claim_runs_as_its_account_and_sees_its_data(
    submitter: Submitter, nc: nats.NATS, pool: str, slurm: SlurmCluster, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    u = str(uuid.uuid4())
    resp = await client.submit(pb.SubmitRequest(job=claim_job(submitter, u, "dataset")))
    st = await until_terminal(client, u)
    assert st.state == pb.JobState.SUCCEEDED, st
    log = layout.log_path(submitter.settings.state_dir / "jobs" / u, "main")
    assert (await asyncio.to_thread(log.read_text)).split("\n", 1) == [str(account.uid), "42 events\n"]
    shown = slurm.run("scontrol", "show", "job", resp.job_id).stdout
    assert f"UserId={account.name}({account.uid})" in shown, shown


async def test_an_unmapped_claim_is_refused_at_submit_and_never_queued(
    submitter: Submitter, nc: nats.NATS, pool: str, slurm: SlurmCluster
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    job = claim_job(submitter, str(uuid.uuid4()), "dataset")
    job.pod.namespace = "lab-x"  # a namespace no storage rule maps (a forged job: the gateway would refuse it)
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=job))
    assert err.value.status == Status.INVALID_ARGUMENT
    assert "persistentVolumeClaim.claimName: the site maps no such claim" in (err.value.message or "")
    assert (
        job.pod.uid
        not in slurm.run("sacct", "-n", "-X", "-o", "JobName%64").stdout + slurm.run("squeue", "-h", "-o", "%j").stdout
    )
    assert not (submitter.settings.state_dir / "jobs" / job.pod.uid).exists(), "nothing was claimed"
