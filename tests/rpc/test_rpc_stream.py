"""Server streaming over a real nats-server: order, flow control, end marker, errors, cancellation."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats.v1 import (
    GetLogsRequest,
    GetLogsResponse,
    SubmitterServiceBase,
)
from interlink_nats.kernel.subjects import rpc_subject
from interlink_nats.services.bus.rpc import CONTROL, END, STATUS, WINDOW, RpcServer, submitter_client
from nats.aio.client import Client as NATS

SECRET = "stack trace with /etc/secret"


class LogSource(SubmitterServiceBase):
    """Streams ``tail_lines`` numbered chunks (all of them when unset: forever), as configured by the test."""

    def __init__(self) -> None:
        self.chunk = b"x" * 100
        self.fail_after: int | None = None
        self.error: BaseException | None = None
        self.stall = 0.0
        self.produced = 0
        self.consumed = 0  # advanced by the test's reader, to measure how far the server runs ahead
        self.max_lead = 0
        self.cancelled = asyncio.Event()
        self.finished = asyncio.Event()

    async def get_logs(self, message: GetLogsRequest) -> AsyncIterator[GetLogsResponse]:
        try:
            if self.stall:
                await asyncio.sleep(self.stall)
            i = 0
            while message.tail_lines is None or i < message.tail_lines:
                if self.fail_after is not None and i == self.fail_after:
                    assert self.error is not None
                    raise self.error
                self.max_lead = max(self.max_lead, i - self.consumed)
                self.produced += 1
                yield GetLogsResponse(data=self.chunk, offset=i)
                i += 1
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.finished.set()


@pytest.fixture
def pool() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def source() -> LogSource:
    return LogSource()


@pytest.fixture
async def server(server_nc: NATS, source: LogSource, pool: str) -> AsyncIterator[RpcServer]:
    rpc = RpcServer(server_nc, [source], pool=pool, stream_window=8, stream_idle_timeout=1.0)
    await rpc.start()
    yield rpc
    await rpc.stop(grace_s=1)


async def eventually(predicate: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - polling state the code under test owns
            await asyncio.sleep(0.01)


async def test_many_chunks_arrive_complete_and_in_order(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    stub = submitter_client(client_nc, pool, timeout=60)
    offsets = [chunk.offset async for chunk in stub.get_logs(GetLogsRequest(tail_lines=3000))]
    assert offsets == list(range(3000))
    await eventually(lambda: server.in_flight == 0)


async def test_slow_reader_is_never_overrun(server: RpcServer, source: LogSource, client_nc: NATS, pool: str) -> None:
    source.chunk = b"y" * 32_000
    stub = submitter_client(client_nc, pool, timeout=60)
    offsets = []
    async for chunk in stub.get_logs(GetLogsRequest(tail_lines=200)):
        offsets.append(chunk.offset)
        assert chunk.data == source.chunk
        source.consumed = len(offsets)
        await asyncio.sleep(0.002 if len(offsets) % 10 else 0.05)  # slow, with pauses

    assert offsets == list(range(200))
    # The server never got more than its window (8) ahead of what the reader had taken.
    assert source.max_lead <= 8 + 1
    assert source.max_lead >= 4  # and it did run ahead: the window is used, not a lock-step


async def test_a_client_window_bounds_how_far_the_server_runs_ahead(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    """``Rpc-Window`` on the request: a client bounds its own memory below the server's window (8 here)."""
    stub = submitter_client(client_nc, pool, timeout=60, stream_window=2)
    offsets = []
    async for chunk in stub.get_logs(GetLogsRequest(tail_lines=60)):
        offsets.append(chunk.offset)
        source.consumed = len(offsets)
        await asyncio.sleep(0.002 if len(offsets) % 10 else 0.05)
    assert offsets == list(range(60))
    assert source.max_lead <= 2 + 1


async def test_a_bad_client_window_is_rejected_with_the_open_message_first(
    server: RpcServer, client_nc: NATS, pool: str
) -> None:
    inbox = client_nc.new_inbox()
    sub = await client_nc.subscribe(inbox)
    await client_nc.flush()
    await client_nc.publish(rpc_subject("GetLogs", pool), b"", reply=inbox, headers={WINDOW: "-1"})
    opened = await sub.next_msg(timeout=10)
    assert opened.headers is not None and opened.headers[WINDOW] == "8" and CONTROL in opened.headers
    end = await sub.next_msg(timeout=10)
    assert end.headers is not None and end.headers[END] == "1" and end.headers[STATUS] == "3"
    await sub.unsubscribe()
    with pytest.raises(ValueError, match="stream_window"):
        submitter_client(client_nc, pool, stream_window=0)


async def test_empty_stream_ends_cleanly(server: RpcServer, client_nc: NATS, pool: str) -> None:
    stub = submitter_client(client_nc, pool)
    assert [c async for c in stub.get_logs(GetLogsRequest(tail_lines=0))] == []


