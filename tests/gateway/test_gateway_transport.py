"""The gateway's coalescing transport on a real socket pair: an answer's head and body leave together,
and a head with nothing after it still leaves within the same turn of the event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from interlink_nats.services.gateway.server import CoalescingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def readable(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


@pytest.fixture
async def wrapped() -> AsyncIterator[tuple[CoalescingTransport, socket.socket]]:
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    yield CoalescingTransport(transport), peer  # type: ignore[arg-type]
    transport.close()
    peer.close()


async def until_readable(peer: socket.socket) -> bytes:
    async with asyncio.timeout(10):
        return await asyncio.get_running_loop().sock_recv(peer, 65536)


async def test_a_head_and_its_body_leave_in_one_write(wrapped: tuple[CoalescingTransport, socket.socket]) -> None:
    transport, peer = wrapped
    transport.write(HEAD)
    assert readable(peer) == b""  # held: the body is expected in this turn of the loop
    transport.write(b"[]")
    assert await until_readable(peer) == HEAD + b"[]"


async def test_a_head_alone_leaves_by_the_end_of_the_loop_turn(
    wrapped: tuple[CoalescingTransport, socket.socket],
) -> None:
    transport, peer = wrapped
    transport.write(HEAD)
    assert await until_readable(peer) == HEAD
    transport.write(b"[]")  # a body after the turn ended is written at once
    assert await until_readable(peer) == b"[]"


async def test_close_sends_a_held_head_first(wrapped: tuple[CoalescingTransport, socket.socket]) -> None:
    transport, peer = wrapped
    transport.write(HEAD)
    transport.close()
    assert await until_readable(peer) == HEAD


async def test_a_head_held_when_the_connection_is_aborted_is_dropped_quietly(
    wrapped: tuple[CoalescingTransport, socket.socket],
) -> None:
    transport, peer = wrapped
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        transport.write(HEAD)
        transport.abort()
        await asyncio.sleep(0)  # the end-of-turn flush runs: it must find a closed transport and send nothing
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert errors == []
    assert readable(peer) == b""
