"""The pure parts of arrays: which Job a pod belongs to, the gateway's coalescing policy, and the submitter's check
of an array request. No I/O: called directly."""

from __future__ import annotations

import re
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.array_policy import ArrayPolicy, array_spec, array_uid, batch_shape
from interlink_nats.services.gateway.group_policy import Hold, SubmitAsOne
from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupMember, group_key
from interlink_nats.services.scripts.job_array import JobOfPod
from interlink_nats.services.scripts.render import render_pod
from interlink_nats.submitters.core.arrays import MemberState, settle, validate_array
from interlink_nats.submitters.core.lifecycle import Phase


def raw_pod(labels: dict[str, str], owners: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": "u1", "name": "p-0", "namespace": "ns", "labels": labels}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}


def test_a_jobs_pod_is_read_from_its_labels_else_its_owner_reference() -> None:
    labels = {
        "batch.kubernetes.io/controller-uid": "6d3c5a4e-1111-2222-3333-444455556666",
        "batch.kubernetes.io/job-name": "scan",
        "batch.kubernetes.io/job-completion-index": "4",
    }
    assert render_pod(raw_pod(labels)).owner == JobOfPod("6d3c5a4e-1111-2222-3333-444455556666", "scan", 4)
    assert render_pod(raw_pod({"controller-uid": "abc", "job-name": "old"})).owner == JobOfPod("abc", "old", None)
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "scan2", "uid": "0f0e-12", "controller": True}]
    assert render_pod(raw_pod({}, owner)).owner == JobOfPod("0f0e-12", "scan2", None)
    not_a_job = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1"}]
    malformed = [{"apiVersion": "batch/v1", "kind": "Job", "name": "Bad Name", "uid": "1"}, "x"]
    for refs in (not_a_job, malformed, "nonsense"):
        assert render_pod(raw_pod({}, refs)).owner is None, refs


def test_a_gang_member_is_never_an_array_member() -> None:
    labels = {
        "batch.kubernetes.io/controller-uid": "abc",
        "kueue.x-k8s.io/pod-group-name": "g",
    }
    p = raw_pod(labels)
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    rendered = render_pod(p)
    assert rendered.group is not None and rendered.owner is None


def member(uid: str, index: int | None, job: pb.JobScript | None = None) -> PodGroupMember:
    return PodGroupMember.arrived(uid, f"p-{uid}", index, job or pb.JobScript(pod=pb.PodRef(uid=uid)), {})


def test_an_array_is_sent_when_its_window_closes_or_it_is_full_never_refused() -> None:
    policy = ArrayPolicy(window_s=2.0, max_count=3)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 3)
    group = policy.admit(None, member("a", 0), spec, namespace="ns", pool="pool-a", now=100.0)
    group.members["a"] = member("a", 0)
    assert isinstance(policy.decide(group, 101.9), Hold)
    assert isinstance(policy.decide(group, 102.0), SubmitAsOne), "the window closed: sent as it is"
    group.members["b"] = member("b", 1)
    group.members["c"] = member("c", 2)
    assert isinstance(policy.decide(group, 100.1), SubmitAsOne), "full: sent at once"


def test_a_later_pod_joins_the_next_array_of_its_job() -> None:
    policy = ArrayPolicy(window_s=2.0, max_count=2)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 2)
    held: dict[str, PodGroup] = {}
    first = policy.name_for(held.get, "ns", spec, 100.0)
    held[group_key("ns", first)] = group = PodGroup("ns", first, "pool-a", 2, 0, 100.0)
    group.members["a"] = member("a", 0)
    assert policy.name_for(held.get, "ns", spec, 101.0) == first, "still forming: joins it"
    second = policy.name_for(held.get, "ns", spec, 102.5)
    assert second != first, "its window closed (the array is being sent): the next one"
    group.members["b"] = member("b", 1)
    assert policy.name_for(held.get, "ns", spec, 100.5) == second, "full: the next one"


def test_a_pod_that_does_not_fit_the_forming_array_opens_the_next() -> None:
    """``fits`` is the caller's word that one more member keeps the array within one NATS message."""
    policy = ArrayPolicy(window_s=2.0, max_count=100)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 100)
    held: dict[str, PodGroup] = {}
    first = policy.name_for(held.get, "ns", spec, 100.0)
    held[group_key("ns", first)] = group = PodGroup("ns", first, "pool-a", 100, 0, 100.0)
    group.members["a"] = member("a", 0)
    assert policy.name_for(held.get, "ns", spec, 100.5, lambda g: True) == first
    second = policy.name_for(held.get, "ns", spec, 100.5, lambda g: g is not group)
    assert second != first, "the forming array takes no more: the next number"
    assert isinstance(policy.decide(group, 100.5), Hold), "the first is sent when its window ends, as any"


