"""The submitter's fastwire codec: it encodes and decodes exactly as betterproto does.

What it cannot decode by hand (an unusual submit request) it leaves to betterproto.
"""

from __future__ import annotations

import datetime as dt

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb


@pytest.mark.parametrize(
    "resources",
    [
        {},
        {"cpu_millis": 1500, "memory_bytes": 2**40, "gpus": 1},
        {"cpu_millis": -1, "gpus": -(2**63)},
        {"memory_bytes": 2**63 - 1, "wall_time": dt.timedelta(hours=2, microseconds=5)},
    ],
)
def test_fastwire_encodes_a_specs_resources_exactly_as_betterproto_does(resources: dict[str, object]) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    job = pb.JobScript(pod=pb.PodRef(uid="u"), containers=["c"], resources=pb.ResourceRequest(**resources))  # type: ignore[arg-type]
    assert fastwire.job_spec(job) == bytes(job)


@pytest.mark.parametrize(
    "resp",
    [
        pb.SubmitResponse(),
        pb.SubmitResponse(job_id="6f1c2e9a-1111-2222-3333-444455556666", created=True),
        pb.SubmitResponse(job_id="12345", created=False),
        pb.SubmitResponse(created=True),
        pb.SubmitResponse(job_id="é" * 200, created=True),
        pb.SubmitResponse(job_id="7", status=pb.JobStatus(job_id="7", state=pb.JobState.RUNNING, pool="p")),
    ],
    ids=["empty", "created", "known", "no-id", "long-id", "with-status"],
)
def test_fastwire_encodes_a_submit_reply_exactly_as_betterproto_does(resp: pb.SubmitResponse) -> None:
    from interlink_nats.submitters.core import fastwire

    assert fastwire.submit_response(resp) == bytes(resp)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {
            "init": {"i": "true"},
            "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "annotations": {"slurm-job.vk.io/flags": "--qos=x -N 2"},
            "namespace": "ns-é",
            "name": "ü" * 200,
        },
    ],
)
def test_fastwire_encodes_exactly_what_betterproto_does(kw: dict[str, object]) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire
    from interlink_nats.submitters.core.status import JobMeta, map_status
    from jobs import pod_job

    kw = dict(kw)
    ref = {k: kw.pop(k) for k in ("namespace", "name") if k in kw}
    job = pod_job("u-1", {"a": "true", "b": "false"}, **kw)  # type: ignore[arg-type]
    for key, value in ref.items():  # names the gateway refuses, as any NATS client may send them
        setattr(job.pod, key, value)
    spec = pb.JobScript(
        pod=job.pod,
        init_containers=job.init_containers,
        containers=job.containers,
        resources=job.resources,
        backend_flags=job.backend_flags,
        layout=job.layout,
    )
    assert fastwire.job_spec(job) == bytes(spec)
    assert pb.JobScript.parse(fastwire.job_spec(job)) == spec
    meta = JobMeta(
        job.pod.uid,
        job.pod.namespace,
        job.pod.name,
        "pool-a",
        "",
        tuple(job.init_containers),
        tuple(job.containers),
        "shell",
    )
    assert fastwire.pending_status(
        job.pod.uid, job.pod.namespace, job.pod.name, "pool-a", job.init_containers, job.containers
    ) == bytes(map_status(meta, None, {}, now=0.0))


def _plain_submit_requests() -> list[bytes]:
    """Encodings as every client sends them (betterproto2's own)."""
    from interlink_nats.gen.interlink_nats import v1 as pb
    from jobs import pod_job

    rendered = pod_job("u-1", {"a": "true", "b": "false"}, init={"i": "true"})
    rendered.pod.namespace, rendered.pod.name = "ns-é", "ü" * 200  # as any NATS client may send them
    messages = [
        pb.SubmitRequest(job=pb.JobScript()),
        pb.SubmitRequest(job=pb.JobScript(pod=pb.PodRef())),
        pb.SubmitRequest(job=rendered),
        pb.SubmitRequest(job=pod_job("u-2", {"main": "true"}, limits={"cpu": "2", "memory": "1Gi"})),
        pb.SubmitRequest(
            job=pb.JobScript(
                pod=pb.PodRef(uid="u", name="n"),
                script="x" * 70_000,
                containers=["", "c"],
                init_containers=[""],
                resources=pb.ResourceRequest(),
                backend_flags=["", "--qos=x"],
            )
        ),
    ]
    return [bytes(m) for m in messages]


def _frame(number: int, payload: bytes) -> bytes:
    """A length-delimited field (lengths < 128 only: one byte)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _unusual_submit_requests() -> list[bytes]:
    """Encodings the hand decoder leaves to betterproto2 (valid or not)."""
    from interlink_nats.gen.interlink_nats import v1 as pb

    job = bytes(pb.JobScript(pod=pb.PodRef(uid="u"), script="s", containers=["c"]))
    jobs = [
        job + _frame(2, b"t"),  # the script twice: the last wins
        job + _frame(1, _frame(1, b"v")),  # the pod twice
        job + _frame(7, b"z"),  # an unknown field
        job + b"\x40\x01",  # an unknown varint field
        _frame(1, _frame(4, b"n") + b"\x20\x01"),  # an unknown varint field in the pod
        _frame(2, b"\xc3\x28"),  # invalid UTF-8 in the script
        _frame(1, _frame(3, b"\xff\xfe")),  # invalid UTF-8 in the pod's name
    ]
    return [
        *(_frame(1, j) for j in jobs),
        b"",  # no job at all
        _frame(1, job) * 2,  # the job twice
        _frame(2, b""),  # an unknown field of SubmitRequest
    ]


@pytest.mark.parametrize("data", _plain_submit_requests())
def test_fastwire_decodes_a_plain_submit_request_by_hand_exactly_as_betterproto_does(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    expected = pb.SubmitRequest.FromString(data)

    def not_here(cls: object, data: bytes) -> None:
        raise AssertionError("a plain request is decoded by hand")

    monkeypatch.setattr(pb.SubmitRequest, "parse", classmethod(not_here))
    got = fastwire.submit_request(data)
    assert got == expected
    assert bytes(got) == data


@pytest.mark.parametrize("data", _unusual_submit_requests())
def test_fastwire_leaves_an_unusual_submit_request_to_betterproto(data: bytes) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    try:
        expected = pb.SubmitRequest.FromString(data)
    except Exception as exc:  # the same error, from the same parser
        with pytest.raises(type(exc)):
            fastwire.submit_request(data)
        return
    got = fastwire.submit_request(data)
    assert got == expected
    assert bytes(got) == bytes(expected)


@pytest.mark.parametrize("ready", [None, False, True])
def test_an_optional_bool_is_encoded_as_betterproto_does_false_included(ready: bool | None) -> None:
    """``ContainerStatus.ready`` (readiness probes): an ``optional bool`` set to false is on the wire, as false."""
    from interlink_nats.gen.interlink_nats.v1 import fastwire as codec
    from interlink_nats.submitters.core.status import encode_status

    status = pb.JobStatus(containers=[pb.ContainerStatus(name="c", phase=pb.ContainerPhase.RUNNING, ready=ready)])
    raw = encode_status(status)
    assert raw == bytes(status)
    assert pb.JobStatus.parse(raw).containers[0].ready is ready
    view = codec.read_job_status(raw)
    assert view is not None and view.containers[0].ready is ready
