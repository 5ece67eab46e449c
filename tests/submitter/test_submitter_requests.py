"""What any NATS client sends a submitter is checked again there: a real shell submitter over a real
nats-server refuses a malformed job or pod group with INVALID_ARGUMENT naming the field, before anything is
written to disk, recorded or run. The pure checks (``core.requests``, ``core.gangs.validate_group``) too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.core.errors import InvalidRequest
from interlink_nats.submitters.core.gangs import validate_group
from interlink_nats.submitters.core.requests import check_job, job_layout
from interlink_nats.submitters.runtime import Submitter
from jobs import pod_job
from shell_submitter import final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool
from test_submitter_gangs import CountingShell, gang
from test_submitter_gangs import backend as backend
from test_submitter_gangs import submitter as submitter


def good() -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=uid(), namespace="lab-a", name="pod-1.a"),
        script="true\n",
        containers=["main"],
    )


def pod(**kw: str) -> Callable[[pb.JobScript], None]:
    def change(job: pb.JobScript) -> None:
        assert job.pod is not None
        for key, value in kw.items():
            setattr(job.pod, key, value)

    return change


def layout_entry(**kw: object) -> Callable[[pb.JobScript], None]:
    def change(job: pb.JobScript) -> None:
        job.layout = [pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="volumes"), pb.LayoutEntry(**kw)]  # type: ignore[arg-type]

    return change


def resources(**kw: object) -> Callable[[pb.JobScript], None]:
    def change(job: pb.JobScript) -> None:
        job.resources = pb.ResourceRequest(**kw)  # type: ignore[arg-type]

    return change


def setting(name: str, value: object) -> Callable[[pb.JobScript], None]:
    def change(job: pb.JobScript) -> None:
        setattr(job, name, value)

    return change


SYMLINK = pb.LayoutEntryKind.SYMLINK
BAD_JOBS: list[tuple[Callable[[pb.JobScript], None], str]] = [
    (pod(namespace="lab-x/../team-b"), "pod.namespace"),
    (pod(namespace="lab-$(id)"), "pod.namespace"),
    (pod(namespace="lab-x\nteam-b"), "pod.namespace"),
    (pod(namespace="lab-*"), "pod.namespace"),
    (pod(namespace="a" * 300), "pod.namespace"),
    (pod(namespace=""), "pod.namespace"),
    (pod(name="Pod_1"), "pod.name"),
    (pod(name="p\n#x"), "pod.name"),
    (pod(name="x" * 254), "pod.name"),
    (pod(uid="../etc"), "pod.uid"),
    (setting("containers", ["main", "../x"]), "containers[1]"),
    (setting("init_containers", ["In"]), "init_containers[0]"),
    (layout_entry(kind=pb.LayoutEntryKind.DIRECTORY, path="../../etc"), "layout[1].path"),
    (layout_entry(kind=pb.LayoutEntryKind.DIRECTORY, path="/etc"), "layout[1].path"),
    (layout_entry(kind=SYMLINK, path="rootfs/main/x", target="a/../../.."), "layout[1].target"),
    (layout_entry(kind=pb.LayoutEntryKind.DIRECTORY, path="v", mode=0o4755), "layout[1].mode"),
    (setting("backend_flags", ["--comment=a\x00b"]), "backend_flags[0]"),
    (resources(cpu_millis=-1000), "resources.cpu_millis"),
    (resources(memory_bytes=-1), "resources.memory_bytes"),
    (resources(wall_time=dt.timedelta(seconds=-5)), "resources.wall_time"),
    (setting("run_as_user", -1), "run_as_user"),
    (setting("run_as_group", 2**40), "run_as_group"),
]


@pytest.mark.parametrize(("change", "field"), BAD_JOBS)
def test_a_malformed_job_is_refused_naming_the_field(change: Callable[[pb.JobScript], None], field: str) -> None:
    check_job(good())
    job = good()
    change(job)
    with pytest.raises(InvalidRequest) as err:
        check_job(job)
    assert str(err.value).startswith(field), err.value
    assert len(str(err.value)) < 300, "a long value is cut in the message"


def test_a_layout_is_checked_and_converted_once_and_a_bad_one_every_time() -> None:
    """``job_layout`` caches per distinct layout (three callers a Submit): the pods of a shape get the very same
    entries; a refused layout is never cached as good, and an entry of an unknown kind leaves the layout to the
    script (None) without refusing the job."""
    shape = [
        pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="volumes/cfg", mode=0o755),
        pb.LayoutEntry(kind=SYMLINK, path="rootfs/main/etc/app", target="volumes/cfg"),
    ]
    first = job_layout(shape)
    assert first == (layout.LayoutDir("volumes/cfg", 0o755), layout.LayoutLink("rootfs/main/etc/app", "volumes/cfg"))
    assert job_layout([pb.LayoutEntry(e.kind, e.path, e.mode, e.target) for e in shape]) is first
    bad = [*shape, pb.LayoutEntry(kind=SYMLINK, path="rootfs/main/x", target="../../etc")]
    for _ in range(2):
        with pytest.raises(InvalidRequest, match=r"^layout\[2\]\.target"):
            job_layout(bad)
    later = [*shape, pb.LayoutEntry(kind=99, path="rootfs/main/y")]  # a kind from a newer gateway
    assert job_layout(later) is None
    job = good()
    job.layout = later
    check_job(job)
    job.layout = [*later, pb.LayoutEntry(kind=99, path="/etc")]  # its path is still checked
    with pytest.raises(InvalidRequest, match=r"^layout\[3\]\.path"):
        check_job(job)


def test_a_group_name_must_be_a_label_value_the_same_for_every_member() -> None:
    members = gang(["true", "true"])
    assert validate_group(members)
    for bad in ("g\nid > /tmp/x #", "a/b", "x" * 64, "", "-g"):
        members[0].gang.group_name = bad
        with pytest.raises(ValueError, match=r"members\[0\]\.gang\.group_name"):
            validate_group(members)
    members[0].gang.group_name = "other"
    with pytest.raises(ValueError, match=r"members\[1\]\.gang\.group_name .* differs"):
        validate_group(members)


async def nothing_recorded(client: pb.SubmitterServiceStub, sub: Submitter, backend: CountingShell) -> None:
    assert backend.gang_submits == [] and backend.single_submits == [], "nothing reached the backend"
    assert (await client.list_jobs(pb.ListJobsRequest(include_finished=True))).jobs == [], "nothing recorded"
    for sub_dir in ("jobs", "gangs"):
        where = sub.state_dir / sub_dir
        assert not where.exists() or list(where.iterdir()) == [], f"nothing written in {where}"


async def test_the_group_name_of_issue_38_is_refused_over_nats_and_nothing_runs(
    submitter: Submitter, nc: nats.NATS, pool: str, backend: CountingShell, tmp_path: Path
) -> None:
    """Finding 1 as reported: label ``kueue.x-k8s.io/pod-group-name: "g\\nid > /tmp/x #"``, total-count 1, sent
    by a client other than the gateway (which would refuse the label): the launcher would have run ``id`` as root."""
    client = submitter_client(nc, pool, timeout=30)
    injected, ran = tmp_path / "x", tmp_path / "ran"
    members = gang([f"touch {ran}"])
    members[0].gang.group_name = f"g\nid > {injected} #"
    with pytest.raises(GRPCError) as err:
        await client.submit_group(pb.SubmitGroupRequest(members=members))
    assert err.value.status == Status.INVALID_ARGUMENT
    assert "members[0].gang.group_name" in (err.value.message or ""), err.value.message
    await nothing_recorded(client, submitter, backend)
    assert not injected.exists() and not ran.exists()

    members = gang([f"touch {ran}"], name="g-id.x")  # the same group, named as Kubernetes allows: it runs
    await client.submit_group(pb.SubmitGroupRequest(members=members))
    assert (await final_status(client, members[0].pod.uid, 40)).state == pb.JobState.SUCCEEDED
    assert ran.exists() and not injected.exists()


@pytest.mark.parametrize(("change", "field"), BAD_JOBS[:12:3])
async def test_a_malformed_job_sent_over_nats_writes_and_records_nothing(
    submitter: Submitter,
    nc: nats.NATS,
    pool: str,
    backend: CountingShell,
    change: Callable[[pb.JobScript], None],
    field: str,
) -> None:
    client = submitter_client(nc, pool, timeout=30)
    job = pod_job(uid(), {"main": "true"})
    change(job)
    with pytest.raises(GRPCError) as err:
        await client.submit(pb.SubmitRequest(job=job))
    assert err.value.status == Status.INVALID_ARGUMENT
    assert (err.value.message or "").startswith(field), err.value.message
    await nothing_recorded(client, submitter, backend)
    for bad in ("../x", "a\nb"):
        with pytest.raises(GRPCError) as err:
            await client.cancel(pb.CancelRequest(pod_uid=bad))
        assert err.value.status == Status.INVALID_ARGUMENT and "pod_uid" in (err.value.message or "")