def test_pods_of_other_jobs_pools_or_batch_options_never_share_an_array() -> None:
    job = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=1000))
    base = array_spec(JobOfPod("j1", "scan", 0), "pool-a", job, 10).name
    assert array_spec(JobOfPod("j2", "scan", 0), "pool-a", job, 10).name != base
    assert array_spec(JobOfPod("j1", "scan", 0), "pool-b", job, 10).name != base
    other = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=2000))
    assert batch_shape(other) != batch_shape(job)
    assert array_spec(JobOfPod("j1", "scan", 0), "pool-a", other, 10).name != base
    script_only = pb.JobScript(script="echo other", resources=pb.ResourceRequest(cpu_millis=1000))
    assert batch_shape(script_only) == batch_shape(job), "each pod keeps its own script"


def test_the_submission_is_in_completion_index_order_each_with_its_place() -> None:
    policy = ArrayPolicy(window_s=2.0, max_count=10)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 10)
    group = PodGroup("ns", policy.name_for({}.get, "ns", spec, 0.0), "pool-a", 10, 0, 0.0)
    for uid, index in (("c", 2), ("a", 0), ("b", 1)):
        group.members[uid] = member(uid, index)
    jobs = policy.submission(group)
    assert [j.pod.uid for j in jobs if j.pod] == ["a", "b", "c"]
    uid = array_uid(group)
    for task, job in enumerate(jobs):
        assert job.array == pb.ArrayMember(
            array_uid=uid, job_name="scan", job_uid="j1", task=task, size=3, completion_index=task
        )
    assert all(m.job.array is None for m in group.members.values()), "the held jobs stay as they arrived"
    assert policy.kind == pb.GroupKind.ARRAY
    validate_array(jobs)  # what the gateway sends, the submitter takes


def array_members(n: int) -> list[pb.JobScript]:
    return [
        pb.JobScript(pod=pb.PodRef(uid=f"u{i}"), array=pb.ArrayMember(array_uid="a-1", task=i, size=n))
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: setattr(m[1].array, "task", 0), "members[1].array.task"),
        (lambda m: setattr(m[1].array, "array_uid", "a-2"), "members[1].array.array_uid"),
        (lambda m: setattr(m[0].array, "size", 5), "members[0].array.size"),
        (lambda m: setattr(m[1], "gang", pb.GangMember(group_uid="g")), "members[1].gang"),
        (lambda m: setattr(m[1], "array", None), "members[1].array"),
        (lambda m: setattr(m[1].pod, "uid", "u0"), "members[1].pod.uid"),
        (lambda m: setattr(m[0].array, "array_uid", "../x"), "members[0].array.array_uid"),
    ],
)
def test_a_malformed_array_request_is_refused_naming_the_field(change: Any, field: str) -> None:
    members = array_members(2)
    change(members)
    with pytest.raises(ValueError, match="^" + re.escape(field)):
        validate_array(members)


def test_an_array_larger_than_any_the_gateway_sends_is_refused_at_the_submitter() -> None:
    """Any client with the pool's credential may send a SubmitGroup: the bound holds there too, not only at the door."""
    from interlink_nats.kernel.pod_limits import GROUP_SIZE_MAX

    assert validate_array(array_members(GROUP_SIZE_MAX)) == "a-1"
    with pytest.raises(ValueError, match=r"^members: 1025 members, more than an array may have \(1024\)"):
        validate_array(array_members(GROUP_SIZE_MAX + 1))


def joined(policy: ArrayPolicy, group: PodGroup, uid: str, now: float) -> None:
    """A pod arriving at ``now`` into ``group`` (what ``PodGroupStore.add`` does to it)."""
    group.members[uid] = member(uid, len(group.members))
    group.last_at = max(group.last_at, now)


def test_pods_arriving_steadily_stay_one_array_until_a_quiet_window() -> None:
    """The window is a quiet one: pods every window/2, for three windows, all join the first array; it is sent
    once none arrived for the window. Before: the window counted from the first pod, so a Job's burst longer than
    the window made several arrays (11 for 1,000 pods created in 12.9 s)."""
    policy = ArrayPolicy(window_s=2.0, max_count=1000, max_wait_s=30.0)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 1000)
    held: dict[str, PodGroup] = {}
    name = policy.name_for(held.get, "ns", spec, 100.0)
    group = held[group_key("ns", name)] = PodGroup("ns", name, "pool-a", 1000, 0, 100.0)
    now = 100.0
    for i in range(13):  # 0 .. 6 s after the first: three windows long
        assert policy.name_for(held.get, "ns", spec, now) == name, f"pod {i} joins the forming array"
        joined(policy, group, f"u{i}", now)
        assert isinstance(policy.decide(group, now + 0.99), Hold)
        now += 1.0
    assert group.last_at == 112.0
    assert isinstance(policy.decide(group, 113.99), Hold), "not yet quiet for the window"
    assert isinstance(policy.decide(group, 114.0), SubmitAsOne), "quiet for the window: sent"
    assert policy.name_for(held.get, "ns", spec, 114.5) != name, "a pod after the gap opens the next array"


