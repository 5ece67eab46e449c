"""Run ``interlink-nats <args>`` with a CPU-time sampling profiler: where a process's CPU goes, by call stack.

Used by ``bench/lifecycle.py`` only (the product has no profiling hook): ``python bench/_sampler.py OUT INTERVAL_MS
-- <interlink-nats args>``. While sampling is on, every ``INTERVAL_MS`` of the process's CPU (``ITIMER_PROF``:
user + system time, all threads; an idle process is never sampled) the main thread's Python stack is counted.
Sampling starts off: ``SIGUSR1`` turns it on, ``SIGUSR2`` turns it off and writes the counts so far to ``OUT``
(JSON ``{"samples": n, "stacks": [[count, "file:function", ...outermost first]]}``, through a rename, so a reader
never sees half a file); the bench diffs two dumps to get one window's profile. Off unless asked because sampling
has a cost of its own (a signal and a stack walk every ``INTERVAL_MS``), which must not be in the figures: the
bench takes them with it off and samples in a rep of its own, whose figures it prints beside the others.

Why a signal timer, not a thread: a thread that looks at the main thread every few ms samples wall time (an
idle event loop too) and takes the GIL the process needs. The timer's signal goes to the thread that spent the
CPU, but Python runs the handler in the main thread: when the main thread is found in the event loop's own C code
(no Python frame above ``asyncio.run``'s) the sample goes to the worker threads then busy (not waiting for work:
``IDLE``), else to the loop. What it cannot see: a child process's CPU is not the process's.
Interval timers are not inherited across ``fork``, so the jobs and commands the process starts are not sampled.
"""

from __future__ import annotations

import atexit
import json
import linecache
import os
import signal
import sys
import threading
from types import CodeType, FrameType

MAX_DEPTH = 40
IDLE = ("get(", ".wait(", "select(", ".acquire(", "sleep(")
"""A worker thread whose innermost line calls one of these waits for work (``state.batching``'s runner, an
executor's, aiosqlite's: their ``queue.get`` is C, so the line, not a Python frame, tells waiting from working)."""
LOOP = "run"


def _name(code: CodeType) -> str:
    path = code.co_filename
    for marker in ("/interlink_nats/", "/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_name}"


def install(out: str, interval_s: float) -> None:
    counts: dict[tuple[CodeType, ...], int] = {}
    total = 0

    def stack(frame: FrameType | None) -> tuple[CodeType, ...]:
        codes: list[CodeType] = []
        while frame is not None and len(codes) < MAX_DEPTH:
            codes.append(frame.f_code)
            frame = frame.f_back
        return tuple(codes)

    def sample(signum: int, frame: FrameType | None) -> None:
        nonlocal total
        total += 1
        keys = [stack(frame)]
        if frame is not None and frame.f_code.co_name == LOOP and frame.f_code.co_filename.endswith("runners.py"):
            main = threading.main_thread().ident
            busy = [
                stack(f)
                for ident, f in sys._current_frames().items()
                if ident != main and not any(w in linecache.getline(f.f_code.co_filename, f.f_lineno) for w in IDLE)
            ]
            keys = busy or keys
        for key in keys:
            counts[key] = counts.get(key, 0) + 1

    def dump(signum: int, frame: FrameType | None) -> None:
        stacks = [[n, *(_name(c) for c in reversed(key))] for key, n in list(counts.items())]
        tmp = f"{out}.tmp"
        with open(tmp, "w") as f:
            json.dump({"samples": total, "stacks": stacks}, f)
        os.replace(tmp, out)

    def start(signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_PROF, interval_s, interval_s)

    def stop_and_dump(signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        dump(signum, frame)

    signal.signal(signal.SIGPROF, sample)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop_and_dump)
    atexit.register(signal.setitimer, signal.ITIMER_PROF, 0)  # SIGPROF's default action ends a process


def main() -> None:
    out, interval_ms, sep, *args = sys.argv[1:]
    assert sep == "--", "usage: _sampler.py OUT INTERVAL_MS -- <interlink-nats args>"
    install(out, float(interval_ms) / 1e3)
    sys.argv = ["interlink-nats", *args]
    from interlink_nats.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
