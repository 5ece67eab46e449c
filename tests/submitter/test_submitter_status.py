"""The pure status mapping: (backend observation, container files) → JobStatus, as data tables."""

from __future__ import annotations

import datetime as dt

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.status import (
    LOST_EXIT_CODE,
    ContainerFiles,
    JobMeta,
    cancelled_status,
    map_status,
    submit_failed_status,
)

B = BackendState
P = pb.ContainerPhase
S = pb.JobState
META = JobMeta("u1", "ns", "pod", "pool", "42", ("init",), ("main", "side"), "slurm")
NOW = 1_800_000_000.0


def done(code: int, start: float = NOW - 10, end: float = NOW - 5) -> ContainerFiles:
    return ContainerFiles(started_at=start, exit_code=code, finished_at=end)


RUN = ContainerFiles(started_at=NOW - 3)


def view(status: pb.JobStatus) -> list[tuple[str, P, int | None, str]]:
    return [(c.name, c.phase, c.exit_code, c.reason) for c in status.containers]


CASES = {
    "not at the backend yet: all waiting": (
        None,
        {},
        S.PENDING,
        [("init", P.WAITING, None, "Queued"), ("main", P.WAITING, None, "Queued"), ("side", P.WAITING, None, "Queued")],
    ),
    "queued in slurm": (
        Observation(B.QUEUED, reason="Priority"),
        {},
        S.PENDING,
        [("init", P.WAITING, None, "Queued"), ("main", P.WAITING, None, "Queued"), ("side", P.WAITING, None, "Queued")],
    ),
    "init running": (
        Observation(B.RUNNING),
        {"init": RUN},
        S.RUNNING,
        [
            ("init", P.RUNNING, None, ""),
            ("main", P.WAITING, None, "PodInitializing"),
            ("side", P.WAITING, None, "PodInitializing"),
        ],
    ),
    "mains running": (
        Observation(B.RUNNING),
        {"init": done(0), "main": RUN, "side": RUN},
        S.RUNNING,
        [("init", P.TERMINATED, 0, "Completed"), ("main", P.RUNNING, None, ""), ("side", P.RUNNING, None, "")],
    ),
    "one main finished while the other runs": (
        Observation(B.RUNNING),
        {"init": done(0), "main": done(0), "side": RUN},
        S.RUNNING,
        [("init", P.TERMINATED, 0, "Completed"), ("main", P.TERMINATED, 0, "Completed"), ("side", P.RUNNING, None, "")],
    ),
    "all succeeded": (
        Observation(B.COMPLETED, 0),
        {"init": done(0), "main": done(0), "side": done(0)},
        S.SUCCEEDED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 0, "Completed"),
            ("side", P.TERMINATED, 0, "Completed"),
        ],
    ),
    "a main failed: exact code from its file": (
        Observation(B.FAILED, 3),
        {"init": done(0), "main": done(3), "side": done(0)},
        S.FAILED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 3, "Error"),
            ("side", P.TERMINATED, 0, "Completed"),
        ],
    ),
    "failed init terminates the mains even while the job still runs": (
        Observation(B.RUNNING),
        {"init": done(7)},
        S.RUNNING,
        [
            ("init", P.TERMINATED, 7, "Error"),
            ("main", P.TERMINATED, 7, "InitContainerFailed"),
            ("side", P.TERMINATED, 7, "InitContainerFailed"),
        ],
    ),
    "failed init, job over": (
        Observation(B.FAILED, 7),
        {"init": done(7)},
        S.FAILED,
        [
            ("init", P.TERMINATED, 7, "Error"),
            ("main", P.TERMINATED, 7, "InitContainerFailed"),
            ("side", P.TERMINATED, 7, "InitContainerFailed"),
        ],
    ),
    "out of memory: 137 OOMKilled for what left no exit file": (
        Observation(B.OUT_OF_MEMORY, 0, 9, raw_state="OUT_OF_MEMORY"),
        {"init": done(0), "main": RUN, "side": done(0)},
        S.FAILED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 137, "OOMKilled"),
            ("side", P.TERMINATED, 0, "Completed"),
        ],
    ),
    "time limit: DeadlineExceeded; a container killed by it keeps its code": (
        Observation(B.TIMEOUT, raw_state="TIMEOUT"),
        {"init": done(0), "main": done(143), "side": RUN},
        S.FAILED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 143, "DeadlineExceeded"),
            ("side", P.TERMINATED, 143, "DeadlineExceeded"),
        ],
    ),
    "cancelled by the batch system": (
        Observation(B.CANCELLED, raw_state="CANCELLED by 0"),
        {"init": done(0), "main": RUN},
        S.CANCELLED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 143, "Cancelled"),
            ("side", P.TERMINATED, 143, "Cancelled"),
        ],
    ),
    "killed by a signal without exit files": (
        Observation(B.FAILED, None, 9),
        {"init": done(0)},
        S.FAILED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 137, "Error"),
            ("side", P.TERMINATED, 137, "Error"),
        ],
    ),
    "node failure": (
        Observation(B.NODE_FAIL),
        {},
        S.FAILED,
        [
            ("init", P.TERMINATED, 137, "NodeFailure"),
            ("main", P.TERMINATED, 137, "NodeFailure"),
            ("side", P.TERMINATED, 137, "NodeFailure"),
        ],
    ),
    "vanished, but every container left its exit file": (
        Observation(B.GONE),
        {"init": done(0), "main": done(0), "side": done(2)},
        S.FAILED,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, 0, "Completed"),
            ("side", P.TERMINATED, 2, "Error"),
        ],
    ),
    "vanished without exit files: LOST": (
        Observation(B.GONE),
        {"init": done(0), "main": RUN},
        S.LOST,
        [
            ("init", P.TERMINATED, 0, "Completed"),
            ("main", P.TERMINATED, LOST_EXIT_CODE, "Lost"),
            ("side", P.TERMINATED, LOST_EXIT_CODE, "Lost"),
        ],
    ),
}


