"""Whose account a pod runs as, through real Slurm: ``sbatch --uid/--gid`` and ``--account`` from site policy."""

from __future__ import annotations

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
from slurm_stack import status_of, until_terminal

pytestmark = pytest.mark.slurm


@pytest.fixture
async def submitter(
    slurm: SlurmCluster, reachable_dir: Path, nats_url: str, pool: str, nc: nats.NATS, account: ThrowAway
) -> AsyncIterator[Submitter]:
    policy = {
        "default": {"group": "general", "run_as_user": "root"},  # a root submitter runs root only when said
        "namespaces": {
            "team-*": {"run_as_user": account.name, "group": "physics", "run_as_users": ["5000-5999"]},
            "lab-*": {"group": "physics"},  # names no account: refused on this root submitter
        },
    }
    settings = settings_for(
        reachable_dir / "state", nats_url, pool=pool, backend="slurm", poll_interval=0.5, slurm={"accounting": policy}
    )
    async with Submitter(settings) as s:
        yield s


def job(u: str, namespace: str, **spec: object) -> pb.JobScript:
    pod = pod_dict(u, {"main": "id -u; id -g"}, namespace=namespace)
    pod["spec"].update(spec)
    return render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))


async def test_a_mapped_namespace_runs_as_its_account_through_sbatch_uid_with_its_slurm_account(
    submitter: Submitter, nc: nats.NATS, pool: str, slurm: SlurmCluster, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    u = str(uuid.uuid4())
    resp = await client.submit(pb.SubmitRequest(job=job(u, "team-a")))
    st = await until_terminal(client, u)
    assert st.state == pb.JobState.SUCCEEDED, st
    job_dir = submitter.settings.state_dir / "jobs" / u
    log = layout.log_path(job_dir, "main")
    assert log.read_text().split() == [str(account.uid), str(account.gid)]
    for path in (log, job_dir / layout.JOB_STDOUT):
        assert (path.stat().st_uid, path.stat().st_gid) == (account.uid, account.gid), path
    shown = slurm.run("scontrol", "show", "job", resp.job_id).stdout
    assert f"UserId={account.name}({account.uid})" in shown and "Account=physics" in shown, shown

    other = str(uuid.uuid4())
    resp = await client.submit(pb.SubmitRequest(job=job(other, "elsewhere")))
    assert (await until_terminal(client, other)).state == pb.JobState.SUCCEEDED
    shown = slurm.run("scontrol", "show", "job", resp.job_id).stdout
    assert "UserId=root(0)" in shown and "Account=general" in shown, "the default says root, out loud"


async def test_a_pod_may_not_name_a_uid_or_an_account_its_namespace_does_not_allow(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    cases = (
        (job(str(uuid.uuid4()), "team-a", securityContext={"runAsUser": 0}), "securityContext.runAsUser: 0"),
        (job(str(uuid.uuid4()), "team-a", securityContext={"runAsUser": 7000}), "allows runAsUser 5000-5999"),
        (job(str(uuid.uuid4()), "lab-a"), "site rule 'lab-*' sets no run_as_user"),
    )
    flagged = job(str(uuid.uuid4()), "team-a")
    flagged.backend_flags = ["-A", "admins"]
    for bad, words in (*cases, (flagged, "pod flag --account: accounting group is set by the site")):
        with pytest.raises(GRPCError) as err:
            await client.submit(pb.SubmitRequest(job=bad))
        assert err.value.status == Status.FAILED_PRECONDITION
        assert words in (err.value.message or ""), err.value.message
        assert (await status_of(client, bad.pod.uid)).reason == "SubmitFailed"
