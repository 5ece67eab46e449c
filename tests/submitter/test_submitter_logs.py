"""GetLogs ``since_time`` and ``timestamps``: the checkpoint index (pure), the shell submitter, the gateway."""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.jobdirs import logindex
from interlink_nats.submitters.jobdirs.logindex import Checkpoint, Stamper
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job

STAMP = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$")

# Pure --------------------------------------------------------------------------------------------


def test_parse_index_skips_torn_lines_and_checkpoints_behind_an_earlier_one() -> None:
    data = b"100 5\n200 9\nbogus\n150 7\n300 9\n400 12\n500 1"  # "500 1": a torn "500 1x" or a stale writer
    assert logindex.parse_index(data) == [Checkpoint(100, 5), Checkpoint(200, 9), Checkpoint(400, 12)]
    assert logindex.parse_index(b"") == []
    assert logindex.parse_index(logindex.format_checkpoint(Checkpoint(7, 3))) == [Checkpoint(7, 3)]


def test_since_offset_starts_after_the_last_checkpoint_at_or_before_since() -> None:
    index = [Checkpoint(100, 5), Checkpoint(200, 9), Checkpoint(300, 12)]
    assert logindex.since_offset(index, 50) == 0  # before anything was seen: everything
    assert logindex.since_offset(index, 100) == 5
    assert logindex.since_offset(index, 250) == 9
    assert logindex.since_offset(index, 10_000) == 12
    assert logindex.since_offset([], 10_000) == 0


def test_time_of_is_the_first_checkpoint_that_saw_the_byte() -> None:
    index = [Checkpoint(100, 5), Checkpoint(200, 9)]
    assert [logindex.time_of(index, o) for o in (0, 4, 5, 8, 9)] == [100, 100, 200, 200, None]


def test_rfc3339_nano_is_the_kubelet_format() -> None:
    assert logindex.rfc3339_nano(1_767_323_045_123_456_789) == "2026-01-02T03:04:05.123456789Z"
    assert logindex.rfc3339_nano(0) == "1970-01-01T00:00:00.000000000Z"


def test_stamper_prefixes_every_line_across_chunk_boundaries() -> None:
    index = [Checkpoint(1_000_000_000, 4), Checkpoint(2_000_000_000, 10)]
    s = Stamper(index, 0, fallback_ns=3_000_000_000)
    out = s.feed(b"ab\ncd") + s.feed(b"e\nfg\n") + s.feed(b"tail")
    assert out == (
        b"1970-01-01T00:00:01.000000000Z ab\n"
        b"1970-01-01T00:00:01.000000000Z cde\n"  # its first byte (offset 3) was seen first
        b"1970-01-01T00:00:02.000000000Z fg\n"
        b"1970-01-01T00:00:03.000000000Z tail"
    )  # beyond every checkpoint: the read time
    s.add(Checkpoint(4_000_000_000, 20))
    assert s.feed(b"\nx") == b"\n1970-01-01T00:00:04.000000000Z x"  # offset 15: first seen at the added one
    assert s.index[-1] == Checkpoint(4_000_000_000, 20)


def test_stamper_uses_the_added_checkpoint_for_later_bytes() -> None:
    s = Stamper([], 0, fallback_ns=5)
    s.add(Checkpoint(7, 3))
    assert s.feed(b"a\nbc\n") == b"1970-01-01T00:00:00.000000007Z a\n1970-01-01T00:00:00.000000007Z bc\n"


def test_record_appends_only_on_change_and_since_start_backs_up_to_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    assert logindex.record(log, 1, None) is None  # no log yet: nothing recorded
    log.write_bytes(b"one\ntw")
    assert logindex.record(log, 10, None) == 6
    assert logindex.record(log, 20, 6) == 6  # unchanged: no new line
    with log.open("ab") as fh:
        fh.write(b"o\nthree\n")
    assert logindex.record(log, 30, 6) == 14
    index = logindex.read_index(log)
    assert index == [Checkpoint(10, 6), Checkpoint(30, 14)]
    # since=15: 6 bytes were seen by then, mid-line "two": the whole line is kept (never drop newer bytes)
    assert logindex.since_start(log, index, 15) == 4
    assert logindex.since_start(log, index, 35) == 14
    assert logindex.since_start(log, index, 5) == 0
    index2, size = logindex.checkpoint_and_read(log, 40)
    assert size == 14 and index2 == index  # a reader adds nothing when nothing changed


