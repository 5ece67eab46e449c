"""The gateway's own SubmitRequest encoder and SubmitResponse reader give exactly betterproto2's bytes and values.

The wire must not change (P1): every check compares with the generated classes, on rendered pods
and on generated edge cases (empty and unicode strings, negative and huge int64s, durations, empty messages).
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.pool_client import SUBMIT_ROUTE
from interlink_nats.services.gateway.submit_wire import decode_submit_response, encode_submit_request
from interlink_nats.services.scripts import render_job

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


def pod_data(**spec: object) -> dict[str, object]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "n", "uid": "6f1c2e9a-1111-2222-3333-444455556666"},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}], **spec},
        }
    }


@pytest.mark.parametrize(
    "data",
    [
        pod_data(),
        pod_data(activeDeadlineSeconds=90),
        pod_data(
            initContainers=[{"name": "init", "image": "busybox", "command": ["echo", "é"]}],
            containers=[
                {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}},
                {"name": "b", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            ],
        ),
    ],
)
def test_a_rendered_job_encodes_as_betterproto2_does(data: dict[str, object]) -> None:
    job = render_job(data, pb.BuildConfig(runtime=pb.ContainerRuntime.APPTAINER, gpu_support=True))
    assert encode_submit_request(job) == bytes(pb.SubmitRequest(job=job))


durations = st.one_of(
    st.none(),
    st.timedeltas(min_value=dt.timedelta(days=-(10**5)), max_value=dt.timedelta(days=10**5)),
)
pod_refs = st.one_of(st.none(), st.builds(pb.PodRef, uid=TEXT, namespace=TEXT, name=TEXT))
resources = st.one_of(
    st.none(), st.builds(pb.ResourceRequest, cpu_millis=INT64, memory_bytes=INT64, gpus=INT64, wall_time=durations)
)
jobs = st.builds(
    pb.JobScript,
    pod=pod_refs,
    script=st.text(max_size=300).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)),
    init_containers=st.lists(TEXT, max_size=3),
    containers=st.lists(TEXT, max_size=3),
    resources=resources,
    backend_flags=st.lists(TEXT, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(jobs)
def test_any_job_encodes_as_betterproto2_does(job: pb.JobScript) -> None:
    assert encode_submit_request(job) == bytes(pb.SubmitRequest(job=job))


def test_an_int64_below_its_range_is_refused_as_betterproto2_refuses_it() -> None:
    job = pb.JobScript(resources=pb.ResourceRequest(cpu_millis=-(2**63) - 1))
    with pytest.raises(ValueError, match="64-bit"):
        bytes(pb.SubmitRequest(job=job))
    with pytest.raises(ValueError, match="64-bit"):
        encode_submit_request(job)


statuses = st.one_of(
    st.none(),
    st.builds(
        pb.JobStatus,
        job_id=TEXT,
        state=st.sampled_from(list(pb.JobState)),
        reason=TEXT,
        containers=st.lists(
            st.builds(
                pb.ContainerStatus,
                name=TEXT,
                init=st.booleans(),
                exit_code=st.one_of(st.none(), INT64.map(lambda v: v % 256)),
            ),
            max_size=2,
        ),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.builds(pb.SubmitResponse, job_id=TEXT, created=st.booleans(), status=statuses))
def test_a_reply_reads_as_betterproto2_reads_it(response: pb.SubmitResponse) -> None:
    data = bytes(response)
    reply = decode_submit_response(data)
    parsed = pb.SubmitResponse.parse(data)
    assert (reply.job_id, reply.created, reply.status) == (parsed.job_id, parsed.created, parsed.status)
    assert reply.status_bytes == (None if response.status is None else bytes(response.status))


def test_a_reply_skips_fields_it_does_not_know_and_keeps_the_last_of_a_repeated_field() -> None:
    unknown = b"\x20\x07" + b"\x2a\x03abc" + b"\x31" + bytes(8) + b"\x3d" + bytes(4)  # fields 4..7, each wire type
    first = bytes(pb.SubmitResponse(job_id="1", status=pb.JobStatus(job_id="1", reason="r")))
    second = bytes(pb.SubmitResponse(job_id="2", status=pb.JobStatus(state=pb.JobState.RUNNING)))
    data = first + unknown + second
    reply = decode_submit_response(data)
    parsed = pb.SubmitResponse.parse(data)
    assert reply.job_id == parsed.job_id == "2"
    assert reply.status == parsed.status == pb.JobStatus(state=pb.JobState.RUNNING)  # betterproto2 does not merge


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # a string cut short
        b"\x0a",  # a key with nothing after it
        b"\x08\x01",  # job_id as a varint
        b"\x12\x00",  # created as bytes
        b"\x0b",  # a group start
        b"\x10" + b"\xff" * 11,  # a varint longer than ten bytes
        b"\x0a\x01\xff",  # job_id not UTF-8
    ],
)
def test_a_reply_that_is_not_a_submit_response_is_refused(data: bytes) -> None:
    with pytest.raises((ValueError, IndexError)):
        decode_submit_response(data)


def test_the_submit_route_is_the_services() -> None:
    assert SUBMIT_ROUTE in pb.SubmitterServiceBase().__mapping__()
