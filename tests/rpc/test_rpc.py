"""RPC over a real nats-server: unary calls, status codes, deadlines, pools, queue groups, concurrency, garbage."""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import nats
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import Deadline
from interlink_nats.gen.interlink_nats.v1 import (
    CancelRequest,
    ContainerPhase,
    ContainerStatus,
    GetLogsResponse,
    GetStatusRequest,
    GetStatusResponse,
    JobScript,
    JobState,
    JobStatus,
    PodRef,
    ResourceRequest,
    SubmitRequest,
    SubmitResponse,
    SubmitterServiceBase,
    SubmitterServiceStub,
)
from interlink_nats.kernel.subjects import InvalidPoolNameError, rpc_subject
from interlink_nats.services.bus.rpc import (
    STATUS,
    TIMEOUT,
    NatsChannel,
    RpcServer,
    connection_shared,
    current_call,
    protocol,
    submitter_client,
)
from interlink_nats.services.bus.rpc.latency import RpcLatency
from interlink_nats.services.gateway.metrics import GatewayMetrics
from interlink_nats.services.gateway.pool_client import SUBMIT_ROUTE, PoolClient
from interlink_nats.services.gateway.settings import GatewaySettings
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

SECRET = "db password is hunter2"


class Recorder(SubmitterServiceBase):
    """A submitter whose behaviour each test sets: delay, error, and what it saw."""

    def __init__(self, name: str = "s") -> None:
        self.name = name
        self.seen: list[str] = []
        self.active = 0
        self.peak = 0
        self.delay = 0.0
        self.error: BaseException | None = None
        self.cancelled = asyncio.Event()
        self.metadata: dict[str, str | bytes] = {}
        self.time_remaining: float | None = None

    async def submit(self, message: SubmitRequest) -> SubmitResponse:
        uid = message.job.pod.uid if message.job and message.job.pod else ""
        self.seen.append(uid)
        call = current_call()
        self.metadata, self.time_remaining = call.metadata, call.time_remaining()
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.error is not None:
                raise self.error
            return SubmitResponse(job_id=f"{self.name}:{uid}", created=True)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.active -= 1


def submit_request(uid: str = "uid-1", script: str = "#!/bin/sh\necho hi\n") -> SubmitRequest:
    return SubmitRequest(job=JobScript(pod=PodRef(uid=uid, namespace="ns", name="pod"), script=script))


@pytest.fixture
def pool() -> str:
    """A pool of the test's own, so servers of other tests on the shared nats-server never answer."""
    return f"t-{uuid.uuid4().hex[:10]}"


Serve = Callable[..., Awaitable[RpcServer]]


@pytest.fixture
async def serve(server_nc: NATS) -> AsyncIterator[Serve]:
    """Start RpcServers on the server connection; all are stopped at teardown."""
    servers: list[RpcServer] = []

    async def start(service: SubmitterServiceBase, pool: str, **kwargs: object) -> RpcServer:
        server = RpcServer(server_nc, [service], pool=pool, **kwargs)  # type: ignore[arg-type]
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop(grace_s=1)


