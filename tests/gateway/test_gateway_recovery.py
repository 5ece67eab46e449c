"""The pod table after redis was lost: rebuilt records and the events still in the stream."""

from __future__ import annotations

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore


def status(state: pb.JobState) -> pb.JobStatus:
    phase = pb.ContainerPhase.TERMINATED if state == pb.JobState.SUCCEEDED else pb.ContainerPhase.RUNNING
    return pb.JobStatus(
        pod=pb.PodRef(uid="u1", namespace="d", name="p"),
        job_id="7",
        state=state,
        containers=[pb.ContainerStatus(name="main", phase=phase)],
    )


async def test_an_old_event_does_not_undo_a_final_status_rebuilt_from_list_jobs() -> None:
    store = PodStore()
    rebuilt = PodRecord(uid="u1", namespace="d", name="p", pool="a", job_id="7", containers=["main"])
    rebuilt.status = status(pb.JobState.SUCCEEDED)  # from ListJobs: no revision
    await store.put(rebuilt)
    assert store.apply_status("u1", status(pb.JobState.RUNNING), revision=2) is None
    record = store.get("u1")
    assert record is not None and record.is_final()
    later = store.apply_status("u1", status(pb.JobState.SUCCEEDED), revision=5)
    assert later is not None and later.revision == 5


async def test_events_still_move_a_live_pod_forward() -> None:
    store = PodStore()
    await store.put(PodRecord(uid="u1", namespace="d", name="p", pool="a", job_id="7", containers=["main"]))
    assert store.apply_status("u1", status(pb.JobState.RUNNING), revision=1) is not None
    assert store.apply_status("u1", status(pb.JobState.SUCCEEDED), revision=2) is not None
    assert store.apply_status("u1", status(pb.JobState.RUNNING), revision=1) is None
