"""Group work from many concurrent callers into one thread hop: the submitter's hot-path batching.

Why: every Submit used to pay its own SQLite commit and its own ``to_thread`` hop (each hop is a
``call_soon_threadsafe`` wake-up of the event loop plus GIL hand-offs). Under load, calls arrive
while the previous hop is still running, so the natural batch is "everything that queued up
meanwhile": no timer, no added latency when idle (a lone call runs at once), and the batch grows
exactly as fast as the load does. This is classic group commit.

The work function runs on one dedicated thread, so it may keep thread-bound state (a
``sqlite3`` connection) and batches never overlap.

Why not ``run_in_executor``: a hop through a ``ThreadPoolExecutor`` (a ``concurrent.futures.Future``
chained to an asyncio one, a drain task per batch) cost ~90 µs of CPU; here the loop puts the item
on a ``SimpleQueue`` the thread reads, and the thread hands a batch's results back with one
``call_soon_threadsafe``: ~30 µs. While it is :attr:`BatchRunner.idle` a caller may do its work on the loop
instead (the registry's lone writes: ``state.inline``), knowing it overtakes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")
R = TypeVar("R")

MAX_BATCH = 512
"""Bound on one batch, so a huge backlog still commits (and answers) in steady steps."""


class _Call:
    """A function run alone on the thread (``BatchRunner.call``), in queue order."""

    __slots__ = ("fn", "fut")

    def __init__(self, fn: Callable[[], Any], fut: asyncio.Future[Any]) -> None:
        self.fn, self.fut = fn, fut


_STOP = object()
"""Ends the thread once everything queued before it has run."""


def _noop() -> None:
    return None


class BatchRunner(Generic[In, Out]):
    """Runs ``work(items)`` on one thread for every item queued while the previous batch ran.

    ``work`` returns one result per item, in order; a result that is an exception instance is
    raised to that item's caller only, so one bad item never fails its neighbours.
    """

    def __init__(self, work: Callable[[Sequence[In]], Sequence[Out | BaseException]], *, name: str) -> None:
        self._work = work
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches = 0
        """Batches run so far (tests and benchmarks read it to check grouping happens)."""
        self._outstanding = 0
        """Items and calls queued whose results the loop has not yet been handed (touched on the loop only)."""

    @property
    def idle(self) -> bool:
        """Nothing queued, running, or on its way back: work done now on the loop cannot overtake any."""
        return self._outstanding == 0

    def _start(self) -> None:
        if self._thread is None:
            # A daemon, like the executor threads of old Pythons: a runner nobody closed must not hold up the exit.
            self._thread = threading.Thread(target=self._serve, name=f"{self._name}_0", daemon=True)
            self._thread.start()

    async def run(self, item: In) -> Out:
        """Queue ``item`` and wait for its result. Once queued, the item runs even if the caller is cancelled."""
        if self._closed:
            raise RuntimeError("batch runner is closed")
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.put((item, fut))
        self._outstanding += 1
        self._start()
        return await fut

    async def call(self, fn: Callable[[], R]) -> R:
        """Run ``fn`` alone on the runner's thread (after the batches queued before it)."""
        return await self.queue_call(fn)

    def queue_call(self, fn: Callable[[], R]) -> asyncio.Future[R]:
        """Queue ``fn`` as :meth:`call` does, at once (the runner is busy from now on); its future to await."""
        if self._closed:
            raise RuntimeError("batch runner is closed")
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.put(_Call(fn, fut))
        self._outstanding += 1
        self._start()
        return fut

    def _serve(self) -> None:
        """The thread: take what queued up (at most ``MAX_BATCH`` items), run it, hand the results back."""
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            batch: list[tuple[In, asyncio.Future[Out]]] = []
            entry = get()
            while True:
                if entry is _STOP or isinstance(entry, _Call):
                    break
                batch.append(entry)
                if len(batch) >= MAX_BATCH:
                    entry = None
                    break
                try:
                    entry = get_nowait()
                except queue.Empty:
                    entry = None
                    break
            if batch:
                self._run_batch(batch)
            if isinstance(entry, _Call):
                self._run_call(entry)
            elif entry is _STOP:
                return

    def _run_batch(self, batch: list[tuple[In, asyncio.Future[Out]]]) -> None:
        results: Sequence[Out | BaseException]
        try:
            results = self._work([item for item, _ in batch])
        except BaseException as exc:  # the work function itself failed: every item hears why
            results = [exc] * len(batch)
        self._hand_back(batch[0][1].get_loop(), self._deliver, batch, results)

    def _run_call(self, call: _Call) -> None:
        try:
            result = call.fn()
        except BaseException as exc:
            self._hand_back(call.fut.get_loop(), self._settle_call, call.fut, exc)
            return
        self._hand_back(call.fut.get_loop(), self._settle_call, call.fut, result)

    @staticmethod
    def _hand_back(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for these results
            loop.call_soon_threadsafe(fn, *args)

    def _deliver(self, batch: list[tuple[In, asyncio.Future[Out]]], results: Sequence[Out | BaseException]) -> None:
        """On the loop: each caller gets its own result (a caller that gave up is skipped)."""
        self.batches += 1
        self._outstanding -= len(batch)
        for (_, fut), result in zip(batch, results, strict=True):
            _settle(fut, result)

    def _settle_call(self, fut: asyncio.Future[Any], result: object) -> None:
        self._outstanding -= 1
        _settle(fut, result)

    async def drained(self) -> None:
        """Wait until every queued item has run."""
        if self._thread is not None:
            await self.call(_noop)

    async def close(self, finish: Callable[[], object] | None = None) -> None:
        """Run what is queued, then ``finish`` on the thread (e.g. close a connection), then stop the thread."""
        if finish is not None:
            await self.call(finish)
        else:
            await self.drained()
        self._closed = True
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread = None


def _settle(fut: asyncio.Future[Any], result: object) -> None:
    if fut.done():
        return
    if isinstance(result, BaseException):
        fut.set_exception(result)
    else:
        fut.set_result(result)
