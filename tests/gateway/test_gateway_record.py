"""The gateway's compact pod record: what it keeps, what it writes to redis, what it reads back."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.event_wire import status_field
from interlink_nats.services.gateway.record import PodRecord

UID = "4f9e2c1a-0000-4000-8000-000000000001"


def running_status() -> pb.JobStatus:
    return pb.JobStatus(
        pod=pb.PodRef(uid=UID, namespace="default", name="hello"),
        pool="hpc",
        job_id="42",
        state=pb.JobState.RUNNING,
        containers=[
            pb.ContainerStatus(name="init", init=True, phase=pb.ContainerPhase.TERMINATED, exit_code=0),
            pb.ContainerStatus(name="main", phase=pb.ContainerPhase.RUNNING),
        ],
    )


def record(status: pb.JobStatus | None = None) -> PodRecord:
    return PodRecord(
        uid=UID,
        namespace="default",
        name="hello",
        pool="hpc",
        job_id="42",
        init_containers=["init"],
        containers=["main"],
        images={"init": "busybox", "main": "alpine:3"},
        status=status,
        revision=3,
    )


def test_a_record_survives_its_redis_encoding() -> None:
    original = record(running_status())
    restored = PodRecord.from_json(original.to_json())
    for attr in ("uid", "namespace", "name", "pool", "job_id", "revision"):
        assert getattr(restored, attr) == getattr(original, attr)
    assert list(restored.init_containers) == ["init"]
    assert list(restored.containers) == ["main"]
    assert restored.images == {"init": "busybox", "main": "alpine:3"}
    assert restored.status == running_status()
    assert restored.state is pb.JobState.RUNNING
    assert restored.status_json() == original.status_json()


def test_a_record_written_before_the_state_was_stored_beside_the_status_reads_its_state() -> None:
    data = json.loads(record().to_json())
    final = pb.JobStatus(job_id="42", state=pb.JobState.SUCCEEDED)
    data["status"] = base64.b64encode(bytes(final)).decode()
    del data["state"]
    restored = PodRecord.from_json(json.dumps(data))
    assert restored.state is pb.JobState.SUCCEEDED
    assert restored.is_final()


def test_a_status_is_kept_without_what_the_record_holds_and_read_back_whole() -> None:
    status = running_status()
    pod = record(status)
    kept = pod._status or b""
    assert UID.encode() not in kept and b"hpc" not in kept and b"42" not in kept
    assert len(kept) < len(bytes(status)) - len(UID)
    assert pod.status == status
    assert PodRecord.from_json(pod.to_json()).status == status


def test_a_status_of_only_what_the_record_holds_survives_redis() -> None:
    """Its stored body is empty (pod, pool and job id are the record's; its state the default): a restart
    must still find a status, not none."""
    pending = pb.JobStatus(pod=pb.PodRef(uid=UID, namespace="default", name="hello"), pool="hpc", job_id="42")
    pod = record(pending)
    assert pod._status == b""
    restored = PodRecord.from_json(pod.to_json())
    assert restored.status == pending
    assert restored.state is pod.state is pb.JobState.UNSPECIFIED


def test_a_record_written_with_the_whole_status_is_read_and_kept_without_the_identity() -> None:
    data = json.loads(record().to_json())
    data["status"] = base64.b64encode(bytes(running_status())).decode()  # as gateways wrote it before
    del data["status_body"]
    restored = PodRecord.from_json(json.dumps(data))
    assert restored.status == running_status()
    assert UID.encode() not in (restored._status or b"")
    assert json.loads(restored.to_json())["status_body"]


def test_a_new_status_replaces_the_cached_pod_status() -> None:
    pod = record()
    waiting = json.loads(pod.status_json_bytes())
    assert waiting == pod.status_json()
    assert waiting["containers"][0]["state"] == {"waiting": {"reason": "Submitted"}}
    assert not pod.is_final()
    pod.status = running_status()
    running = json.loads(pod.status_json_bytes())
    assert running["containers"][0]["state"]["running"] == {}
    assert running["containers"][0]["image"] == "alpine:3"
    pod.status = pb.JobStatus(job_id="42", state=pb.JobState.FAILED, containers=running_status().containers)
    assert pod.is_final()


def test_records_share_the_strings_many_pods_repeat() -> None:
    a, b = PodRecord.from_json(record().to_json()), PodRecord.from_json(record().to_json())
    assert a.namespace is b.namespace and a.pool is b.pool
    assert a.containers[0] is b.containers[0]
    assert a.images["main"] is b.images["main"]


def test_an_events_status_is_kept_as_the_bytes_it_came_in() -> None:
    status = running_status()
    event = bytes(pb.JobEvent(status=status, revision=300, instance_id="submitter-1"))
    assert status_field(event) == bytes(status)
    assert pb.JobStatus.parse(status_field(event) or b"") == status


def test_an_event_without_exactly_one_status_gives_no_bytes() -> None:
    event = bytes(pb.JobEvent(status=running_status(), revision=2))
    assert status_field(bytes(pb.JobEvent(revision=2))) is None
    assert status_field(event + bytes(pb.JobEvent(status=pb.JobStatus(job_id="9")))) is None  # merged on parse
    assert status_field(event[:-1]) is None  # truncated


_timestamps = st.one_of(
    st.none(),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)),
)
_containers = st.builds(
    pb.ContainerStatus,
    name=st.text(max_size=12),
    init=st.booleans(),
    phase=st.sampled_from(list(pb.ContainerPhase)),
    exit_code=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    started_at=_timestamps,
    finished_at=_timestamps,
    reason=st.text(max_size=12),
    message=st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(
    containers=st.lists(_containers, max_size=4),
    reason=st.text(max_size=8),
    updated_at=_timestamps,
    deleted=st.booleans(),
)
def test_the_cached_answer_read_from_the_encoded_status_is_the_decoded_one(
    containers: list[pb.ContainerStatus], reason: str, updated_at: datetime | None, deleted: bool
) -> None:
    status = pb.JobStatus(
        pod=pb.PodRef(uid=UID, namespace="default", name="hello"),
        pool="hpc",
        job_id="42",
        state=pb.JobState.RUNNING,
        containers=containers,
        reason=reason,
        updated_at=updated_at,
        deleted=deleted,
    )
    pod = PodRecord.from_json(record(status).to_json())
    assert json.loads(pod.status_json_bytes()) == pod.status_json()


def test_an_encoded_status_the_direct_reader_cannot_read_fails_as_the_decoded_answer_does() -> None:
    pod = record(running_status())
    pod._set_status(bytes(running_status()) + b"\x2a\x05\x0a", pb.JobState.RUNNING)  # a truncated container
    with pytest.raises(EOFError):
        pod.status_json()
    with pytest.raises(EOFError):  # no answer made up from half a status: betterproto's error, as before
        pod.status_json_bytes()