# Through the shell submitter -------------------------------------------------------------------


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


async def _early_checkpointed(log: Path) -> bool:
    return any(cp.size >= len(b"early\n") for cp in logindex.read_index(log))


async def test_since_time_and_timestamps_through_the_shell_submitter(
    tmp_path: Path, nats_url: str, nc: nats.NATS
) -> None:
    pool = f"p{uuid.uuid4().hex[:10]}"
    state = tmp_path / "state"
    gate = tmp_path / "gate"
    async with Submitter(settings_for(state, nats_url, pool=pool)):
        client = submitter_client(nc, pool, timeout=30)
        u = str(uuid.uuid4())
        cmd = f"echo early; while [ ! -e {gate} ]; do sleep 0.05; done; echo late"
        await client.submit(pb.SubmitRequest(job=pod_job(u, {"main": cmd})))
        log = layout.log_path(state / "jobs" / u, "main")
        await wait_for(lambda: _early_checkpointed(log), what="the poll to checkpoint the first line")
        time.sleep(0.05)  # noqa: ASYNC251 - a strictly later wall-clock instant, nothing to wait for
        middle = dt.datetime.now(tz=dt.UTC)
        time.sleep(0.05)  # noqa: ASYNC251
        gate.touch()

        async def finished() -> bool:
            st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
            return st.state == pb.JobState.SUCCEEDED

        await wait_for(finished, what="the job to finish")

        async def logs(**kw: object) -> bytes:
            req = pb.GetLogsRequest(**{"pod_uid": u, "container": "main", **kw})  # type: ignore[arg-type]
            return b"".join([c.data async for c in client.get_logs(req)])

        assert await logs() == b"early\nlate\n"
        assert await logs(since_time=middle) == b"late\n"
        assert await logs(since_time=middle - dt.timedelta(hours=1)) == b"early\nlate\n"
        stamped = (await logs(timestamps=True)).splitlines()
        parsed = [STAMP.match(line) for line in stamped]
        assert all(parsed) and [m.group(2) for m in parsed if m] == [b"early", b"late"]
        times = [
            dt.datetime.strptime(m.group(1).decode()[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
            for m in parsed
            if m
        ]
        assert times[0] <= middle <= times[1]
        both = await logs(since_time=middle, timestamps=True)
        assert STAMP.match(both.rstrip(b"\n")) and both.endswith(b" late\n") and both.count(b"\n") == 1
        # The batch system's own output (job.out) has an index too: asking is never an error.
        assert isinstance(await logs(container="", timestamps=True), bytes)


# Through the gateway -----------------------------------------------------------------------------


async def test_since_time_and_timestamps_through_the_gateway(nats_url: str, tmp_path: Path) -> None:
    from stack import create_body, eventually, full_stack, logs_body, pod, terminated

    gate = tmp_path / "gate"
    async with full_stack(nats_url, tmp_path / "state") as stack:
        p = pod(containers={"main": ["sh", "-c", f"echo early; while [ ! -e {gate} ]; do sleep 0.05; done; echo late"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200
        log = layout.log_path(tmp_path / "state" / "jobs" / p["metadata"]["uid"], "main")
        await wait_for(lambda: _early_checkpointed(log), what="the poll to checkpoint the first line")
        time.sleep(0.05)  # noqa: ASYNC251
        middle = dt.datetime.now(tz=dt.UTC)
        time.sleep(0.05)  # noqa: ASYNC251
        gate.touch()

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="the container to finish")
        since = middle.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        only_late = await stack.get("/getLogs", logs_body(p, "main", SinceTime=since))
        assert only_late.status_code == 200 and only_late.text == "late\n"
        stamped = await stack.get("/getLogs", logs_body(p, "main", Timestamps=True))
        lines = stamped.content.splitlines()
        assert [m.group(2) for m in map(STAMP.match, lines) if m] == [b"early", b"late"]
        recent = await stack.get("/getLogs", logs_body(p, "main", SinceSeconds=3600, Timestamps=True))
        assert [m.group(2) for m in map(STAMP.match, recent.content.splitlines()) if m] == [b"early", b"late"]
