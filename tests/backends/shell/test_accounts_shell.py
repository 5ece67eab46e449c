"""Whose account a pod runs as, through the shell backend (real bash, setpriv, real throw-away accounts).

Site policy decides (``shell.accounting``); a pod's ``securityContext`` is honoured only inside its
namespace's rule. The tests run as root: a namespace whose rule names no account is refused (it once ran
as root), unless the rule says ``run_as_user: root``.
"""

from __future__ import annotations

import logging
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
from interlink_nats.kernel.clock import SYSTEM_CLOCK
from interlink_nats.services.bus.events_stream import ensure_events_stream
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends import accounts as site_accounts
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.shell.config import ShellConfig
from interlink_nats.submitters.backends.shell.processes import CLAIM
from interlink_nats.submitters.core.backend import BackendContext
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
            "ops": {"run_as_user": "root"},
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


async def test_a_root_submitter_refuses_a_namespace_whose_rule_names_no_account_and_runs_root_only_when_said(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    """an unmapped namespace (the default sets no user) ran as root, with no warning."""
    client = submitter_client(nc, pool)
    for namespace, rule in (("elsewhere", "'default'"), ("lab", "'lab'")):  # lab: a pod asking for no id
        bad = uid()
        with pytest.raises(GRPCError) as err:
            await client.submit(pb.SubmitRequest(job=job(bad, namespace)))
        assert err.value.status == Status.FAILED_PRECONDITION
        message = err.value.message or ""
        assert f"site rule {rule} sets no run_as_user" in message and "run_as_user: root" in message, message
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[bad]))).statuses[0]
        assert st.state == pb.JobState.FAILED and st.reason == "SubmitFailed" and rule in st.message, st
        assert not (submitter.settings.state_dir / "jobs" / bad / CLAIM).exists(), "nothing ran"
    u = uid()
    await client.submit(pb.SubmitRequest(job=job(u, "ops")))  # its rule says root, out loud
    assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    lines, owner, _ = ran_as(submitter, u)
    assert lines[0] == "0" and owner == 0


def test_a_root_submitter_says_at_start_which_rules_refuse_and_which_run_as_root(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ShellConfig.model_validate(
        {"accounting": {"namespaces": {"team-*": {"run_as_user": "nobody"}, "ops": {"run_as_user": "root"}}}}
    )
    context = BackendContext(pool="p", state_dir=tmp_path, kill_grace_s=1.0, clock=SYSTEM_CLOCK)
    with caplog.at_level(logging.WARNING, logger=site_accounts.__name__):
        ShellBackend.create(config, context)
    said = [r.getMessage() for r in caplog.records if r.name == site_accounts.__name__]
    assert said == [
        "site rule(s) 'default' set no run_as_user: their pods are refused unless they ask for a runAsUser the "
        "rule allows (run_as_user: root runs them as root); site rule(s) 'ops' run pods as root"
    ], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=site_accounts.__name__):
        ShellBackend.create(ShellConfig(), context)
    assert [r.getMessage() for r in caplog.records] == [
        "the submitter runs as root and its accounting table switches no accounts: every job runs as root"
    ]


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
    mapped, as_root, group = uid(), uid(), uid()
    members = [member(job(mapped, "team-a"), group, 0, 2), member(job(as_root, "ops"), group, 1, 2)]
    await client.submit_group(pb.SubmitGroupRequest(members=members))
    for u in (mapped, as_root):
        assert (await final_status(client, u)).state == pb.JobState.SUCCEEDED
    assert ran_as(submitter, mapped) == (
        [str(account.uid), str(account.gid), str(account.gid)],
        account.uid,
        account.gid,
    )
    assert ran_as(submitter, as_root)[0][0] == "0"

    for bad_job, words in (
        (lambda u: job(u, "lab", {"runAsUser": 0}), "securityContext.runAsUser"),
        (lambda u: job(u, "elsewhere"), "site rule 'default' sets no run_as_user"),
    ):
        ok, bad, group = uid(), uid(), uid()
        members = [member(job(ok, "team-a"), group, 0, 2), member(bad_job(bad), group, 1, 2)]
        with pytest.raises(GRPCError) as err:
            await client.submit_group(pb.SubmitGroupRequest(members=members))
        assert err.value.status == Status.FAILED_PRECONDITION
        assert "pod group member 1" in (err.value.message or "") and words in (err.value.message or "")
        for st in (await client.get_status(pb.GetStatusRequest(pod_uids=[ok, bad]))).statuses:
            assert st.state == pb.JobState.FAILED and st.reason == "SubmitFailed"
        assert not (submitter.settings.state_dir / "gangs" / group / CLAIM).exists(), "nothing ran"


async def test_the_runner_makes_the_layout_as_the_account_and_removes_it_before_the_end_is_seen(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway
) -> None:
    """On a shell pool the runner makes the job's layout (not the submitter): as the job's account, owned and moded
    as the submitter's layout was after the hand-over; gone once the job's end is published, the logs kept."""
    client = submitter_client(nc, pool)
    u = uid()
    d = f'"${layout.JOB_DIR_ENV}"'
    mounted = f'[ -d "${layout.ROOTFS_ENV}/mnt/s" ] && echo mounted'
    listing = f"stat -c '%n %u:%g %a' {d}/volumes {d}/volumes/scratch {d}/rootfs {d}/rootfs/main; {mounted}"
    pod = pod_dict(u, {"main": listing}, namespace="team-a")
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/mnt/s"}]
    job_script = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    assert job_script.layout, "a pod whose layout the runner makes"
    await client.submit(pb.SubmitRequest(job=job_script))
    st = await final_status(client, u)
    job_dir = submitter.settings.state_dir / "jobs" / u
    lines = layout.log_path(job_dir, "main").read_text().splitlines()
    assert st.state == pb.JobState.SUCCEEDED, (st, lines)
    assert lines[-1] == "mounted", lines
    owned = [line.split()[1:] for line in lines[:-1]]
    modes = {e.path: e.mode for e in job_script.layout if e.mode is not None}
    assert modes == {"volumes/scratch": 0o777}, modes  # an emptyDir, as Kubernetes makes it; the rest as umask 077
    mine = f"{account.uid}:{account.gid}"
    assert owned == [[mine, "700"], [mine, "777"], [mine, "700"], [mine, "700"]], lines
    for name in layout.ENDED_JOB_LAYOUT:
        assert not (job_dir / name).exists() and not (job_dir / name).is_symlink(), name
