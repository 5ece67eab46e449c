"""The gateway's compact pod record: what it keeps, what it writes to redis, what it reads back."""

from __future__ import annotations

import base64
import json

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.events import status_field
from interlink_nats.services.gateway.store import PodRecord

UID = "4f9e2c1a-0000-4000-8000-000000000001"


def running_status() -> pb.JobStatus:
    return pb.JobStatus(
        pod=pb.PodRef(uid=UID, namespace="default", name="hello"),
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
        created_at=1700000000.5,
    )


def test_a_record_survives_its_redis_encoding() -> None:
    original = record(running_status())
    restored = PodRecord.from_json(original.to_json())
    for attr in ("uid", "namespace", "name", "pool", "job_id", "revision", "created_at"):
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