def test_the_longest_wait_bounds_an_array_whose_pods_keep_coming() -> None:
    policy = ArrayPolicy(window_s=2.0, max_count=1000, max_wait_s=5.0)
    group = PodGroup("ns", "scan:j1:pool-a:x:0", "pool-a", 1000, 0, 100.0)
    joined(policy, group, "u0", 100.0)
    for i in range(1, 5):
        joined(policy, group, f"u{i}", 100.0 + i)
        assert isinstance(policy.decide(group, 100.0 + i), Hold)
    assert policy.send_at(group) == 105.0, "never later than max_wait_s after the first"
    assert isinstance(policy.decide(group, 104.99), Hold)
    assert isinstance(policy.decide(group, 105.0), SubmitAsOne)


def test_a_held_array_members_status_says_until_when_at_most() -> None:
    policy = ArrayPolicy(window_s=2.0, max_count=10, max_wait_s=30.0)
    first = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    group = PodGroup("ns", "scan:j1:pool-a:x:0", "pool-a", 10, 0, first)
    joined(policy, group, "u0", first)
    joined(policy, group, "u1", first + 1.25)
    decision = policy.decide(group, first + 2)
    assert decision == Hold(
        "coalescing the pods of Job ns/scan into one array: 2 so far; sent at 2027-01-15T08:00:03.2Z unless more "
        "arrive within 2 s, at 2027-01-15T08:00:30.0Z at the latest"
    )


def test_a_group_stored_before_its_last_arrival_was_kept_counts_from_its_first() -> None:
    old = PodGroup("ns", "scan:j1:pool-a:x:0", "pool-a", 10, 0, 100.0)
    old.members["u0"] = member("u0", 0)
    text = old.to_json()
    assert "last_at" not in text
    back = PodGroup.from_json(text)
    assert back.last_at == 100.0 and back == old
    header, members = PodGroup.from_header(back.header_json())
    assert members is None and (header.first_at, header.last_at) == (100.0, 100.0)


def test_a_pod_joins_the_forming_array_even_when_an_earlier_one_was_sent_and_forgotten() -> None:
    """Before: the first free number was taken, so a pod arriving once array 0 was sent (and forgotten) while array
    1 formed opened a third array beside it."""
    policy = ArrayPolicy(window_s=2.0, max_count=100, max_wait_s=30.0)
    spec = array_spec(JobOfPod("j1", "scan", 0), "pool-a", pb.JobScript(), 100)
    held: dict[str, PodGroup] = {}
    names = [f"{spec.name}:{n}" for n in range(4)]
    for n in (1, 2):  # 1: sent, its reply not yet in; 2: forming
        group = held[group_key("ns", names[n])] = PodGroup("ns", names[n], "pool-a", 100, 0, 100.0 + n)
        joined(policy, group, f"u{n}", 100.0 + n)
    assert policy.name_for(held.get, "ns", spec, 103.5) == names[2]
    assert policy.name_for(held.get, "ns", spec, 104.5) == names[0], "none forming: the first free number"


def test_a_member_deleted_while_its_array_was_submitted_is_cancelled_not_tracked() -> None:
    submitting, deleted, done = Phase.SUBMITTING, Phase.DELETED, Phase.DONE
    rows = [
        MemberState("a", submitting, ""),  # waiting, its id recorded: tracked
        MemberState("b", submitting, ""),  # waiting, but its row was tombstoned while the backend submitted
        MemberState("c", deleted, ""),  # deleted before the submission, without an id: its task is cancelled
        MemberState("d", deleted, "7_3"),  # deleted with an id of its own: its own cancel stopped the task
        MemberState("e", done, ""),  # ended before it was submitted (its caller gave up): never to run
        MemberState("f", Phase.ACTIVE, "7_5"),  # recorded before: left as it is
    ]
    assert settle(rows, [0, 1], [True, False]) == ([0], [1, 2, 4])
    assert settle(rows, [0, 1], [True, True]) == ([0, 1], [2, 4])
    assert settle(rows[:2], [], []) == ([], [])
    with pytest.raises(ValueError, match="zip"):
        settle(rows, [0, 1], [True])