@pytest.mark.parametrize(("obs", "files", "state", "containers"), CASES.values(), ids=CASES.keys())
def test_status_mapping(
    obs: Observation | None,
    files: dict[str, ContainerFiles],
    state: S,
    containers: list[tuple[str, P, int | None, str]],
) -> None:
    status = map_status(META, obs, files, now=NOW)
    assert status.state == state
    assert view(status) == containers
    assert status.pod == pb.PodRef(uid="u1", namespace="ns", name="pod")
    assert status.job_id == "42"
    assert [c.init for c in status.containers] == [True, False, False]


def test_every_container_is_reported_in_every_state() -> None:
    for obs, files, *_ in CASES.values():
        assert len(map_status(META, obs, files, now=NOW).containers) == 3


def test_reasons_and_messages_are_clear() -> None:
    oom = map_status(META, Observation(B.OUT_OF_MEMORY, raw_state="OUT_OF_MEMORY"), {}, now=NOW)
    assert oom.reason == "OOMKilled"
    assert "ran out of memory" in oom.message
    lost = map_status(META, Observation(B.GONE), {}, now=NOW)
    assert lost.reason == "Lost"
    assert "vanished" in lost.message
    assert "slurm job 42" in lost.message
    timeout = map_status(META, Observation(B.TIMEOUT, raw_state="TIMEOUT"), {}, now=NOW)
    assert (timeout.reason, timeout.state) == ("DeadlineExceeded", S.FAILED)
    failed_init = map_status(META, Observation(B.FAILED, 7), {"init": done(7)}, now=NOW)
    assert failed_init.reason == "InitContainerFailed"
    assert failed_init.message == "init container init failed with exit code 7"


def test_timestamps_come_from_the_files() -> None:
    status = map_status(
        META,
        Observation(B.COMPLETED, 0),
        {"init": done(0, NOW - 9, NOW - 8), "main": done(0), "side": done(0)},
        now=NOW,
    )
    init = status.containers[0]
    assert init.started_at is not None
    assert init.started_at.timestamp() == NOW - 9
    assert init.finished_at is not None
    assert init.finished_at.timestamp() == NOW - 8


def test_the_mapping_is_stable_between_polls() -> None:
    obs = Observation(B.RUNNING)
    files = {"init": done(0), "main": RUN}
    assert bytes(map_status(META, obs, files, now=NOW)) == bytes(map_status(META, obs, files, now=NOW + 60))


def test_cancel_keeps_finished_containers_and_terminates_the_rest() -> None:
    previous = map_status(META, Observation(B.RUNNING), {"init": done(0), "main": RUN}, now=NOW)
    status = cancelled_status(META, previous, now=NOW)
    assert status.state == S.CANCELLED
    assert view(status) == [
        ("init", P.TERMINATED, 0, "Completed"),
        ("main", P.TERMINATED, 143, "Cancelled"),
        ("side", P.TERMINATED, 143, "Cancelled"),
    ]
    finished = map_status(META, Observation(B.COMPLETED, 0), {n: done(0) for n in ("init", "main", "side")}, now=NOW)
    assert cancelled_status(META, finished, now=NOW).state == S.SUCCEEDED, "a finished job keeps its outcome"


def test_a_refused_submission_fails_every_container() -> None:
    status = submit_failed_status(META, "sbatch: error: Invalid partition", now=NOW)
    assert status.state == S.FAILED
    assert {c.phase for c in status.containers} == {P.TERMINATED}
    assert status.message == "sbatch: error: Invalid partition"


