"""The pods of one Job as ONE HTCondor cluster (``queue N``): the description read back by the real ``htcondor2``
parser, what it refuses, and one submit against the stand-ins (plain schedd and HTCondor-CE: one cluster of N procs,
proc p running member p in its own directory, each routed alone by the CE, one proc removed alone)."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from htcondor_bindings import htcondor2_fixture  # noqa: F401 (the fixture)
from htcondor_harness import Condor, start_condor
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor import array as ha
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.core.backend import ArraySpec, BackendState, JobHandle, JobSpec, SubmitRejected
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir
from interlink_nats.submitters.testing import wait_for

pytestmark = [pytest.mark.htcondor, pytest.mark.timeout(300)]

POOL = "arrays"
SMALL = pb.ResourceRequest(cpu_millis=1000, memory_bytes=64 * 2**20)


def make_array(root: Path, scripts: list[str], *, name: str = "scan") -> ArraySpec:
    members = []
    for text in scripts:
        uid = str(uuid.uuid4())
        job_dir = job_dir_for(root, uid)
        members.append(JobSpec(uid, job_dir, prepare_job_dir(job_dir, text), SMALL, (), "ns", f"{name}-x"))
    array_uid = str(uuid.uuid4())
    return ArraySpec(array_uid, tuple(members), root / "arrays" / array_uid, name=name, namespace="ns")


@pytest.mark.parametrize("spool", [False, True], ids=["schedd", "ce"])
def test_the_description_is_one_cluster_of_n_procs(tmp_path: Path, htcondor2: ModuleType, spool: bool) -> None:
    array = make_array(tmp_path, ["#!/bin/bash\ntrue\n"] * 3, name="it's $HOME")
    text = ha.array_description(array, hs.SubmitSite(pool=POOL, spool=spool))
    desc = htcondor2.Submit(text)  # the real parser's verdict
    assert desc.getQArgs() == "3"
    assert desc["initialdir"] == f"{array.job_dir}/tasks/$(Process)"
    uids = ", ".join(m.uid for m in array.members)
    assert desc[f"MY.{hp.POD_UID_ATTR}"] == f'"$CHOICE(Process, {uids})"'
    assert desc[f"MY.{ha.ARRAY_UID_ATTR}"] == f'"{array.array_uid}"'
    assert desc["MY.JobBatchName"] == '"ns/it\'s $(DOLLAR)HOME"'
    assert text.count("\nqueue") == 1 and text.endswith("queue 3\n")
    if not spool:
        assert "INTERLINK_JOB_DIR='" + f"{array.job_dir}/tasks/$(Process)'" in desc["environment"]


def test_members_that_differ_or_cannot_be_listed_are_refused(tmp_path: Path) -> None:
    site = hs.SubmitSite(pool=POOL)
    array = make_array(tmp_path, ["#!/bin/bash\n"] * 2)
    bigger = ArraySpec(
        array.array_uid,
        (array.members[0], JobSpec("u-2", tmp_path, tmp_path / "job.sh", pb.ResourceRequest(cpu_millis=2000))),
        array.job_dir,
    )
    with pytest.raises(hs.SubmitCommandError, match="ask for different resources"):
        ha.array_description(bigger, site)
    odd = ArraySpec("a", (JobSpec("x, y)", tmp_path, tmp_path / "job.sh"),), tmp_path)
    with pytest.raises(hs.SubmitCommandError, match=r"cannot be listed in \$CHOICE"):
        ha.array_description(odd, site)
    with pytest.raises(hs.SubmitCommandError, match="no members"):
        ha.array_description(ArraySpec("a", (), tmp_path), site)


@pytest.fixture(params=[False, True], ids=["schedd", "ce"])
def condor(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Condor]:
    gen = start_condor(tmp_path, monkeypatch, ce=request.param)
    yield next(gen)
    next(gen, None)


async def test_one_submit_one_cluster_each_proc_its_own_member(condor: Condor, tmp_path: Path) -> None:
    release = tmp_path / "release"
    scripts = [
        f'#!/bin/bash\necho "$INTERLINK_JOB_DIR" > ran-{i}\n'
        f"until [ -e {shlex.quote(str(release))} ]; do sleep 0.1; done\necho out-{i}\nexit {3 if i == 1 else 0}\n"
        for i in range(4)
    ]
    array = make_array(tmp_path / "state", scripts)
    settings = HTCondorConfig(mode="remote", collector="ce.example:9619", schedd="ce.example")
    backend = HTCondorBackend(settings if _is_ce() else HTCondorConfig(), pool=POOL)
    with pytest.raises(SubmitRejected):
        await backend.submit_array(ArraySpec("x", (), tmp_path))
    cluster, ids = await backend.submit_array(array)
    assert ids == tuple(f"{cluster}.{p}" for p in range(4))
    assert len(condor.calls("condor_submit")) == 1
    ads = sorted(condor.queue(), key=lambda ad: ad["ProcId"])
    assert [(str(ad["ClusterId"]), ad["ProcId"]) for ad in ads] == [(cluster, p) for p in range(4)]
    assert [ad[hp.POD_UID_ATTR] for ad in ads] == [m.uid for m in array.members]
    if _is_ce():
        assert all(ad["_routed"]["RequestCpus"] == 1 for ad in ads), "the router routes each proc as its own job"
    jobs = [JobHandle(m.uid, m.job_dir, i) for m, i in zip(array.members, ids, strict=True)]
    await backend.cancel(jobs[3])  # condor_rm <cluster>.3: that proc only
    release.touch()

    async def ended() -> dict[str, object] | None:
        seen = await backend.poll(jobs)
        return dict(seen) if len(seen) == 4 and all(o.state.terminal for o in seen.values()) else None

    seen = await wait_for(ended, timeout=120, interval=0.3, what="every proc to end")
    states = [(seen[j.uid].state, seen[j.uid].exit_code) for j in jobs]  # type: ignore[attr-defined]
    assert states[0] == (BackendState.COMPLETED, 0) and states[2] == (BackendState.COMPLETED, 0), states
    assert states[1] == (BackendState.FAILED, 3), "one proc fails alone"
    assert states[3][0] is BackendState.CANCELLED
    for i, member in enumerate(array.members[:3]):
        assert (member.job_dir / "job.out").read_text() == f"out-{i}\n", "each member's output its own"
    again = HTCondorBackend(backend.settings, pool=POOL)
    assert (await again.find_array(array)).job_id == cluster
    assert len(condor.calls("condor_submit")) == 1


def _is_ce() -> bool:
    import os

    return os.environ.get("STANDIN_CE") == "1"
