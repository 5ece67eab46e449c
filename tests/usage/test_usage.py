"""Usage rules as pure functions: Slurm's TRES text, an ended job's usage, the gateway's bound and its billing once,
and a pool's recent usage as the controller shows it. The real runs: tests/usage/test_usage_slurm.py (Slurm),
tests/usage/test_usage_gateway.py (gateway /metrics), tests/usage/test_usage_controller.py (MasterQueue status)."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import usage as kernel_usage
from interlink_nats.kernel.reported import recent_usage
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore
from interlink_nats.services.gateway.usage import SLACK_S, Allowance, allowance_of, billed
from interlink_nats.submitters.backends.slurm import parse as sp
from interlink_nats.submitters.core import usage
from interlink_nats.submitters.core.backend import Accounted, BackendState, Observation
from interlink_nats.submitters.core.gangs import member_observation
from interlink_nats.submitters.core.lifecycle import plan_poll
from interlink_nats.submitters.core.status import ContainerFiles, JobMeta, cancelled_status

MIB = 2**20
ACCOUNTING, ALLOCATION = pb.UsageSource.ACCOUNTING, pb.UsageSource.ALLOCATION


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu=2,mem=160M,node=1,billing=2", Accounted(2000, 160 * MIB, 0)),
        ("cpu=1,mem=1.50G,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2", Accounted(1000, 3 * 2**29, 2)),
        ("cpu=4,mem=100,gres/gpu:a=1,gres/gpu:b=2", Accounted(4000, 100 * MIB, 3)),  # MB without a suffix
        ("cpu=8,mem=2T", Accounted(8000, 2 * 2**40, 0)),
        ("", None),  # a job never allocated
        ("billing=1,node=1", None),
        ("cpu=many,mem=1G", None),
    ],
)
def test_tres_text_becomes_the_allocation(text: str, expected: Accounted | None) -> None:
    assert sp.parse_tres(text) == expected


def test_squeue_and_sacct_lines_carry_the_allocation_in_the_same_call() -> None:
    squeue = "8|uid-h|COMPLETED|None|0|2026-11-25T23:53:00|2026-11-25T23:53:12|cpu=2,mem=160M,node=1,billing=2\n"
    job = sp.parse_squeue(squeue)["8"]
    assert job.observation.accounted == Accounted(2000, 160 * MIB, 0)
    assert job.observation.finished_at - job.observation.started_at == 12  # type: ignore[operator]
    old = "8|uid-h|COMPLETED|None|0|2026-11-25T23:53:00|2026-11-25T23:53:12\n"  # the format before tres-alloc
    assert sp.parse_squeue(old)["8"].observation.accounted is None
    # sacct -X -n -P -o JobID,JobName,State,ExitCode,Start,End,AllocTRES,ElapsedRaw
    sacct = "12|uid-l|COMPLETED|0:0|2026-11-25T23:53:00|2026-11-25T23:53:30|cpu=4,mem=1G,node=1,gres/gpu=1|30\n"
    observation = sp.parse_sacct(sacct)["12"].observation
    assert observation.accounted == Accounted(4000, 2**30, 1, 30.0)
    u = usage.ended_usage(observation, None, [], [], now=0)
    assert u == pb.JobUsage(
        millicpu_seconds=120_000, memory_mib_seconds=30_720, milligpu_seconds=30_000, wall_millis=30_000, source=1
    )
    assert sp.parse_sacct("12|uid-l|COMPLETED|0:0|2026-11-25T23:53:00|2026-11-25T23:53:30\n")["12"]


def test_an_ended_jobs_usage_is_the_batch_systems_allocation_else_the_request_times_its_run_time() -> None:
    request = Accounted(500, 64 * MIB, 0)
    ended = Observation(BackendState.COMPLETED, 0, started_at=100.0, finished_at=110.0)
    assert usage.ended_usage(ended, request, [], [], now=999) == pb.JobUsage(
        millicpu_seconds=5000, memory_mib_seconds=640, wall_millis=10_000, source=ALLOCATION
    )
    accounted = Observation(
        BackendState.COMPLETED, 0, started_at=100.0, finished_at=110.0, accounted=Accounted(1000, 64 * MIB, 1)
    )
    got = usage.ended_usage(accounted, request, [], [], now=999)
    assert got is not None and (got.millicpu_seconds, got.milligpu_seconds, got.source) == (10_000, 10_000, ACCOUNTING)
    # no start from the backend: the containers' first start to their last end, else to now
    lost = Observation(BackendState.GONE)
    got = usage.ended_usage(lost, request, [None, 105.0, 103.0], [None, 107.0], now=999)
    assert got is not None and got.wall_millis == 4000
    got = usage.ended_usage(lost, request, [103.0], [None], now=104.5)
    assert got is not None and got.wall_millis == 1500
    assert usage.ended_usage(lost, request, [None], [None], now=999) is None  # never started: nothing used
    assert usage.ended_usage(ended, None, [], [], now=999) is None  # nothing known of the allocation
    backwards = Observation(BackendState.COMPLETED, 0, started_at=110.0, finished_at=100.0)
    assert usage.ended_usage(backwards, request, [], [], now=0) == pb.JobUsage(source=ALLOCATION)


def test_a_gang_member_bills_its_own_request_not_the_gangs_allocation() -> None:
    gang = Observation(BackendState.CANCELLED, started_at=1.0, finished_at=2.0, accounted=Accounted(8000))
    assert member_observation(gang, None, False, "g").accounted is None
    done = Observation(BackendState.COMPLETED, 0, started_at=1.0, finished_at=2.0, accounted=Accounted(8000))
    assert member_observation(done, 0, False, "g").accounted is None


def meta(spec: pb.JobScript) -> JobMeta:
    return JobMeta("u1", "team", "p", "pool", "7", (), ("main",), "shell", bytes(spec))


def test_the_status_that_ends_a_job_carries_its_usage_and_no_earlier_one_does() -> None:
    spec = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=2000, memory_bytes=128 * MIB))
    files = {"main": ContainerFiles(started_at=100.0)}
    running = plan_poll(
        meta(spec), Observation(BackendState.RUNNING, started_at=100.0), files, last_status=None, revision=0, now=101
    )
    assert running.change is not None and running.change.status.usage is None
    ended_files = {"main": ContainerFiles(started_at=100.0, exit_code=0, finished_at=103.0)}
    obs = Observation(BackendState.COMPLETED, 0, started_at=100.0, finished_at=103.0)
    plan = plan_poll(meta(spec), obs, ended_files, last_status=running.change.raw, revision=1, now=104)
    assert plan.untrack and plan.change is not None
    assert plan.change.status.usage == pb.JobUsage(
        millicpu_seconds=6000, memory_mib_seconds=384, wall_millis=3000, source=ALLOCATION
    )
    assert pb.JobStatus.parse(plan.change.raw).usage == plan.change.status.usage


def test_a_pod_deleted_while_it_runs_bills_its_request_until_the_delete_and_an_ended_one_keeps_its_usage() -> None:
    spec = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=1000))
    started = dt.datetime.fromtimestamp(100, dt.UTC)
    running = pb.JobStatus(
        state=pb.JobState.RUNNING,
        containers=[pb.ContainerStatus(name="main", phase=pb.ContainerPhase.RUNNING, started_at=started)],
    )
    tomb = cancelled_status(meta(spec), running, now=130.0)
    assert tomb.usage == pb.JobUsage(millicpu_seconds=30_000, wall_millis=30_000, source=ALLOCATION)
    seen = cancelled_status(meta(spec), running, now=130.0, started_at=100.4)  # the backend's start, not rounded
    assert seen.usage == pb.JobUsage(millicpu_seconds=29_600, wall_millis=29_600, source=ALLOCATION)
    ended = pb.JobStatus(state=pb.JobState.SUCCEEDED, usage=pb.JobUsage(millicpu_seconds=7, source=ACCOUNTING))
    assert cancelled_status(meta(spec), ended, now=130.0).usage == ended.usage
    queued = pb.JobStatus(state=pb.JobState.PENDING, containers=[pb.ContainerStatus(name="main")])
    assert cancelled_status(meta(spec), queued, now=130.0).usage is None


NOW = 10_000.0
HALF_CPU = allowance_of(pb.ResourceRequest(cpu_millis=500, memory_bytes=64 * MIB, gpus=0), NOW - 600)


@pytest.mark.parametrize(
    ("reported", "cpu", "memory", "gpu", "refused"),
    [
        (pb.JobUsage(millicpu_seconds=5000, memory_mib_seconds=640, wall_millis=10_000), 5.0, 640 * MIB, 0.0, set()),
        # Slurm's whole cores: a 500m pod on one core for 10 s is within its rounded-up request
        (pb.JobUsage(millicpu_seconds=10_000, wall_millis=10_000), 10.0, 0.0, 0.0, set()),
        (pb.JobUsage(millicpu_seconds=-5, wall_millis=10_000), 0.0, 0.0, 0.0, {"cpu"}),
        (pb.JobUsage(millicpu_seconds=50_000, wall_millis=10_000), 11.0, 0.0, 0.0, {"cpu"}),
        (pb.JobUsage(milligpu_seconds=1, wall_millis=10_000), 0.0, 0.0, 0.0, {"gpu"}),
        (pb.JobUsage(wall_millis=-1), 0.0, 0.0, 0.0, {"wall"}),
    ],
)
def test_a_pools_figures_are_bounded_by_the_pods_request_times_its_wall_time(
    reported: pb.JobUsage, cpu: float, memory: float, gpu: float, refused: set[str]
) -> None:
    got = billed(reported, HALF_CPU, now=NOW)
    assert (got.cpu_seconds, got.memory_byte_seconds, got.gpu_seconds) == pytest.approx((cpu, memory, gpu))
    assert set(got.refused) == refused


def test_a_wall_time_longer_than_the_pod_has_existed_is_cut_to_that() -> None:
    huge = pb.JobUsage(millicpu_seconds=2**62, memory_mib_seconds=2**62, wall_millis=2**62)
    got = billed(huge, HALF_CPU, now=NOW)
    longest = NOW - HALF_CPU.since + SLACK_S
    assert got.cpu_seconds == pytest.approx(1 * longest * 1.1)
    assert got.memory_byte_seconds == pytest.approx(64 * MIB * longest * 1.1)
    assert set(got.refused) == {"cpu", "memory", "wall"}
    unknown = billed(pb.JobUsage(millicpu_seconds=1000, wall_millis=1000), None, now=NOW)
    assert (unknown.cpu_seconds, set(unknown.refused)) == (0.0, {"usage"})


async def test_the_store_bills_an_ended_pod_once_through_redelivery_and_a_restore() -> None:
    store = PodStore()
    billed_usages: list[tuple[str, pb.JobUsage]] = []
    store.on_usage = lambda record, u: billed_usages.append((record.uid, u))
    record = PodRecord("u1", "team", "p", "pool", allowance=Allowance(1000, 0, 0, 0))
    await store.put(record)
    final = pb.JobStatus(state=pb.JobState.SUCCEEDED, usage=pb.JobUsage(millicpu_seconds=9, source=ACCOUNTING))
    running = pb.JobStatus(state=pb.JobState.RUNNING)
    assert store.apply_status("u1", running, 1) is not None
    assert store.apply_status("u1", final, 2) is not None
    assert store.apply_status("u1", final, 2) is None  # the same event again
    assert store.apply_status("u1", final, 3) is not None  # newer (a tombstone copying the usage)
    assert store.apply_encoded("u1", bytes(final), int(final.state), "", 4) is not None
    assert billed_usages == [("u1", final.usage)]
    restored = PodRecord.from_json(record.to_json())  # what redis gives a restarted gateway
    assert restored.allowance == Allowance(1000, 0, 0, 0)
    again = PodStore()
    again.on_usage = store.on_usage
    await again.put(restored)
    assert again.apply_status("u1", final, 9) is not None
    assert billed_usages == [("u1", final.usage)]
    lost = pb.JobStatus(state=pb.JobState.LOST)
    other = PodRecord("u2", "team", "q", "pool")
    await store.put(other)
    store.apply_status("u2", lost, 1)  # ended without usage: nothing yet...
    store.apply_status("u2", final, 2)  # ...its usage arrives later: billed then, once
    assert [uid for uid, _ in billed_usages] == ["u1", "u2"]


def test_a_pools_recent_usage_is_shown_non_negative_and_within_its_capacity() -> None:
    capacity = {"cpu": Fraction(4), "memory": Fraction(8 * 2**30)}
    honest = recent_usage(30_000, 1024 * 10, 0, 10_000, 3600, capacity)
    assert (honest.cpu_seconds, honest.memory_byte_seconds, honest.gpu_seconds, honest.refused) == (
        30,
        10 * 2**30,
        0,
        {},
    )
    hostile = recent_usage(-1, 2**62, 5000, 2**63 - 1, -5, capacity)
    assert hostile.cpu_seconds == 0 and hostile.gpu_seconds == 0 and hostile.window_seconds == 0
    assert hostile.memory_byte_seconds == 2**63 - 1  # an int64, as the CRD's format says
    assert set(hostile.refused) == {"usage.cpu", "usage.memory", "usage.gpu"}


def test_usages_add_up_and_are_read_back_from_an_encoded_status() -> None:
    a = pb.JobUsage(millicpu_seconds=1, memory_mib_seconds=2, milligpu_seconds=3, wall_millis=4, source=ACCOUNTING)
    b = pb.JobUsage(millicpu_seconds=10, wall_millis=40, source=ALLOCATION)
    assert kernel_usage.summed([a, b]) == pb.JobUsage(
        millicpu_seconds=11, memory_mib_seconds=2, milligpu_seconds=3, wall_millis=44
    )
    assert kernel_usage.summed([a, a]).source == ACCOUNTING
    assert kernel_usage.usage_in_status(bytes(pb.JobStatus(usage=a))) == a
    assert kernel_usage.usage_in_status(bytes(pb.JobStatus())) is None
    assert kernel_usage.usage_in_status(b"\xff\xff") is None


def test_the_recent_usage_reads_each_ended_jobs_status_once_per_revision_and_forgets_what_left_the_window() -> None:
    """``EndedUsage`` sums what the registry's window of ended jobs used, as summing their statuses afresh would;
    a status already read at that revision is not read again (a changed byte under the same revision, which the
    registry never writes, shows it), a new revision is, and a job no longer in the window is forgotten."""
    a = pb.JobUsage(millicpu_seconds=1000, wall_millis=1000, source=ALLOCATION)
    b = pb.JobUsage(millicpu_seconds=500, wall_millis=2000, source=ALLOCATION)
    c = pb.JobUsage(millicpu_seconds=7, wall_millis=7, source=ACCOUNTING)
    tally = usage.EndedUsage()
    window = [("u-a", 3, bytes(pb.JobStatus(usage=a))), ("u-b", 2, bytes(pb.JobStatus(usage=b)))]
    assert tally.summed(window) == kernel_usage.summed([a, b])
    same_revision = [("u-a", 3, bytes(pb.JobStatus(usage=c))), ("u-b", 2, bytes(pb.JobStatus(usage=b)))]
    assert tally.summed(same_revision) == kernel_usage.summed([a, b]), "read once per revision"
    new_revision = [("u-a", 4, bytes(pb.JobStatus(usage=c))), ("u-b", 2, bytes(pb.JobStatus(usage=b)))]
    assert tally.summed(new_revision) == kernel_usage.summed([c, b])
    assert tally.summed([("u-b", 2, b"")]) == kernel_usage.summed([b]), "u-a left the window"
    assert tally.summed([("u-a", 4, bytes(pb.JobStatus(usage=c)))]) == c, "read again once it comes back"
    assert tally.summed([("u-x", 1, b"\xff\xff"), ("u-y", 1, bytes(pb.JobStatus()))]) == pb.JobUsage()


def test_the_event_of_a_status_with_usage_is_the_job_event_on_the_wire() -> None:
    """A poll hands the outbox the status's bytes to stamp; ``usage`` follows ``updated_at`` in field order, so the
    one status of a job that carries it is encoded whole: the event is still ``bytes(JobEvent)``."""
    from interlink_nats.kernel.clock import SYSTEM_CLOCK
    from interlink_nats.submitters.core.status import encode_status
    from interlink_nats.submitters.state.outbox import Outbox

    outbox = Outbox(pool="p", subject_prefix="", instance_id="sub-1", clock=SYSTEM_CLOCK, registry=lambda: None)
    status = pb.JobStatus(
        pod=pb.PodRef(uid="u1"), state=pb.JobState.SUCCEEDED, usage=pb.JobUsage(millicpu_seconds=5, source=ALLOCATION)
    )
    event = outbox.event(status, 3, unstamped=encode_status(status))
    assert event.data == bytes(pb.JobEvent(status=status, revision=3, instance_id="sub-1"))


def test_an_htcondor_history_ad_carries_what_the_ended_job_was_allocated() -> None:
    from interlink_nats.submitters.backends.htcondor import parse as hp

    assert "RemoteWallClockTime" in hp.attributes(hp.Command.HISTORY).split(",")
    assert "RemoteWallClockTime" not in hp.attributes(hp.Command.QUEUE).split(",")  # the poll's queue answer stays lean
    # condor_history -json, a completed job of a partitionable slot (the provisioned share wins over the request)
    ad = {
        "ClusterId": 7,
        "ProcId": 0,
        "JobStatus": 4,
        "ExitCode": 0,
        "JobStartDate": 1_700_000_000,
        "CompletionDate": 1_700_000_030,
        "RequestCpus": 1,
        "CpusProvisioned": 2,
        "RequestMemory": 100,
        "MemoryProvisioned": 128,
        "RequestGPUs": 1,
        "RemoteWallClockTime": 28.0,
    }
    observation = hp.observe(ad, now=0)
    assert observation is not None and observation.accounted == Accounted(2000, 128 * MIB, 1, 28.0)
    u = usage.ended_usage(observation, Accounted(1000), [], [], now=0)
    assert u is not None and (u.millicpu_seconds, u.wall_millis, u.source) == (56_000, 28_000, ACCOUNTING)
    # a request that is an unevaluated expression: no record, the pod's request stands in
    expression = {**ad, "RequestCpus": "ifThenElse(x, 1, 2)", "CpusProvisioned": None}
    assert hp.observe(expression, now=0).accounted is None  # type: ignore[union-attr]
    running = {**ad, "JobStatus": 2}
    assert hp.observe(running, now=0).accounted is None  # type: ignore[union-attr]