async def raw_request(nc: NATS, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> Msg:
    """A bare nats-py request; flush first, since nats-server may not yet route to a just-made subscription."""
    await nc.flush()
    return await nc.request(subject, payload, timeout=10, headers=headers)


async def eventually(predicate: Callable[[], bool], within: float = 10.0) -> None:
    """Poll until ``predicate`` holds (generous bound: the machine is shared)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - polling state the code under test owns
            await asyncio.sleep(0.01)


# --- contracts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        submit_request(script="x" * 4096),
        SubmitRequest(job=JobScript(resources=ResourceRequest(cpu_millis=1500, wall_time=timedelta(hours=2)))),
        GetStatusResponse(
            statuses=[
                JobStatus(
                    job_id="123",
                    state=JobState.RUNNING,
                    containers=[
                        ContainerStatus(
                            name="main",
                            phase=ContainerPhase.TERMINATED,
                            exit_code=0,
                            started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                        )
                    ],
                )
            ],
            unknown_pod_uids=["gone"],
        ),
        GetLogsResponse(data=bytes(range(256)), offset=2**40),
        SubmitResponse(),
    ],
    ids=["submit", "resources", "status", "logs", "empty"],
)
def test_messages_round_trip_through_bytes(message: object) -> None:
    data = bytes(message)  # type: ignore[call-overload]
    assert type(message).FromString(data) == message  # type: ignore[attr-defined]
    assert type(message)().parse(data) == message  # type: ignore[attr-defined]


def test_optional_zero_exit_code_stays_distinct_from_unset() -> None:
    zero = ContainerStatus.FromString(bytes(ContainerStatus(exit_code=0)))
    unset = ContainerStatus.FromString(bytes(ContainerStatus()))
    assert zero.exit_code == 0
    assert unset.exit_code is None


# --- unary ----------------------------------------------------------------------------------


async def test_unary_call_returns_the_handlers_reply(serve: Serve, client_nc: NATS, pool: str) -> None:
    service = Recorder("one")
    await serve(service, pool)
    stub = SubmitterServiceStub(NatsChannel(client_nc, pool=pool, timeout=10.0))

    reply = await stub.submit(submit_request("abc"), metadata={"trace-id": "t-1", "token-bin": b"\x00\xff"})

    assert reply == SubmitResponse(job_id="one:abc", created=True)
    assert service.seen == ["abc"]
    assert service.metadata == {"trace-id": "t-1", "token-bin": b"\x00\xff"}
    assert service.time_remaining is not None
    assert 0 < service.time_remaining <= 10.0


async def test_submitter_client_is_a_ready_stub(serve: Serve, client_nc: NATS, pool: str) -> None:
    await serve(Recorder("x"), pool)
    stub = submitter_client(client_nc, pool, timeout=5.0)
    assert isinstance(stub, SubmitterServiceStub)
    assert (await stub.submit(submit_request("u"))).job_id == "x:u"


async def test_call_without_deadline_sends_no_timeout(serve: Serve, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    await serve(service, pool)
    await submitter_client(client_nc, pool, timeout=None).submit(submit_request())
    assert service.time_remaining is None


@pytest.mark.parametrize(
    "status", [Status.NOT_FOUND, Status.ALREADY_EXISTS, Status.FAILED_PRECONDITION, Status.RESOURCE_EXHAUSTED]
)
async def test_grpc_errors_pass_through_with_code_and_message(
    serve: Serve, client_nc: NATS, pool: str, status: Status
) -> None:
    service = Recorder()
    service.error = GRPCError(status, f"pod is {status.name.lower()}")
    await serve(service, pool)

    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request())

    assert caught.value.status is status
    assert caught.value.message == f"pod is {status.name.lower()}"


async def test_methods_the_service_does_not_override_are_unimplemented(
    serve: Serve, client_nc: NATS, pool: str
) -> None:
    await serve(Recorder(), pool)
    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).cancel(CancelRequest(pod_uid="x"))
    assert caught.value.status is Status.UNIMPLEMENTED


async def test_unexpected_exception_is_unknown_with_a_generic_message(
    serve: Serve, client_nc: NATS, pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = Recorder()
    service.error = RuntimeError(SECRET)
    await serve(service, pool)

    with caplog.at_level(logging.ERROR, logger="interlink_nats.services.bus.rpc"), pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request())

    assert caught.value.status is Status.UNKNOWN
    assert caught.value.message == "internal error"
    assert SECRET not in str(caught.value.message)
    assert any(SECRET in (r.exc_text or "") or SECRET in str(r.exc_info) for r in caplog.records)


async def test_deadline_exceeded_reaches_the_client_and_cancels_the_handler(
    serve: Serve, client_nc: NATS, pool: str
) -> None:
    service = Recorder()
    service.delay = 60.0
    server = await serve(service, pool)
    loop = asyncio.get_running_loop()
    started = loop.time()

    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request(), timeout=0.3)

    assert caught.value.status is Status.DEADLINE_EXCEEDED
    assert loop.time() - started < 10  # nowhere near the handler's 60 s
    await asyncio.wait_for(service.cancelled.wait(), 10)
    await eventually(lambda: server.in_flight == 0)


async def lossy_responder(nc: NATS, pool: str, drop: int) -> list[Msg]:
    """A pool's node as it dies: the first ``drop`` requests (or their replies) are lost; the rest are answered.
    Returns the list every request copy lands in."""
    seen: list[Msg] = []

    async def on_request(msg: Msg) -> None:
        seen.append(msg)
        if len(seen) > drop:
            await nc.publish(msg.reply, bytes(SubmitResponse(job_id=f"job-{len(seen)}", created=True)))

    await nc.subscribe(rpc_subject("Submit", pool), cb=on_request)
    await nc.flush()
    return seen


async def test_an_unanswered_call_given_a_resend_period_is_sent_again_until_answered(
    server_nc: NATS, client_nc: NATS, pool: str
) -> None:
    """A Submit whose request or reply was lost with its node is answered after the resend period, not its
    deadline; each copy carries the time left as its own deadline."""
    seen = await lossy_responder(server_nc, pool, drop=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reply = await NatsChannel(client_nc, pool).unary(
        SUBMIT_ROUTE, bytes(submit_request()), timeout=60, resend_every_s=0.2
    )
    assert SubmitResponse.parse(reply).job_id == "job-3"
    assert loop.time() - started < 30, "answered long before the deadline"
    deadlines = [protocol.decode_timeout((m.headers or {})[TIMEOUT]) for m in seen]
    assert len(deadlines) == 3 and deadlines == sorted(deadlines, reverse=True) and deadlines[0] > deadlines[-1]
    assert len({m.reply for m in seen}) == 1, "every copy answers the one waiting call"
    await asyncio.sleep(0.5)  # no copy is sent once the call is answered
    assert len(seen) == 3


async def test_the_gateways_submit_is_sent_again_by_its_setting(server_nc: NATS, client_nc: NATS, pool: str) -> None:
    """``submit_resend_s`` reaches the Submit the gateway makes (a create in flight when its pool's node died)."""
    seen = await lossy_responder(server_nc, pool, drop=1)
    settings = GatewaySettings(submit_resend_s=0.2)
    client = PoolClient(
        client_nc,
        GatewayMetrics(dict, lambda: 0),
        call_timeout_s=settings.submit_timeout_s,
        pool_wait_s=settings.pool_wait_s,
        submit_resend_s=settings.submit_resend_s,
    )
    reply = await client.submit(pool, submit_request().job)  # type: ignore[arg-type]
    assert (reply.job_id, len(seen)) == ("job-2", 2)


async def test_without_a_resend_period_a_lost_request_waits_out_its_deadline(
    server_nc: NATS, client_nc: NATS, pool: str
) -> None:
    seen = await lossy_responder(server_nc, pool, drop=1)
    with pytest.raises(GRPCError) as caught:
        await NatsChannel(client_nc, pool).unary(SUBMIT_ROUTE, bytes(submit_request()), timeout=1.0)
    assert caught.value.status is Status.DEADLINE_EXCEEDED
    assert len(seen) == 1


async def test_stub_deadline_argument_is_honoured(serve: Serve, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    service.delay = 60.0
    await serve(service, pool)
    stub = SubmitterServiceStub(NatsChannel(client_nc, pool, timeout=None))

    with pytest.raises(GRPCError) as caught:
        await stub.submit(submit_request(), deadline=Deadline.from_timeout(0.3))

    assert caught.value.status is Status.DEADLINE_EXCEEDED
    await asyncio.wait_for(service.cancelled.wait(), 10)


async def test_stub_level_timeout_applies_to_every_call(serve: Serve, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    service.delay = 60.0
    await serve(service, pool)
    stub = SubmitterServiceStub(NatsChannel(client_nc, pool, timeout=None), timeout=0.3)
    with pytest.raises(GRPCError) as caught:
        await stub.submit(submit_request())
    assert caught.value.status is Status.DEADLINE_EXCEEDED


async def test_no_responders_is_unavailable(client_nc: NATS, pool: str) -> None:
    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request())
    assert caught.value.status is Status.UNAVAILABLE
    assert caught.value.message == f"no submitter of pool {pool!r} answered"


async def test_closed_connection_is_unavailable_not_a_nats_error(nats_url: str, pool: str) -> None:
    nc = await nats.connect(nats_url)
    await nc.close()
    with pytest.raises(GRPCError) as caught:
        await submitter_client(nc, pool).submit(submit_request())
    assert caught.value.status is Status.UNAVAILABLE


# --- pools and queue groups ------------------------------------------------------------------


async def test_queue_group_hands_each_request_to_exactly_one_server(serve: Serve, client_nc: NATS, pool: str) -> None:
    first, second = Recorder("first"), Recorder("second")
    first.delay = second.delay = 0.005
    await serve(first, pool)
    await serve(second, pool)
    stub = submitter_client(client_nc, pool)
    uids = [f"pod-{i}" for i in range(200)]

    replies = await asyncio.gather(*(stub.submit(submit_request(uid)) for uid in uids))

    assert sorted(first.seen + second.seen) == sorted(uids)  # each exactly once
    assert first.seen, "both servers get work"
    assert second.seen, "both servers get work"
    assert {r.job_id.split(":", 1)[1] for r in replies} == set(uids)


async def test_pools_are_isolated(serve: Serve, client_nc: NATS, pool: str) -> None:
    other_pool = f"{pool}-b"
    in_a, in_b = Recorder("a"), Recorder("b")
    await serve(in_a, pool)
    await serve(in_b, other_pool)

    replies = [await submitter_client(client_nc, other_pool).submit(submit_request(f"p{i}")) for i in range(10)]

    assert in_a.seen == []
    assert len(in_b.seen) == 10
    assert all(r.job_id.startswith("b:") for r in replies)


async def test_invalid_pool_names_are_refused(client_nc: NATS) -> None:
    with pytest.raises(InvalidPoolNameError):
        NatsChannel(client_nc, "a.b")
    with pytest.raises(InvalidPoolNameError):
        RpcServer(client_nc, [Recorder()], pool="*")


# --- robustness ------------------------------------------------------------------------------


async def test_concurrency_is_bounded(serve: Serve, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    service.delay = 0.1
    await serve(service, pool, max_concurrency=2)
    stub = submitter_client(client_nc, pool, timeout=30)

    await asyncio.gather(*(stub.submit(submit_request(f"p{i}")) for i in range(10)))

    assert service.peak == 2  # never more, and really concurrent
    assert len(service.seen) == 10


@pytest.mark.parametrize(
    "garbage",
    [b"\xff\xff\xff", b"\x0a\x05ab", b"\x08\x01", b"not a protobuf at all", b"\x0a" + b"\xff" * 11],
    ids=["bad-varint", "truncated", "wrong-wire-type", "text", "huge-length"],
)
async def test_garbage_request_is_invalid_argument_and_the_server_keeps_working(
    serve: Serve, client_nc: NATS, pool: str, garbage: bytes
) -> None:
    service = Recorder()
    await serve(service, pool)

    reply = await raw_request(client_nc, rpc_subject("Submit", pool), garbage)

    assert reply.headers is not None
    assert reply.headers[STATUS] == str(Status.INVALID_ARGUMENT.value)
    assert service.seen == []  # never reached the handler
    assert (await submitter_client(client_nc, pool).submit(submit_request("ok"))).job_id == "s:ok"


async def test_a_request_decoder_reads_first_and_what_it_leaves_gets_the_strict_check(
    serve: Serve, client_nc: NATS, pool: str
) -> None:
    """``decoders``: a hot request type is read by the given function first (the generated plain decoder here);
    bytes it leaves (None) go through the strict wire check and ``FromString``, so garbage is still answered
    INVALID_ARGUMENT, and a decoder that fails answers INVALID_ARGUMENT like a bad request."""
    from interlink_nats.gen.interlink_nats.v1.fastwire import decode_plain_submit_request

    decoded: list[bytes] = []
    taken: list[bool] = []

    def decode(data: bytes) -> SubmitRequest | None:
        decoded.append(data)
        if b"undecodable" in data:
            raise ValueError("no")
        request = decode_plain_submit_request(data)
        taken.append(request is not None)
        return request

    service = Recorder()
    await serve(service, pool, decoders={SubmitRequest: decode})
    client = submitter_client(client_nc, pool)

    assert (await client.submit(submit_request("fast"))).job_id == "s:fast"
    assert decoded == [bytes(submit_request("fast"))] and taken == [True]
    # valid, but not plain (an unknown field): left to FromString, which keeps the unknown field
    unusual = bytes(submit_request("slow")) + b"\x10\x01"
    reply = await raw_request(client_nc, rpc_subject("Submit", pool), unusual)
    assert reply.headers is None or STATUS not in reply.headers, reply.headers
    assert taken == [True, False]
    # truncated: the plain decoder leaves it, the strict check rejects it (betterproto2 alone would not)
    garbage = await raw_request(client_nc, rpc_subject("Submit", pool), b"\x0a\x05ab")
    assert garbage.headers is not None and garbage.headers[STATUS] == str(Status.INVALID_ARGUMENT.value)
    assert taken == [True, False, False]
    with pytest.raises(GRPCError) as failed:
        await client.submit(submit_request("u", script="undecodable"))
    assert failed.value.status is Status.INVALID_ARGUMENT
    assert service.seen == ["fast", "slow"]


async def test_a_reply_encoder_replaces_serialize_to_string(serve: Serve, client_nc: NATS, pool: str) -> None:
    """``encoders``: a hot reply type is encoded by the given function; its bytes are what the client reads."""
    encoded: list[str] = []

    def encode(resp: SubmitResponse) -> bytes:
        encoded.append(resp.job_id)
        return bytes(SubmitResponse(job_id=resp.job_id + ":by-hand", created=resp.created))

    await serve(Recorder(), pool, encoders={SubmitResponse: encode})
    reply = await submitter_client(client_nc, pool).submit(submit_request("fast"))

    assert reply.job_id == "s:fast:by-hand"
    assert encoded == ["s:fast"]


async def test_bad_timeout_header_is_invalid_argument(serve: Serve, client_nc: NATS, pool: str) -> None:
    await serve(Recorder(), pool)
    reply = await raw_request(client_nc, rpc_subject("Submit", pool), bytes(submit_request()), {TIMEOUT: "soon"})
    assert reply.headers is not None
    assert reply.headers[STATUS] == str(Status.INVALID_ARGUMENT.value)


async def test_reserved_metadata_keys_are_refused(client_nc: NATS, pool: str) -> None:
    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request(), metadata={"Rpc-Status": "0"})
    assert caught.value.status is Status.INVALID_ARGUMENT


async def test_stop_lets_in_flight_calls_finish(server_nc: NATS, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    service.delay = 0.3
    server = RpcServer(server_nc, [service], pool=pool)
    await server.start()
    call = asyncio.create_task(submitter_client(client_nc, pool).submit(submit_request("late")))
    await eventually(lambda: service.active == 1)

    await server.stop(grace_s=10)

    assert (await call).job_id == "s:late"
    with pytest.raises(GRPCError) as caught:
        await submitter_client(client_nc, pool).submit(submit_request())
    assert caught.value.status is Status.UNAVAILABLE


async def test_stop_after_grace_cancels_and_answers_unavailable(server_nc: NATS, client_nc: NATS, pool: str) -> None:
    service = Recorder()
    service.delay = 60
    registry = CollectorRegistry()
    server = RpcServer(server_nc, [service], pool=pool, latency=RpcLatency(registry, "submitter"))
    await server.start()
    call = asyncio.create_task(submitter_client(client_nc, pool).submit(submit_request()))
    await eventually(lambda: service.active == 1)

    await server.stop(grace_s=0.1)

    assert service.cancelled.is_set()
    with pytest.raises(GRPCError) as caught:
        await call
    assert caught.value.status is Status.UNAVAILABLE
    # Its latency is observed with what the caller was told (it was "unknown": the cancel skipped the status).
    labels = {"pool": pool, "method": "Submit", "outcome": "unavailable"}
    assert registry.get_sample_value("interlink_submitter_rpc_seconds_count", labels) == 1


async def test_get_status_batch(serve: Serve, client_nc: NATS, pool: str) -> None:
    class Statuses(SubmitterServiceBase):
        async def get_status(self, message: GetStatusRequest) -> GetStatusResponse:
            known = [u for u in message.pod_uids if u.startswith("k")]
            return GetStatusResponse(
                statuses=[JobStatus(pod=PodRef(uid=u), state=JobState.RUNNING) for u in known],
                unknown_pod_uids=[u for u in message.pod_uids if u not in known],
            )

    await serve(Statuses(), pool)
    reply = await submitter_client(client_nc, pool).get_status(GetStatusRequest(pod_uids=["k1", "x", "k2"]))
    assert [s.pod.uid for s in reply.statuses if s.pod] == ["k1", "k2"]
    assert reply.unknown_pod_uids == ["x"]


async def test_the_helpers_shared_per_connection_do_not_keep_it_alive() -> None:
    """The reply inbox and failover watch kept per client must go with it: before, each held its
    client strongly as the value of a weak-keyed table, so no client was ever freed."""
    nc = NATS()
    replies, watch = connection_shared.Replies.of(nc), connection_shared.FailoverWatch.of(nc)
    assert connection_shared.Replies.of(nc) is replies and connection_shared.FailoverWatch.of(nc) is watch
    gone = weakref.ref(nc)
    del nc
    gc.collect()
    assert gone() is None
