"""The gateway's pod groups (services/gateway/pod_group.py) and the gang policy (group_policy.py), pure; and the
wait's timeout driven by a ManualClock through PodGroupRunner with memory-only stores (no pool is called: the
group never completes)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from interlink_nats.kernel.names import is_pod_uid
from interlink_nats.services.gateway import pod_group as groups
from interlink_nats.services.gateway.errors import GatewayError
from interlink_nats.services.gateway.group_policy import GangPolicy, Hold, Refuse, SubmitAsOne
from interlink_nats.services.gateway.group_runner import PodGroupRunner
from interlink_nats.services.gateway.group_store import PodGroupStore
from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupMember
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore
from interlink_nats.services.scripts import PodGroupSpec

FAIL_GANG = int(pb.GangFailurePolicy.FAIL_GANG)
GANG = GangPolicy(wait_s=60)


def admit(group: PodGroup | None, uid: str, *, pool: str = "a", total: int = 3, now: float = 0) -> PodGroup:
    """``uid`` (pod ``pod-<uid>`` of namespace ns) arriving for pool ``pool`` in group train of ``total``."""
    member = PodGroupMember.arrived(uid, f"pod-{uid}", None, pb.JobScript(), {})
    spec = PodGroupSpec("train", total, pb.GangFailurePolicy.FAIL_GANG, None)
    return GANG.admit(group, member, spec, namespace="ns", pool=pool, now=now)


def held(*members: tuple[str, int | None, str], total: int = 3) -> PodGroup:
    group = PodGroup("ns", "train", "a", total, FAIL_GANG, first_at=100.0)
    for uid, index, name in members:
        job = pb.JobScript(pod=pb.PodRef(uid=uid, namespace="ns", name=name), script="true", containers=["main"])
        group.members[uid] = PodGroupMember.arrived(uid, name, index, job, {})
    return group


def test_the_first_member_makes_the_group_and_a_second_arrival_of_it_is_the_same_member() -> None:
    group = admit(None, "u1", now=5.0)
    assert (group.key, group.pool, group.total, group.first_at) == ("ns/train", "a", 3, 5.0)
    group.members["u1"] = PodGroupMember.arrived("u1", "pod-u1", None, pb.JobScript(), {})
    assert admit(group, "u1", pool="b", total=9, now=6.0) is group  # a retry: not checked again


@pytest.mark.parametrize(
    ("other", "code", "words"),
    [
        ({"pool": "b"}, 422, ["spec.tolerations", "'a'", "'b'", "pod-u1", "pod-u2"]),
        ({"total": 4}, 422, ["pod-group-total-count", "4", "3"]),
    ],
)
def test_a_member_that_does_not_fit_is_refused_naming_both_pods(
    other: dict[str, Any], code: int, words: list[str]
) -> None:
    group = held(("u1", None, "pod-u1"))
    with pytest.raises(GatewayError) as refused:
        admit(group, "u2", **other)
    assert refused.value.status_code == code
    assert all(word in refused.value.message for word in words), refused.value.message


def test_one_more_member_than_the_count_is_a_409() -> None:
    group = held(("u1", None, "a"), ("u2", None, "b"), total=2)
    with pytest.raises(GatewayError) as refused:
        admit(group, "u3", total=2)
    assert refused.value.status_code == 409


def test_ranks_follow_the_completion_index_then_the_pod_name() -> None:
    group = held(("u1", None, "b"), ("u2", 1, "z"), ("u3", None, "a"), ("u4", 0, "y"), total=4)
    assert [m.uid for m in group.ranked()] == ["u4", "u2", "u3", "u1"]
    jobs = GANG.submission(group)
    assert [j.pod.uid for j in jobs if j.pod] == ["u4", "u2", "u3", "u1"]
    assert [(j.gang.rank, j.gang.size) for j in jobs if j.gang] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert {j.gang.group_uid for j in jobs if j.gang} == {groups.group_uid(group)}
    assert all(m.job.gang is None for m in group.members.values())  # the held jobs stay as they arrived


def test_the_group_uid_is_a_pod_uid_the_same_for_the_same_pods_and_another_for_new_ones() -> None:
    first = held(("u1", None, "a"), ("u2", None, "b"))
    again = held(("u2", None, "b"), ("u1", None, "a"))
    remade = held(("u3", None, "a"), ("u4", None, "b"))
    assert is_pod_uid(groups.group_uid(first))
    assert groups.group_uid(first) == groups.group_uid(again) != groups.group_uid(remade)


def test_a_held_group_reads_back_from_its_json() -> None:
    group = held(("u1", 2, "a"), ("u2", None, "b"))
    group.members["u1"].images = {"main": "busybox"}
    back = PodGroup.from_json(group.to_json())
    assert back == group


def test_a_gang_is_held_until_complete_and_refused_when_incomplete_past_the_wait() -> None:
    waiting = held(("u1", None, "a"))
    complete = held(("u1", None, "a"), ("u2", None, "b"), total=2)
    assert GANG.decide(waiting, now=100.0 + 59.9) == Hold("waiting for pod group ns/train: 1 of 3 members have arrived")
    assert GANG.decide(complete, now=100.0) == SubmitAsOne()
    assert GANG.decide(complete, now=100.0 + 600) == SubmitAsOne()  # complete: being submitted, never refused
    refused = GANG.decide(waiting, now=100.0 + 60)
    assert refused == Refuse("PodGroupIncomplete", "pod group ns/train: only 1 of 3 members arrived within 60 s")


def test_a_group_larger_than_the_site_runs_is_refused_naming_the_annotation() -> None:
    small = GangPolicy(wait_s=60, limits=groups.PodGroupLimits(group_size=2))
    member = PodGroupMember.arrived("u1", "pod-u1", None, pb.JobScript(), {})
    spec = PodGroupSpec("train", 3, pb.GangFailurePolicy.FAIL_GANG, None)
    with pytest.raises(GatewayError) as refused:
        small.admit(None, member, spec, namespace="ns", pool="a", now=0)
    assert refused.value.status_code == 422 and "max_group_size" in refused.value.message


def test_a_failed_member_shows_every_container_terminated_with_the_reason() -> None:
    status = groups.member_status(("setup",), ("main",), final=True, reason="PodGroupIncomplete", message="m")
    assert status.state == pb.JobState.FAILED
    assert [(c.name, c.init, c.phase, c.exit_code, c.reason) for c in status.containers] == [
        ("setup", True, pb.ContainerPhase.TERMINATED, 1, "PodGroupIncomplete"),
        ("main", False, pb.ContainerPhase.TERMINATED, 1, "PodGroupIncomplete"),
    ]


async def test_the_wait_runs_on_the_injected_clock() -> None:
    clock = ManualClock()
    store = PodStore()
    hold = PodGroupRunner(store, PodGroupStore(), cast(PoolClient, None), wait_s=60, clock=clock)
    record = PodRecord("u1", "ns", "w-0", "a", containers=["main"])
    job = pb.JobScript(pod=pb.PodRef(uid="u1", namespace="ns", name="w-0"), containers=["main"])
    assert (
        await hold.hold(record, job, PodGroupSpec("train", 2, pb.GangFailurePolicy.FAIL_GANG, None)) == "held:ns/train"
    )
    clock.advance(59)
    await hold.sweep()
    assert store.pods["u1"].state == pb.JobState.PENDING
    assert hold.waiting_message("u1") == "waiting for pod group ns/train: 1 of 2 members have arrived"
    clock.advance(1)
    await hold.sweep()
    status = store.pods["u1"].status
    assert status is not None and status.state == pb.JobState.FAILED
    assert status.containers[0].message == "pod group ns/train: only 1 of 2 members arrived within 60 s"
    assert not hold.holds("u1")


async def test_the_runner_does_what_its_policy_decides_not_what_a_gang_would() -> None:
    """The seam a second kind of group uses: a policy of its own, and the same holding, store and sweep. This one
    refuses after 5 s with its own reason, where a gang would hold for ``wait_s``."""

    class Impatient:
        kind = pb.GroupKind.UNSPECIFIED

        def name_for(self, held: object, namespace: str, spec: PodGroupSpec, now: float, fits: object = None) -> str:
            return spec.name

        def admit(
            self,
            group: PodGroup | None,
            member: PodGroupMember,
            spec: PodGroupSpec,
            *,
            namespace: str,
            pool: str,
            now: float,
        ) -> PodGroup:
            return group or PodGroup(namespace, spec.name, pool, spec.total, int(spec.failure_policy), now)

        def decide(self, group: PodGroup, now: float) -> Hold | SubmitAsOne | Refuse:
            return Refuse("Impatient", "gave up") if now - group.first_at >= 5 else Hold("wait")

        def submission(self, group: PodGroup) -> list[pb.JobScript]:
            raise AssertionError("never complete here")

    clock = ManualClock()
    store = PodStore()
    runner = PodGroupRunner(store, PodGroupStore(), cast(PoolClient, None), wait_s=60, clock=clock, policy=Impatient())
    record = PodRecord("u1", "ns", "w-0", "a", containers=["main"])
    job = pb.JobScript(pod=pb.PodRef(uid="u1", namespace="ns", name="w-0"), containers=["main"])
    await runner.hold(record, job, PodGroupSpec("train", 2, pb.GangFailurePolicy.FAIL_GANG, None))
    clock.advance(4.9)
    await runner.sweep()
    assert store.pods["u1"].state == pb.JobState.PENDING
    clock.advance(0.1)
    await runner.sweep()
    status = store.pods["u1"].status
    assert status is not None and (status.state, status.reason) == (pb.JobState.FAILED, "Impatient")
    assert not runner.holds("u1")
