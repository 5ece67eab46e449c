"""The live-capacity policy as tables: free/used/queued/failures → quota and state, hysteresis,
smoothing and back-off. Pure: no clock, no API server (controller/capacity.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from interlink_nats.controller import model
from interlink_nats.controller.capacity import (
    Admission,
    CapacityPolicy,
    Decision,
    Memory,
    Policy,
    PoolLoad,
    decide,
    remembered,
)
from interlink_nats.controller.reconcile import kueue_usage
from test_masterqueue_safety import flavor_body

COVERED = ("cpu", "memory")
TOTAL = {"cpu": "64", "memory": "256Gi"}
FREE = CapacityPolicy(policy=Policy.FREE, min_change_fraction=0.1, min_interval_s=10.0, max_queued_jobs=5)
A, S, F, X = Admission.OPEN, Admission.SATURATED, Admission.FAILING, Admission.STALE


def load(**kw: object) -> PoolLoad:
    values: dict[str, object] = {"total": TOTAL}
    values.update(kw)
    return PoolLoad(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "pool", "nominal", "quota", "state"),
    [
        # Total: today's behaviour, whatever is free
        (CapacityPolicy(), load(free={"cpu": "2", "memory": "1Gi"}), {}, TOTAL, A),
        (CapacityPolicy(), load(), {"cpu": "16"}, {"cpu": "16", "memory": "256Gi"}, A),
        # Free: used + free, capped by the total and by nominalQuota
        (
            FREE,
            load(free={"cpu": "10", "memory": "8Gi"}, used={"cpu": "4", "memory": "2Gi"}),
            {},
            {"cpu": "14", "memory": "10Gi"},
            A,
        ),
        (FREE, load(free={"cpu": "60", "memory": "8Gi"}, used={"cpu": "10"}), {}, {"cpu": "64", "memory": "8Gi"}, A),
        (
            FREE,
            load(free={"cpu": "10", "memory": "8Gi"}, used={"cpu": "4"}),
            {"cpu": "12"},
            {"cpu": "12", "memory": "8Gi"},
            A,
        ),
        (
            FREE,
            load(free={"cpu": "0", "memory": "0"}, used={"cpu": "3", "memory": "1Gi"}),
            {},
            {"cpu": "3", "memory": "1Gi"},
            A,
        ),
        # Free but the site cannot tell: the total stands in
        (FREE, load(free={}), {}, TOTAL, A),
        # a resource the site does not measure is free as announced
        (FREE, load(free={"cpu": "1"}), {}, {"cpu": "1", "memory": "256Gi"}, A),
        # nonsense from a pool counts as nothing, never an exception
        (FREE, load(free={"cpu": "lots", "memory": "-1"}, used={"cpu": "2"}), {}, {"cpu": "2", "memory": "0"}, A),
        # saturation: too many queued, or waiting too long → quota held at what it uses, in either policy
        (FREE, load(free={"cpu": "30"}, used={"cpu": "8"}, queued_jobs=6), {}, {"cpu": "8", "memory": "0"}, S),
        (
            CapacityPolicy(max_pending_s=60),
            load(used={"cpu": "8"}, queued_jobs=1, oldest_pending_s=61),
            {},
            {"cpu": "8", "memory": "0"},
            S,
        ),
        (CapacityPolicy(max_pending_s=60), load(queued_jobs=1, oldest_pending_s=59), {}, TOTAL, A),
        # failing: most recent submissions/starts failed (enough of them to judge)
        (CapacityPolicy(), load(attempts=4, failures=3, used={"cpu": "1"}), {}, {"cpu": "1", "memory": "0"}, F),
        (CapacityPolicy(), load(attempts=2, failures=2), {}, TOTAL, A),
        (CapacityPolicy(), load(attempts=10, failures=4), {}, TOTAL, A),
        # failing outranks saturation
        (FREE, load(attempts=3, failures=3, queued_jobs=9), {}, {"cpu": "0", "memory": "0"}, F),
        # stale report (Free only): its free figure is not trusted
        (
            FREE,
            load(free={"cpu": "30"}, used={"cpu": "2"}, age_s=100, interval_s=30),
            {},
            {"cpu": "2", "memory": "0"},
            X,
        ),
        (CapacityPolicy(), load(age_s=100, interval_s=30), {}, TOTAL, A),
    ],
)
def test_inputs_to_quota_and_state(
    policy: CapacityPolicy, pool: PoolLoad, nominal: dict[str, str], quota: dict[str, str], state: Admission
) -> None:
    decision = decide(policy, pool, nominal, COVERED, Memory(), now=1000.0)
    assert (decision.quota, decision.admission) == (quota, state)
    assert bool(decision.reason) == (state is not A)


def run(policy: CapacityPolicy, steps: list[tuple[float, PoolLoad]]) -> list[Decision]:
    """Decisions of successive passes, each remembering the last."""
    memory, out = Memory(), []
    for now, pool in steps:
        decision = decide(policy, pool, {}, COVERED, memory, now)
        memory = decision.memory
        out.append(decision)
    return out


def test_smoothing_applies_a_change_only_when_large_enough_and_not_too_often() -> None:
    def free(cpu: str) -> PoolLoad:
        return load(free={"cpu": cpu, "memory": "10Gi"})

    cpus = [
        d.quota["cpu"]
        for d in run(
            FREE,
            [
                (0, free("20")),
                (1, free("21")),
                (2, free("10")),
                (11, free("10")),
                (12, free("10.5")),
                (30, free("10.5")),
            ],
        )
    ]
    # 20 → 21 is 5 %: ignored; 10 is half: waits for the interval (applied at t=11); 10.5 is 5 %: ignored
    assert cpus == ["20", "20", "20", "10", "10", "10"]


def test_total_policy_is_not_smoothed() -> None:
    decisions = run(CapacityPolicy(), [(0, load()), (1, load(total={"cpu": "65", "memory": "256Gi"}))])
    assert [d.quota["cpu"] for d in decisions] == ["64", "65"]


def test_a_hold_is_immediate_and_saturation_lasts_until_the_queue_drains() -> None:
    used = {"cpu": "4", "memory": "1Gi"}
    steps = [
        (0.0, load(free={"cpu": "20"}, used=used)),
        (1.0, load(free={"cpu": "20"}, used=used, queued_jobs=6)),  # over the limit: held at once
        (2.0, load(free={"cpu": "20"}, used=used, queued_jobs=3)),  # under the limit, not drained: still held
        (3.0, load(free={"cpu": "20"}, used=used, queued_jobs=0)),  # drained: open again at once
    ]
    decisions = run(FREE, steps)
    assert [d.admission for d in decisions] == [A, S, S, A]
    assert [d.quota["cpu"] for d in decisions] == ["24", "4", "4", "24"]


def test_failing_backs_off_doubling_and_recovers_when_submits_succeed() -> None:
    policy = CapacityPolicy(backoff_s=10.0, max_backoff_s=25.0)
    bad = load(attempts=3, failures=3)
    worse = load(attempts=4, failures=4)
    worst = load(attempts=5, failures=5)
    healed = load(attempts=6, failures=2)
    steps = [
        (0.0, bad),  # Failing for 10 s
        (9.0, bad),
        (10.0, bad),  # back-off over: probing (the old failures alone do not hold it again)
        (11.0, worse),  # a new failure while probing: Failing again, for 20 s
        (30.0, worse),
        (31.0, worse),  # released
        (32.0, worst),  # relapse: capped at 25 s
        (56.0, worst),
        (57.0, worst),  # released
        (58.0, healed),  # most submits succeed: healthy, back-off reset
        (59.0, load(attempts=9, failures=5)),  # failing again: the first back-off again (10 s)
        (68.0, load(attempts=9, failures=5)),
        (69.0, load(attempts=9, failures=5)),
    ]
    decisions = run(policy, steps)
    assert [d.admission for d in decisions] == [F, F, A, F, F, A, F, F, A, A, F, F, A]
    assert "3 of its last 3" in decisions[0].reason
    assert decisions[0].quota == {"cpu": "0", "memory": "0"}
    assert decisions[2].quota == TOTAL


def test_memory_survives_a_state_round_trip_unchanged() -> None:
    decision = decide(FREE, load(free={"cpu": "8"}), {}, COVERED, Memory(), now=5.0)
    again = decide(FREE, load(free={"cpu": "8"}), {}, COVERED, decision.memory, now=6.0)
    assert again.memory == replace(decision.memory)
    assert again.quota == decision.quota


def test_the_masterqueue_sets_the_policy_per_flavor_group() -> None:
    body = flavor_body(pools=["a"], capacity="Free", capacityPolicy={"minIntervalSeconds": 5, "maxQueuedJobs": 3})
    group = model.parse_masterqueue(body).flavors[0]
    assert group.nats is not None
    assert group.nats.capacity == CapacityPolicy(policy=Policy.FREE, min_interval_s=5.0, max_queued_jobs=3)
    default = model.parse_masterqueue(flavor_body(pools=["a"])).flavors[0]
    assert default.nats is not None and default.nats.capacity == CapacityPolicy()


@pytest.mark.parametrize(
    ("nats", "problem"),
    [
        ({"capacity": "free"}, "natsFlavor.capacity: must be one of Total, Free"),
        ({"capacityPolicy": {"minChangeFraction": 2}}, "capacityPolicy.minChangeFraction: must be between 0 and 1"),
        ({"capacityPolicy": {"maxQueuedJobs": 1.5}}, "capacityPolicy.maxQueuedJobs: must be a whole number"),
        ({"capacityPolicy": {"backoffSeconds": "10"}}, "capacityPolicy.backoffSeconds: must be a number"),
        ({"capacityPolicy": {"backoffSeconds": True}}, "capacityPolicy.backoffSeconds: must be a number"),
        ({"capacityPolicy": {"backof": 1}}, "capacityPolicy.backof: unknown field"),
        ({"capacityPolicy": []}, "natsFlavor.capacityPolicy: must be a mapping"),
    ],
)
def test_a_bad_policy_is_one_clear_line_naming_the_field(nats: dict[str, object], problem: str) -> None:
    with pytest.raises(model.MasterQueueError) as caught:
        model.parse_masterqueue(flavor_body(pools=["a"], **nats))
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_kueue_usage_sums_the_reservation_of_every_queue_and_ignores_garbage() -> None:
    master = {"status": {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "3"}]}]}}
    borrower = {"status": {"flavorsUsage": [{"name": "f", "resources": [{"name": "cpu", "total": "500m"}]}]}}
    garbage: list[dict[str, object]] = [
        {},
        {"status": None},
        {"status": {"flavorsReservation": "x"}},
        {
            "status": {
                "flavorsReservation": [None, {"name": 3}, {"name": "f", "resources": [{"name": "cpu", "total": "?"}]}]
            }
        },
    ]
    assert kueue_usage([master, borrower, *garbage]) == {"f": {"cpu": "3500m"}}


def test_smoothing_windows_are_aligned_so_pools_change_together() -> None:
    """Changes first seen in one window (of 10 s) are applied together at the start of the next, whichever pool."""

    def at(now: float, memory: Memory, cpu: str) -> Decision:
        return decide(FREE, load(free={"cpu": cpu, "memory": "1Gi"}), {}, COVERED, memory, now)

    a, b = at(1.0, Memory(), "40"), at(7.0, Memory(), "40")
    a, b = at(3.0, a.memory, "10"), at(9.9, b.memory, "10")  # seen in window 0: held back
    assert a.quota["cpu"] == b.quota["cpu"] == "40"
    a, b = at(10.0, a.memory, "10"), at(10.0, b.memory, "10")  # window 1 begins: both applied in this pass
    assert a.quota["cpu"] == b.quota["cpu"] == "10"
    late = at(10.1, at(10.0, Memory(), "40").memory, "10")  # first seen in window 1: waits for window 2
    assert late.quota["cpu"] == "40"
    assert at(19.9, late.memory, "10").quota["cpu"] == "40"
    assert at(20.0, late.memory, "10").quota["cpu"] == "10"


@pytest.mark.parametrize(
    ("row", "state"),
    [
        ({"admission": "Failing", "reason": "3 of its last 3", "quota": {"cpu": "2"}}, F),
        ({"admission": "Saturated"}, S),
        ({"admission": "Open"}, None),
        ({"admission": ["Failing"], "quota": "x"}, None),
        ({}, None),
    ],
)
def test_a_restart_keeps_a_held_pool_held(row: dict[str, object], state: Admission | None) -> None:
    policy = CapacityPolicy(backoff_s=30.0)
    memory = remembered(row, policy, now=100.0)
    assert (memory.admission if memory else None) == state
    if state is F:
        assert memory is not None and memory.quota == {"cpu": "2"}
        held = decide(policy, load(), {}, COVERED, memory, now=129.0)  # the report says nothing failed lately
        assert held.admission is F and held.quota == {"cpu": "0", "memory": "0"}
        assert decide(policy, load(), {}, COVERED, memory, now=130.0).admission is A
    if state is S:
        assert memory is not None
        assert decide(FREE, load(queued_jobs=1), {}, COVERED, memory, now=101.0).admission is S
        assert decide(FREE, load(queued_jobs=0), {}, COVERED, memory, now=101.0).admission is A