def test_an_unexplained_sigkill_says_so_instead_of_guessing_oom() -> None:
    killed = map_status(
        META, Observation(B.FAILED, 137), {"init": done(0), "main": done(137), "side": done(0)}, now=NOW
    )
    main = killed.containers[1]
    assert (main.exit_code, main.reason) == (137, "Error")
    assert "memory limit or by a kill from outside" in main.message and "did not say which" in main.message
    oom = map_status(META, Observation(B.OUT_OF_MEMORY), {"init": done(0), "main": done(137)}, now=NOW)
    assert (oom.containers[1].reason, oom.containers[1].message) == ("OOMKilled", "")
    plain = map_status(META, Observation(B.FAILED, 3), {"init": done(0), "main": done(3), "side": done(0)}, now=NOW)
    assert plain.containers[1].message == ""


# encode_status: the hand encoder a poll uses for every changed status -----------------------------------


def _statuses() -> list[pb.JobStatus]:
    """Statuses as polls map them, across states, exit codes, times and presence of every field."""
    import itertools

    out = []
    metas = [
        JobMeta("u-1", "ns", "näme", "pool", "123", (), ("main",), "slurm"),
        JobMeta("", "", "", "p", "", ("init",), ("a", "b"), "shell"),
    ]
    times = [None, 0.0, NOW + 0.123456, -5.5]
    codes = [None, 0, 1, -3, 255, 2**31 - 1]
    for k, (meta, state, code, started) in enumerate(itertools.product(metas, list(BackendState), codes, times)):
        obs = Observation(state, code, 9 if k % 3 else None, reason="Resources" if k % 2 else "", started_at=started)
        files = {
            n: ContainerFiles(started_at=started, exit_code=code, finished_at=NOW if k % 4 else None)
            for n in (*meta.init_containers, *meta.containers)[: 1 + k % 3]
        }
        status = map_status(meta, None if k % 11 == 0 else obs, files, now=NOW)
        if k % 5 == 0:
            status.updated_at = dt.datetime.fromtimestamp(NOW + k / 7, tz=dt.UTC)
        status.deleted = k % 7 == 0
        if k % 13 == 0:
            status.pod = None if k % 2 else pb.PodRef()
        out.append(status)
    return out


def test_encode_status_is_byte_for_byte_betterproto2() -> None:
    from interlink_nats.submitters.core.status import encode_status

    statuses = _statuses()
    assert len(statuses) > 500
    for status in statuses:
        assert encode_status(status) == bytes(status), status


def test_event_bytes_are_byte_for_byte_betterproto2() -> None:
    """The outbox publishes every change with it: same bytes as the generated class, big revisions included."""
    from interlink_nats.submitters.core.status import encode_status, event_bytes

    for i, status in enumerate(_statuses()[:200]):
        event = pb.JobEvent(status=status, revision=(1 << 63) + i if i % 50 == 0 else i, instance_id="sub-é" * (i % 3))
        assert event_bytes(encode_status(status), event.revision, event.instance_id) == bytes(event), event
    assert event_bytes(None, 0, "") == bytes(pb.JobEvent()) == b""


def test_stamp_status_is_encode_status_once_stamped() -> None:
    """A poll stamps the bytes it compared instead of encoding the status again: the same bytes as betterproto2
    once ``updated_at`` is set, with usage (every job's last status) or deleted or neither."""
    from interlink_nats.submitters.core.status import encode_status, stamp_status

    usages = [None, pb.JobUsage(), pb.JobUsage(1500, 2048, 0, 61_000, pb.UsageSource.ACCOUNTING)]
    for i, status in enumerate(_statuses()):
        status.usage = usages[i % 3]
        status.updated_at = None
        raw = encode_status(status)
        status.updated_at = dt.datetime.fromtimestamp(NOW + i / 7, tz=dt.UTC)
        assert stamp_status(raw, status) == bytes(status), status
    assert any(s.deleted for s in _statuses())


def test_outbox_event_is_the_job_event_on_the_wire() -> None:
    """What the outbox publishes is ``bytes(JobEvent)``, whether the poll handed it the status's bytes or not."""
    from interlink_nats.kernel.clock import SYSTEM_CLOCK
    from interlink_nats.submitters.core.status import encode_status
    from interlink_nats.submitters.state.outbox import Outbox

    outbox = Outbox(pool="p", subject_prefix="", instance_id="sub-1", clock=SYSTEM_CLOCK, registry=lambda: None)
    for i, status in enumerate(_statuses()[:200]):
        unstamped = None
        if i % 2 and not status.deleted:
            status.updated_at = None
            unstamped = encode_status(status)
        event = outbox.event(status, i, unstamped=unstamped)
        assert status.updated_at is not None
        assert event.data == bytes(pb.JobEvent(status=status, revision=i, instance_id="sub-1")), status
