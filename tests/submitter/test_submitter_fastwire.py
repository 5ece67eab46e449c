"""The submitter's fastwire codec: it encodes and decodes exactly as betterproto does.

What it cannot decode by hand (an unusual submit request) it leaves to betterproto.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
        job + b"\xf0\x01\x01",  # an unknown varint field (30: 8 is run_as_user now)
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


def _rich_submit_request() -> bytes:
    """A plain SubmitRequest with every kind of field the Submit decoder reads: nested messages, repeated ones,
    enums, optional numbers, a duration."""
    return bytes(
        pb.SubmitRequest(
            job=pb.JobScript(
                pod=pb.PodRef(uid="u-1", namespace="ns", name="p"),
                script="#!/bin/bash\ntrue\n",
                init_containers=["i"],
                containers=["main", "side"],
                resources=pb.ResourceRequest(
                    cpu_millis=1500, memory_bytes=2**33, gpus=1, wall_time=dt.timedelta(minutes=5)
                ),
                backend_flags=["--qos=x"],
                layout=[
                    pb.LayoutEntry(path="volumes/a", kind=pb.LayoutEntryKind.DIRECTORY, mode=0o700),
                    pb.LayoutEntry(path="rootfs/a", kind=pb.LayoutEntryKind.SYMLINK, target="volumes/a"),
                ],
                run_as_user=1000,
                run_as_group=1000,
                gang=pb.GangMember(group_uid="g", group_name="gang"),
                array=pb.ArrayMember(array_uid="a", job_name="job"),
                storage=[pb.StorageMount(field="data", claim="claim")],
            )
        )
    )


@pytest.mark.parametrize("data", [_rich_submit_request(), *_plain_submit_requests()])
def test_fastwire_decodes_a_plain_submit_request_by_hand_exactly_as_betterproto_does(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlink_nats.submitters.core import fastwire

    expected = pb.SubmitRequest.FromString(data)

    def not_here(cls: object, data: bytes) -> None:
        raise AssertionError("a plain request is decoded by hand")

    monkeypatch.setattr(pb.SubmitRequest, "parse", classmethod(not_here))
    got = fastwire.plain_submit_request(data)
    assert got == expected
    assert got is not None and bytes(got) == data


@pytest.mark.parametrize("data", _unusual_submit_requests())
def test_fastwire_leaves_an_unusual_submit_request_to_betterproto(data: bytes) -> None:
    """The submitter's plain reading takes none of these (b"" is plainly an empty request), so the RPC server's
    strict check and betterproto2 read them; the generated full decoder gives betterproto2's result or error."""
    from interlink_nats.gen.interlink_nats.v1.fastwire import decode_submit_request
    from interlink_nats.submitters.core import fastwire

    if data:
        assert fastwire.plain_submit_request(data) is None
    try:
        expected = pb.SubmitRequest.FromString(data)
    except Exception as exc:  # the same error, from the same parser
        with pytest.raises(type(exc)):
            decode_submit_request(data)
        return
    got = decode_submit_request(data)
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


_MUTATED_BASES = [_rich_submit_request(), *_plain_submit_requests()[:4]]


@settings(max_examples=1500, deadline=None)
@given(
    base=st.sampled_from(_MUTATED_BASES),
    where=st.integers(min_value=0),
    how=st.sampled_from(["cut", "set", "insert", "drop"]),
    byte=st.integers(min_value=0, max_value=255),
)
def test_what_the_plain_decoder_takes_passes_the_strict_check(base: bytes, where: int, how: str, byte: int) -> None:
    """The RPC server skips its strict wire check for bytes the plain decoder takes (``decoders``): so whatever
    it takes, however damaged, must pass that check and decode to exactly what betterproto2 reads."""
    from interlink_nats.gen.interlink_nats.v1.fastwire import decode_plain_submit_request
    from interlink_nats.services.bus.rpc import strict

    at = where % (len(base) + 1)
    data = {
        "cut": base[:at],
        "set": base[:at] + bytes([byte]) + base[at + 1 :],
        "insert": base[:at] + bytes([byte]) + base[at:],
        "drop": base[:at] + base[at + 1 :],
    }[how]
    taken = decode_plain_submit_request(data)
    if taken is None:
        return
    strict.check(data, pb.SubmitRequest)
    assert taken == pb.SubmitRequest.FromString(data)
