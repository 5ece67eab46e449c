"""Site storage and accounts, through the shell backend as root (real bash, setpriv, throw-away accounts): a claim
directory the job creates belongs to the namespace's account, with the site's mode, and its data is read back by
the namespace's next pod; a claim the account cannot use is refused at Submit, naming the volume, nothing run.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
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
from interlink_nats.submitters.testing import settings_for
from jobs import pod_dict
from shell_submitter import final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool


@pytest.fixture
async def submitter(
    reachable_dir: Path, nats_url: str, pool: str, nc: nats.NATS, account: ThrowAway
) -> AsyncIterator[Submitter]:
    """lab-* runs as the throw-away account; its claims live in ``projects/{namespace}/{claim}``, the namespace's
    directory given to its account by the site (as a site's project directory is)."""
    await ensure_events_stream(nc.jetstream())
    projects = reachable_dir / "projects"
    (projects / "lab-a").mkdir(parents=True)
    os.chown(projects / "lab-a", account.uid, account.gid)
    projects.chmod(0o711)
    storage = {
        "claims": [
            {"namespace": "lab-*", "path": f"{projects}/{{namespace}}/{{claim}}", "create": True, "create_mode": "0750"}
        ]
    }
    accounting = {"namespaces": {"lab-*": {"run_as_user": account.name}}}
    settings = settings_for(
        reachable_dir / "state",
        nats_url,
        pool=pool,
        shell={"accounting": accounting},
        storage=storage,
        build_config={"runtime": "none"},
    )
    async with Submitter(settings) as s:
        yield s


def claim_job(submitter: Submitter, u: str, command: str, claim: str = "results") -> pb.JobScript:
    """The pod rendered with the pool's own announced BuildConfig, as the gateway does."""
    pod = pod_dict(u, {"main": command}, namespace="lab-a")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return render_job(pod, submitter.build_config)


async def test_a_created_claim_belongs_to_the_namespaces_account_and_is_read_back(
    submitter: Submitter, nc: nats.NATS, pool: str, account: ThrowAway, reachable_dir: Path
) -> None:
    client = submitter_client(nc, pool)
    writer = uid()
    await client.submit(pb.SubmitRequest(job=claim_job(submitter, writer, 'id -u > "$INTERLINK_ROOTFS/data/who"')))
    assert (await final_status(client, writer)).state == pb.JobState.SUCCEEDED
    claim_dir = reachable_dir / "projects" / "lab-a" / "results"
    st = await asyncio.to_thread(claim_dir.stat)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (account.uid, account.gid, 0o750)
    who = claim_dir / "who"
    assert (await asyncio.to_thread(who.read_text)).strip() == str(account.uid)
    reader = uid()
    await client.submit(pb.SubmitRequest(job=claim_job(submitter, reader, 'cat "$INTERLINK_ROOTFS/data/who"')))
    assert (await final_status(client, reader)).state == pb.JobState.SUCCEEDED
    log = layout.log_path(submitter.settings.state_dir / "jobs" / reader, "main")
    assert (await asyncio.to_thread(log.read_text)).strip() == str(account.uid)


async def test_a_claim_the_account_cannot_use_is_refused_at_submit(
    submitter: Submitter, nc: nats.NATS, pool: str, reachable_dir: Path
) -> None:
    locked = reachable_dir / "projects" / "lab-a" / "locked"
    await asyncio.to_thread(locked.mkdir, 0o700)  # root's, 0700: the namespace's account cannot enter it
    client = submitter_client(nc, pool)
    bad = uid()
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=claim_job(submitter, bad, "true", claim="locked")))
    assert err.value.status == Status.FAILED_PRECONDITION
    message = err.value.message or ""
    assert "spec.volumes[0].persistentVolumeClaim" in message and f"cannot read and write {locked}" in message
    assert not (submitter.settings.state_dir / "jobs" / bad / CLAIM).exists(), "nothing ran"


def test_a_submitter_running_as_the_jobs_account_asks_the_kernel(account: ThrowAway, reachable_dir: Path) -> None:
    """No account switch: the job runs as the submitter's own account, and the submitter asks the kernel
    (``os.access``, ACLs included) whether that account can use an existing site directory; run here as the
    throw-away account, as a non-root submitter would be."""
    locked, open_ = reachable_dir / "locked", reachable_dir / "open"
    locked.mkdir(mode=0o700)
    open_.mkdir()
    os.chown(open_, account.uid, account.gid)
    probe = (
        "import sys\n"
        "from interlink_nats.gen.interlink_nats import v1 as pb\n"
        "from interlink_nats.submitters.backends.storage_access import check_own_access\n"
        "from interlink_nats.submitters.core.backend import SubmitRejected\n"
        "field = 'spec.volumes[0].persistentVolumeClaim'\n"
        "try:\n"
        "    check_own_access([pb.StorageMount(field=field, site_path=sys.argv[1])])\n"
        "except SubmitRejected as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('usable')\n"
    )
    as_account = ["setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--clear-groups"]
    seen = {}
    for path in (locked, open_):
        ran = subprocess.run(
            [*as_account, sys.executable, "-c", probe, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        seen[path] = ran.stdout.strip()
    assert seen[open_] == "usable"
    assert (
        seen[locked]
        == f"spec.volumes[0].persistentVolumeClaim: this pool's account cannot read and write {locked} on this site"
    )
