"""Whose account a pod runs as, through the shell backend (real bash, setpriv, real throw-away accounts).

Site policy decides (``shell.accounting``); a pod's ``securityContext`` is honoured only inside its
namespace's rule; without a rule that switches, the job runs as the submitter, as before.
"""

from __future__ import annotations

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
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.shell.processes import CLAIM
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_dict
from shell_submitter import final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool


def job(u: str, namespace: str, security: dict[str, int] | None = None) -> pb.JobScript:
    pod = pod_dict(u, {"main": "id -u; id -g; id -G"}, namespace=namespace)
    if security is not None:
        pod["spec"]["securityContext"] = security
    return render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))


@pytest.fixture
async def submitter(
    reachable_dir: Path, nats_url: str, pool: str, nc: nats.NATS, account: ThrowAway
) -> AsyncIterator[Submitter]:
    await ensure_events_stream(nc.jetstream())
    policy = {
        "namespaces": {
            "team-*": {"run_as_user": account.name},
            "lab": {"run_as_users": [account.uid], "run_as_groups": [f"{account.gid}-{account.gid + 1}"]},
        }
    }
    settings = settings_for(reachable_dir / "state", nats_url, pool=pool, shell={"accounting": policy})
    async with Submitter(settings) as s:
        yield s


def ran_as(submitter: Submitter, u: str) -> tuple[list[str], int, int]:
    """(the container's ``id`` lines, owner uid and gid of the files the script wrote) of a finished job."""
    job_dir = submitter.settings.state_dir / "jobs" / u
    log = layout.log_path(job_dir, "main")
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in (log, layout.exit_path(job_dir, "main"))}
    assert len(owners) == 1
    return log.read_text().split(), *owners.pop()


async def test_a_mapped_namespace_runs_as_its_site_account_with_its_files_owned_by_it(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    await client.submit(pb.SubmitRequest(job=job(u, "team-a")))
    st = await final_status(client, u)
    assert st.state == pb.JobState.SUCCEEDED, st
    lines, owner, group = ran_as(submitter, u)
    assert lines == [str(account.uid), str(account.gid), str(account.gid)], "no group of the submitter's kept"
    assert (owner, group) == (account.uid, account.gid)
    logs = submitter_client(nc, pool)
    chunks = [c.data async for c in logs.get_logs(pb.GetLogsRequest(pod_uid=u, container="main"))]
    assert b"".join(chunks).split()[0] == str(account.uid).encode(), "logs still read across the switch"


async def test_a_pod_runs_as_the_ids_it_asks_for_only_inside_its_namespaces_rule(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    await client.submit(pb.SubmitRequest(job=job(u, "lab", {"runAsUser": account.uid, "runAsGroup": account.gid})))
    assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    assert ran_as(submitter, u)[1:] == (account.uid, account.gid)

    for namespace, security, field, rule in (
        ("lab", {"runAsUser": 0}, "runAsUser", "'lab' allows runAsUser " + str(account.uid)),
        ("lab", {"runAsUser": account.uid, "runAsGroup": 0}, "runAsGroup", "'lab' allows runAsGroup"),
        ("team-b", {"runAsUser": account.uid}, "runAsUser", "'team-*' allows runAsUser none"),
        ("other", {"runAsUser": 1}, "runAsUser", "'default' allows runAsUser none"),
    ):
        bad = uid()
        with pytest.raises(GRPCError) as err:
            await client.submit(pb.SubmitRequest(job=job(bad, namespace, security)))
        assert err.value.status == Status.FAILED_PRECONDITION
        message = err.value.message or ""
        assert f"securityContext.{field}" in message and rule in message, message
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[bad]))).statuses[0]
        assert st.state == pb.JobState.FAILED and st.reason == "SubmitFailed"
        assert not (submitter.settings.state_dir / "jobs" / bad / CLAIM).exists(), "nothing ran"


async def test_an_unmapped_namespace_runs_as_the_submitter_as_before(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    await client.submit(pb.SubmitRequest(job=job(u, "elsewhere")))
    assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    lines, owner, _ = ran_as(submitter, u)
    assert lines[0] == "0" and owner == 0


def processes_of(user: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == user:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


async def test_cancel_stops_a_job_running_as_another_account(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    pod = pod_dict(u, {"main": "echo up; exec sleep 600"}, namespace="team-x")
    await client.submit(pb.SubmitRequest(job=render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))))
    log = layout.log_path(submitter.settings.state_dir / "jobs" / u, "main")

    async def up() -> bool:
        return log.exists() and log.read_text().startswith("up") and bool(processes_of(account.uid))

    await wait_for(up, what="the job to run as the account")
    resp = await client.cancel(pb.CancelRequest(pod_uid=u))
    assert resp.found

    async def gone() -> bool:
        return not processes_of(account.uid)

    await wait_for(gone, what="the account's processes to end")


def member(job: pb.JobScript, group: str, rank: int, size: int) -> pb.JobScript:
    job.gang = pb.GangMember(group_uid=group, group_name="pg", rank=rank, size=size)
    return job


async def test_each_member_of_a_pod_group_runs_as_its_own_account_and_a_refused_member_refuses_the_group(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    mapped, unmapped, group = uid(), uid(), uid()
    members = [member(job(mapped, "team-a"), group, 0, 2), member(job(unmapped, "elsewhere"), group, 1, 2)]
    await client.submit_group(pb.SubmitGroupRequest(members=members))
    for u in (mapped, unmapped):
        assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    assert ran_as(submitter, mapped) == (
        [str(account.uid), str(account.gid), str(account.gid)],
        account.uid,
        account.gid,
    )
    assert ran_as(submitter, unmapped)[0][0] == "0"

    ok, bad, group = uid(), uid(), uid()
    members = [member(job(ok, "team-a"), group, 0, 2), member(job(bad, "lab", {"runAsUser": 0}), group, 1, 2)]
    with pytest.raises(GRPCError) as err:
        await client.submit_group(pb.SubmitGroupRequest(members=members))
    assert err.value.status == Status.FAILED_PRECONDITION
    assert "pod group member 1" in (err.value.message or "") and "securityContext.runAsUser" in (
        err.value.message or ""
    )
    for st in (await client.get_status(pb.GetStatusRequest(pod_uids=[ok, bad]))).statuses:
        assert st.state == pb.JobState.FAILED and st.reason == "SubmitFailed"
    assert not (submitter.settings.state_dir / "gangs" / group / CLAIM).exists(), "nothing ran"
