"""The gateway's JobEvent reader agrees with betterproto2, and hands every unusual event back to it.

What it reads of a plain event (pod UID, revision, state, job id, the status's bytes) must be what betterproto2
parses; whatever it reads must decode with betterproto2 later (``/status`` decodes the stored bytes).
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.event_wire import read_event

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
TIMES = st.one_of(
    st.none(),
    st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)),
)
containers = st.builds(
    pb.ContainerStatus,
    name=TEXT,
    init=st.booleans(),
    phase=st.sampled_from(list(pb.ContainerPhase)),
    exit_code=st.one_of(st.none(), st.integers(min_value=-(2**31), max_value=2**31 - 1)),
    started_at=TIMES,
    finished_at=TIMES,
    reason=TEXT,
    message=TEXT,
)
statuses = st.builds(
    pb.JobStatus,
    pod=st.one_of(st.none(), st.builds(pb.PodRef, uid=TEXT, namespace=TEXT, name=TEXT)),
    pool=TEXT,
    job_id=TEXT,
    state=st.sampled_from(list(pb.JobState)),
    containers=st.lists(containers, max_size=3),
    reason=TEXT,
    message=TEXT,
    updated_at=TIMES,
    deleted=st.booleans(),
)
events = st.builds(
    pb.JobEvent,
    status=st.one_of(st.none(), statuses),
    revision=st.integers(min_value=0, max_value=2**64 - 1),
    instance_id=TEXT,
)


@settings(max_examples=400, deadline=None)
@given(events)
def test_a_plain_event_reads_as_betterproto2_parses_it(event: pb.JobEvent) -> None:
    data = bytes(event)
    view = read_event(data)
    status = event.status
    if status is None or status.pod is None or not status.pod.uid:
        assert view is None  # betterproto2's path drops it, and says why
        return
    assert view is not None
    assert (view.uid, view.revision, view.state, view.job_id) == (
        status.pod.uid,
        event.revision,
        status.state,
        status.job_id,
    )
    assert pb.JobStatus.parse(view.status) == status
    assert view.status == bytes(status)


def plain() -> bytes:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    status = pb.JobStatus(
        pod=pb.PodRef(uid="u-1", namespace="n", name="p"),
        job_id="42",
        state=pb.JobState.SUCCEEDED,
        containers=[pb.ContainerStatus(name="main", phase=pb.ContainerPhase.TERMINATED, exit_code=0, finished_at=now)],
        updated_at=now,
    )
    return bytes(pb.JobEvent(status=status, revision=3, instance_id="i"))


def test_the_plain_shape_is_read() -> None:
    view = read_event(plain())
    assert view is not None and (view.uid, view.revision, view.state, view.job_id) == ("u-1", 3, 3, "42")


@pytest.mark.parametrize(
    "data",
    [
        plain() + b"\x20\x01",  # an unknown field
        plain() + b"\x10\x04",  # the revision twice
        plain() + bytes(pb.JobEvent(status=pb.JobStatus(pod=pb.PodRef(uid="u-2")))),  # the status twice
        plain()[:20],  # cut short, inside the status
        b"\x0a\x05\x0a\x03\x0a\x01\xff",  # a UID that is not UTF-8
        bytes(pb.JobEvent(status=pb.JobStatus(pod=pb.PodRef(uid="u"), state=9))),  # a state not in the enum
        bytes(
            pb.JobEvent(status=pb.JobStatus(pod=pb.PodRef(uid="u"), updated_at=dt.datetime(1960, 1, 1, tzinfo=dt.UTC)))
        ),
        b"\x0a\x04\x0a\x02\x0a\x00\x11" + bytes(8),  # a fixed64 field
    ],
)
def test_an_unusual_event_is_left_to_betterproto2(data: bytes) -> None:
    assert read_event(data) is None