async def test_early_break_cancels_the_server_handler(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    stub = submitter_client(client_nc, pool, timeout=60)
    received = []
    async for chunk in stub.get_logs(GetLogsRequest()):  # endless
        received.append(chunk.offset)
        if len(received) == 3:
            break

    # The handler task is cancelled; the generator sees CancelledError if it was awaiting, or is
    # closed (GeneratorExit) if it sat at a yield while the server waited for credit.
    await asyncio.wait_for(source.finished.wait(), 10)
    assert received == [0, 1, 2]
    await eventually(lambda: server.in_flight == 0)
    logs = next(e for e in server.micro.stats()["endpoints"] if e["name"] == "GetLogs")
    assert logs["last_error"] == "CANCELLED:cancelled by the client"
    assert source.produced <= 3 + 8 + 1  # what was read plus at most one window


async def test_error_mid_stream_arrives_after_the_items_sent(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    source.fail_after = 5
    source.error = GRPCError(Status.DATA_LOSS, "log file truncated")
    received: list[int] = []

    async def read_all() -> None:
        async for chunk in submitter_client(client_nc, pool).get_logs(GetLogsRequest(tail_lines=50)):
            received.append(chunk.offset)

    with pytest.raises(GRPCError) as caught:
        await read_all()
    assert received == [0, 1, 2, 3, 4]
    assert caught.value.status is Status.DATA_LOSS
    assert caught.value.message == "log file truncated"


async def test_unknown_error_mid_stream_is_generic(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    source.fail_after = 2
    source.error = OSError(SECRET)
    with pytest.raises(GRPCError) as caught:
        async for _ in submitter_client(client_nc, pool).get_logs(GetLogsRequest(tail_lines=50)):
            pass
    assert caught.value.status is Status.UNKNOWN
    assert SECRET not in (caught.value.message or "")


async def test_stream_deadline_cancels_the_handler(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    source.stall = 60
    with pytest.raises(GRPCError) as caught:
        async for _ in submitter_client(client_nc, pool).get_logs(GetLogsRequest(), timeout=0.3):
            pass
    assert caught.value.status is Status.DEADLINE_EXCEEDED
    await asyncio.wait_for(source.cancelled.wait(), 10)


async def test_stream_to_an_empty_pool_is_unavailable(client_nc: NATS, pool: str) -> None:
    with pytest.raises(GRPCError) as caught:
        async for _ in submitter_client(client_nc, pool).get_logs(GetLogsRequest()):
            pass
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == f"no submitter of pool {pool!r} answered"


async def test_a_client_that_stops_acking_is_given_up(
    server: RpcServer, source: LogSource, client_nc: NATS, pool: str
) -> None:
    """A reader that keeps its inbox but never acks: the server stops at the window, then after its idle timeout."""
    inbox = client_nc.new_inbox()
    sub = await client_nc.subscribe(inbox)
    await client_nc.flush()
    await client_nc.publish(rpc_subject("GetLogs", pool), bytes(GetLogsRequest()), reply=inbox)

    opened = await sub.next_msg(timeout=10)
    assert opened.headers is not None
    assert opened.headers[WINDOW] == "8"
    assert CONTROL in opened.headers
    await eventually(lambda: source.finished.is_set())  # idle timeout is 1 s
    assert source.produced <= 8 + 1
    stats = server.micro.stats()["endpoints"]
    logs = next(e for e in stats if e["name"] == "GetLogs")
    assert logs["last_error"].startswith("CANCELLED")
    await sub.unsubscribe()


async def test_a_vanished_client_inbox_ends_the_handler(
    server_nc: NATS, source: LogSource, client_nc: NATS, pool: str
) -> None:
    """No cancel message, no acks: the client's inbox just disappears (e.g. a crashed caller).

    The server learns it from nats-server's no-responders bounce on its first data message, or at
    the latest when the window is used up and no credit comes within the idle timeout; either way
    the handler ends and at most one window was produced.
    """
    server = RpcServer(server_nc, [source], pool=pool, stream_window=8, stream_idle_timeout=3)
    await server.start()
    source.stall = 2.0  # the inbox is gone before the first data message
    inbox = client_nc.new_inbox()
    sub = await client_nc.subscribe(inbox)
    await client_nc.flush()
    await client_nc.publish(rpc_subject("GetLogs", pool), bytes(GetLogsRequest()), reply=inbox)
    opened = await sub.next_msg(timeout=10)
    assert opened.headers is not None
    assert CONTROL in opened.headers
    await sub.unsubscribe()
    await client_nc.flush()

    await asyncio.wait_for(source.finished.wait(), 20)
    assert source.produced <= 8 + 1
    await server.stop(grace_s=1)


async def test_end_marker_carries_ok_status(server: RpcServer, client_nc: NATS, pool: str) -> None:
    inbox = client_nc.new_inbox()
    sub = await client_nc.subscribe(inbox)
    await client_nc.flush()
    await client_nc.publish(rpc_subject("GetLogs", pool), bytes(GetLogsRequest(tail_lines=2)), reply=inbox)
    kinds = []
    while True:
        msg = await sub.next_msg(timeout=10)
        if msg.headers and END in msg.headers:
            assert msg.headers[STATUS] == "0"
            assert msg.data == b""
            break
        kinds.append("open" if msg.headers else GetLogsResponse.FromString(msg.data).offset)
    assert kinds == ["open", 0, 1]
    await sub.unsubscribe()
