"""The submitter's half of issue 27 as pure functions: free capacity from sinfo / condor_status, the pool's
waiting jobs and its recent failures (recorded output; the real-Slurm test is test_capacity_slurm.py)."""

from __future__ import annotations

from interlink_nats.submitters.backends.htcondor.free import parse_unclaimed
from interlink_nats.submitters.backends.slurm.parse import parse_sinfo_free
from interlink_nats.submitters.core.backend import Capacity
from interlink_nats.submitters.core.load import FailureWindow, QueueLoad, queue_load


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
