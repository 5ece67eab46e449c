"""The submitter's half of live capacity as pure functions: free capacity from sinfo / condor_status, the pool's
waiting jobs and its recent failures (recorded output; the real-Slurm test is test_capacity_slurm.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.submitters.backends.htcondor.free import parse_unclaimed
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.slurm.parse import parse_sinfo_free
from interlink_nats.submitters.core.backend import BackendState, Capacity, JobSpec
from interlink_nats.submitters.core.load import FailureWindow, QueueLoad, queue_load
from interlink_nats.submitters.edge.announcer import Announcer
from interlink_nats.submitters.testing import FakeBackend, offline_submitter, settings_for


def test_sinfo_free_counts_idle_cpus_unallocated_memory_and_gpus_of_usable_nodes() -> None:
    text = (
        "n1|8/56/0/64|256000|64000|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|mix|\n"
        "n1|8/56/0/64|256000|64000|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|mix|\n"  # in two partitions: once
        "n2|32/0/0/32|128000|128000|(null)|(null)|alloc|\n"  # full: nothing free, memory neither
        "n3|0/0/16/16|64000|0|(null)|(null)|drain|\n"  # drained: gives nothing
        "n4|0/8/0/8|1000+|0|gpu:2|gpu:0|idle|\n"
        "n5|0/8/0/8|1000|0|(null)|(null)|idle*|\n"  # not responding
        "garbage\n"
    )
    free = parse_sinfo_free(text)
    assert free == Capacity(cpu_millis=64_000, memory_bytes=(192000 + 1000) * 2**20, gpus=3 + 2, nodes=2)


def test_sinfo_free_of_an_empty_answer_is_nothing_free() -> None:
    assert parse_sinfo_free("").quantities() == {}


def test_unclaimed_htcondor_slots_are_free() -> None:
    ads = [
        {"Machine": "a", "Cpus": 6, "Memory": 2048, "GPUs": 1},  # partitionable slot's remainder
        {"Machine": "b", "Cpus": 1, "Memory": 512},
        {"Machine": "c", "Cpus": "x", "Memory": -1, "GPUs": True},  # nonsense counts as nothing
    ]
    assert parse_unclaimed(ads) == Capacity(cpu_millis=7000, memory_bytes=2560 * 2**20, gpus=1, nodes=2)


def test_queue_load_is_count_and_oldest_age() -> None:
    assert queue_load([], now=100.0) == QueueLoad()
    assert queue_load([90.0, 40.0, 99.0], now=100.0) == QueueLoad(3, 60.0)
    assert queue_load([120.0], now=100.0) == QueueLoad(1, 0.0)  # clock skew never gives a negative age


def test_failure_window_forgets_old_outcomes() -> None:
    window = FailureWindow(window_s=60.0)
    for t in (0.0, 10.0, 20.0):
        window.record(False, t)
    window.record(True, 30.0)
    assert window.counts(30.0) == (4, 3)
    assert window.counts(75.0) == (2, 1)  # the failures at 0 and 10 are older than 60 s
    assert window.counts(200.0) == (0, 0)


class _FreeBackend(FakeBackend):
    """The fake batch system, also saying what is free (``ReportsFree``)."""

    def __init__(self, free: Capacity) -> None:
        super().__init__(Capacity(cpu_millis=8000, memory_bytes=16 * 2**30))
        self.free_now = free

    async def free(self) -> Capacity | None:
        return self.free_now


async def test_the_report_carries_free_held_queue_and_failures(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "nats://127.0.0.1:1", pool="p", failure_window_s=60)
    clock = ManualClock()
    backend = _FreeBackend(Capacity(cpu_millis=3000, memory_bytes=2**30))
    announcer = Announcer(settings, backend, clock)
    job = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=1500, memory_bytes=2**20))
    announcer.held_specs = _specs({"a": bytes(job), "b": bytes(job), "c": b"\xff\xff"})
    announcer.queue_load = lambda now: QueueLoad(2, 42.9)
    announcer.record_outcome(False)
    announcer.record_outcome(True)
    await announcer.discover_capacity()
    report = announcer.resource_report()
    assert report.capacity == {"cpu": "8", "memory": "16384Mi", "pods": "1000"}
    assert report.free == {"cpu": "3", "memory": "1024Mi", "pods": "1000"}  # pods: not measured, free as announced
    assert report.held == {"cpu": "3", "memory": "2Mi"}
    assert (report.queued_jobs, report.oldest_pending_seconds) == (2, 42)
    assert (report.recent_attempts, report.recent_failures, report.failure_window_seconds) == (2, 1, 60)

    backend.free_now = Capacity(cpu_millis=64_000)  # more free than the pool's total: capped
    await announcer.discover_capacity()
    assert announcer.resource_report().free["cpu"] == "8"


async def test_a_backend_that_cannot_tell_reports_no_free_figures(tmp_path: Path) -> None:
    announcer = Announcer(settings_for(tmp_path, "nats://127.0.0.1:1", pool="p"), FakeBackend(), ManualClock())
    await announcer.discover_capacity()
    report = announcer.resource_report()
    assert report.free == {} and report.held == {}


def _specs(specs: dict[str, bytes]) -> Callable[[], Awaitable[dict[str, bytes]]]:
    async def read() -> dict[str, bytes]:
        return specs

    return read


async def test_the_shell_host_reports_its_idle_share_minus_the_slots_its_jobs_hold(tmp_path: Path) -> None:
    backend = ShellBackend(max_concurrent=2)
    free = await backend.free()
    assert free is not None and 0 <= free.cpu_millis <= 2000 and free.memory_bytes > 0
    for uid in ("a", "b"):  # two queued jobs hold both slots (the launcher is not started: they stay queued)
        await backend.submit(JobSpec(uid, tmp_path / uid, tmp_path / uid / "job.sh"))
    held = await backend.free()
    assert held is not None and held.cpu_millis == 0


async def test_the_pools_queue_and_start_outcomes_come_from_its_tracked_jobs(tmp_path: Path) -> None:
    backend = FakeBackend()
    async with offline_submitter(tmp_path, backend, instance_id="a") as sub:
        jobs = [
            pb.JobScript(pod=pb.PodRef(uid=u, namespace="ns", name=u), containers=["main"], script="true\n")
            for u in ("ok", "lost", "waits")
        ]
        for job in jobs:
            await sub.submissions.submit(job)
        report = sub.announcer.resource_report()
        assert report.queued_jobs == 3  # submitted, not yet seen out of the site's queue
        assert (report.recent_attempts, report.recent_failures) == (3, 0)
        backend.start_running("ok")
        backend.finish("lost", BackendState.NODE_FAIL, exit_code=None)  # ended without ever starting
        await sub.poll_once()
        report = sub.announcer.resource_report()
        assert report.queued_jobs == 1
        assert (report.recent_attempts, report.recent_failures) == (5, 1)


def test_held_counts_each_job_once_reads_it_once_and_forgets_jobs_that_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    import interlink_nats.submitters.core.load as load

    reads: list[bytes] = []
    real = load.requested_by

    def counted(raw: bytes) -> Capacity | None:
        reads.append(raw)
        return real(raw)

    monkeypatch.setattr(load, "requested_by", counted)
    small = bytes(pb.JobScript(script="x", resources=pb.ResourceRequest(cpu_millis=500, memory_bytes=2**20)))
    gpu = bytes(pb.JobScript(script="y", resources=pb.ResourceRequest(cpu_millis=1000, gpus=1)))
    tally = load.HeldTally()
    assert tally.held({"a": small, "b": gpu, "bad": b"\x2a\x05\x08"}) == Capacity(1500, 2**20, 1)
    assert len(reads) == 3
    assert tally.held({"a": small, "b": gpu, "bad": b"\x2a\x05\x08", "c": small}) == Capacity(2000, 2**21, 1)
    assert len(reads) == 4  # only the new job was read
    assert tally.held({"c": small}) == Capacity(500, 2**20, 0)  # a and b ended
    assert tally.held({"a": small}) == Capacity(500, 2**20, 0)
    assert len(reads) == 5  # a came back (a uid seen again after it ended is read again)


def test_what_a_job_requests_reads_the_same_by_the_fast_view_and_by_betterproto() -> None:
    from interlink_nats.gen.interlink_nats.v1 import fastwire
    from interlink_nats.submitters.core.load import requested_by

    job = pb.JobScript(
        script="s",
        containers=["a"],
        resources=pb.ResourceRequest(cpu_millis=2500, memory_bytes=3 * 2**30, gpus=2),
    )
    raw = bytes(job)
    assert fastwire.read_job_script(raw) is not None  # the fast path is the one taken
    assert requested_by(raw) == Capacity(2500, 3 * 2**30, 2)
    assert requested_by(bytes(pb.JobScript(script="s"))) == Capacity()  # no request: nothing held
    assert requested_by(b"\x2a\x05\x08") is None  # resources (field 5) cut short: betterproto2 refuses it too
