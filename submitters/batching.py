"""Group work from many concurrent callers into one thread hop: the submitter's hot-path batching.

Why: every Submit used to pay its own SQLite commit and its own ``to_thread`` hop (each hop is a
``call_soon_threadsafe`` wake-up of the event loop plus GIL hand-offs). Under load, calls arrive
while the previous hop is still running, so the natural batch is "everything that queued up
meanwhile": no timer, no added latency when idle (a lone call runs at once), and the batch grows
exactly as fast as the load does. This is classic group commit.

The work function runs on one dedicated thread, so it may keep thread-bound state (a
``sqlite3`` connection) and batches never overlap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

MAX_BATCH = 512
"""Bound on one batch, so a huge backlog still commits (and answers) in steady steps."""


class BatchRunner(Generic[In, Out]):
    """Runs ``work(items)`` on one thread for every item queued while the previous batch ran.

    ``work`` returns one result per item, in order; a result that is an exception instance is
    raised to that item's caller only, so one bad item never fails its neighbours.
    """

    def __init__(self, work: Callable[[Sequence[In]], Sequence[Out | BaseException]], *, name: str) -> None:
        self._work = work
        self._name = name
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._queue: list[tuple[In, asyncio.Future[Out]]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.batches = 0
        """Batches run so far (tests and benchmarks read it to check grouping happens)."""

    async def run(self, item: In) -> Out:
        """Queue ``item`` and wait for its result. Once queued, the item runs even if the caller is cancelled."""
        if self._closed:
            raise RuntimeError("batch runner is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Out] = loop.create_future()
        self._queue.append((item, fut))
        if self._task is None:
            self._task = loop.create_task(self._drain(), name=f"{self._name}-drain")
        return await fut

    async def call(self, fn: Callable[[], Out]) -> Out:
        """Run ``fn`` alone on the runner's thread (after the batches queued before it)."""
        await self.idle()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                items = [item for item, _ in batch]
                results: Sequence[Out | BaseException]
                try:
                    results = await loop.run_in_executor(self._executor, self._work, items)
                except asyncio.CancelledError:  # the loop is going away: nobody will run the rest
                    for _, fut in [*batch, *self._queue]:
                        fut.cancel()
                    self._queue = []
                    raise
                except Exception as exc:  # the work function itself failed: every item hears why
                    results = [exc] * len(batch)
                self.batches += 1
                for (_, fut), result in zip(batch, results, strict=True):
                    if fut.done():
                        continue
                    if isinstance(result, BaseException):
                        fut.set_exception(result)
                    else:
                        fut.set_result(result)
        finally:
            self._task = None

    async def idle(self) -> None:
        """Wait until every queued item has run."""
        while self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def close(self, finish: Callable[[], object] | None = None) -> None:
        """Run what is queued, then ``finish`` on the thread (e.g. close a connection), then stop the thread."""
        await self.idle()
        self._closed = True
        if finish is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, finish)
        self._executor.shutdown(wait=False)
