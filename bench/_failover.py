"""The timeline of one node's loss, for ``bench/cluster.py``: when each part of the event path came back.

Watched from the moment before the ``kill -9`` (all times are seconds after it, on this process's clock):

- each client (gateway, submitter) that was on the lost node: when it saw the loss and when it was
  connected again (polled every 10 ms, so ±10 ms);
- the events stream's and the gateway consumer's new raft leader: ``$JS.API.STREAM.INFO`` /
  ``$JS.API.CONSUMER.INFO`` asked of the survivors every 50 ms (not awaited in turn, so a request that
  nobody answers while there is no leader does not hide the answer of the next);
- the submitter's first JetStream ack after the loss (and when that publish was sent);
- the gateway's first applied event (``Probe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import nats
from interlink_nats.kernel.nats_connection import connected_server
from interlink_nats.kernel.subjects import EVENTS_STREAM
from interlink_nats.submitters.state import outbox
from nats.aio.client import Client as NATS


@dataclass
class Acks:
    """(sent, acked) of every event the submitter got a JetStream ack for, and (at, error) of every failure."""

    done: list[tuple[float, float]] = field(default_factory=list)
    failed: list[tuple[float, str]] = field(default_factory=list)

    def first_after(self, moment: float) -> tuple[float, float] | None:
        """The first ack of a publish sent after ``moment`` (one in flight at the kill is the old leader's)."""
        later = [pair for pair in self.done if pair[0] > moment]
        return min(later, key=lambda pair: pair[1]) if later else None


@contextlib.contextmanager
def recorded_acks() -> Iterator[Acks]:
    """Wrap the outbox's ``publish_acked`` (the one place an event meets JetStream) to time each ack."""
    acks = Acks()
    original = outbox.publish_acked

    async def timed(nc: NATS, subject: str, data: bytes, **kwargs: float) -> None:
        sent = time.monotonic()
        try:
            await original(nc, subject, data, **kwargs)  # type: ignore[arg-type]
        except Exception as exc:
            acks.failed.append((time.monotonic(), type(exc).__name__))
            raise
        acks.done.append((sent, time.monotonic()))

    outbox.publish_acked = timed  # type: ignore[assignment]
    try:
        yield acks
    finally:
        outbox.publish_acked = original


@dataclass
class Loss:
    """One loss's moments (monotonic); None: did not happen (or the client was not on the lost node)."""

    killed: float
    seen: dict[str, float] = field(default_factory=dict)
    """client name → when it noticed it was disconnected."""
    back: dict[str, tuple[float, str]] = field(default_factory=dict)
    """client name → (when connected again, to which server)."""
    stream_leader: float | None = None
    consumer_leader: float | None = None
    ack: tuple[float, float] | None = None
    applied: float | None = None
    errors: list[tuple[float, str]] = field(default_factory=list)
    """(seconds after the kill, error) of each failed publish: why the first ack came when it did."""

    def error_summary(self) -> str:
        """Failed publishes after the kill by kind: ``kind xcount (first-last s)``."""
        kinds: dict[str, list[float]] = {}
        for at, kind in self.errors:
            kinds.setdefault(kind, []).append(at)
        return ", ".join(f"{k} x{len(v)} ({v[0]:.2f}-{v[-1]:.2f} s)" for k, v in kinds.items()) or "none"

    def phases(self) -> dict[str, float | None]:
        """Seconds after the kill of each phase (None where it did not happen)."""

        def since(moment: float | None) -> float | None:
            return None if moment is None else round(moment - self.killed, 3)

        out: dict[str, float | None] = {}
        for name in ("gateway", "submitter"):
            out[f"{name}_disconnect"] = since(self.seen.get(name))
            out[f"{name}_reconnect"] = since(self.back[name][0]) if name in self.back else None
        out["stream_leader"] = since(self.stream_leader)
        out["consumer_leader"] = since(self.consumer_leader)
        out["ack_publish_sent"] = since(self.ack[0]) if self.ack else None
        out["first_ack"] = since(self.ack[1]) if self.ack else None
        out["first_apply"] = since(self.applied)
        # Ours: from the later of the two elections the gateway needed to the first status it applied.
        leaders = [moment for moment in (self.stream_leader, self.consumer_leader) if moment is not None]
        out["apply_after_leaders"] = (
            round(self.applied - max(leaders), 3) if self.applied is not None and len(leaders) == 2 else None
        )
        return out


async def _watch_client(name: str, nc: NATS, loss: Loss, stop: asyncio.Event) -> None:
    was = connected_server(nc)
    while not stop.is_set():
        now_on = connected_server(nc)
        if name not in loss.seen and not nc.is_connected:
            loss.seen[name] = time.monotonic()
        elif name in loss.seen and name not in loss.back and now_on is not None:
            loss.back[name] = (time.monotonic(), now_on)
        elif name not in loss.seen and now_on != was:  # moved without us seeing the gap
            loss.seen[name] = loss.back.setdefault(name, (time.monotonic(), now_on or "?"))[0]
        await asyncio.sleep(0.01)


async def _watch_leader(
    nc: NATS, subject: str, lost: str, stop: asyncio.Event, record: Callable[[float], None]
) -> None:
    async def ask() -> None:
        with contextlib.suppress(Exception):
            reply = await nc.request(subject, b"", timeout=1.0)
            leader = (json.loads(reply.data).get("cluster") or {}).get("leader")
            if leader and leader != lost:
                record(time.monotonic())

    pending: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        task = asyncio.create_task(ask())
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(0.05)
    for task in list(pending):
        task.cancel()


@contextlib.asynccontextmanager
async def watched_loss(
    survivors: list[str], lost: str, durable: str, clients: dict[str, NATS]
) -> AsyncIterator[tuple[Loss, Callable[[], Awaitable[None]]]]:
    """Watch from before the kill; yields the ``Loss`` (its ``killed`` set by the caller's ``mark``) and
    ``mark``: call it right after the kill."""
    probe = await nats.connect(survivors, allow_reconnect=True)
    loss = Loss(killed=float("inf"))
    stop = asyncio.Event()

    def first(attr: str) -> Callable[[float], None]:
        def record(at: float) -> None:
            if at > loss.killed and getattr(loss, attr) is None:
                setattr(loss, attr, at)

        return record

    async def mark() -> None:
        loss.killed = time.monotonic()

    tasks = [asyncio.create_task(_watch_client(name, nc, loss, stop)) for name, nc in clients.items()]
    tasks.append(
        asyncio.create_task(
            _watch_leader(probe, f"$JS.API.STREAM.INFO.{EVENTS_STREAM}", lost, stop, first("stream_leader"))
        )
    )
    tasks.append(
        asyncio.create_task(
            _watch_leader(
                probe, f"$JS.API.CONSUMER.INFO.{EVENTS_STREAM}.{durable}", lost, stop, first("consumer_leader")
            )
        )
    )
    try:
        yield loss, mark
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await probe.close()
