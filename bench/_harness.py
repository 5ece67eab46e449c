"""Shared pieces of the benchmarks: service processes, a lean keep-alive HTTP client, statistics.

The HTTP client is deliberately minimal (pre-built request bytes over raw asyncio streams) so the
load generator costs far less than the server it measures on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def closed_loop_calls(
    call: Callable[[], Awaitable[object]], count: int, in_flight: int
) -> tuple[list[float], float]:
    """``count`` calls by ``in_flight`` concurrent workers: (latencies in s, elapsed s)."""
    latencies: list[float] = []
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies, time.perf_counter() - started


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    widths = [max([len(str(h)), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


class RedisProcess:
    def __init__(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-redis-")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.tmp.name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.tmp.cleanup()


def file_system_of(path: Path) -> str:
    """The type of the file system ``path`` lives on (the longest mount point above it in /proc/mounts):
    creating files costs very different kernel CPU on ext4 without a journal, with one, on xfs or tmpfs."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def start_cli(args: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``interlink-nats <args>`` from this venv as its own process."""
    exe = Path(sys.executable).with_name("interlink-nats")
    out = log.open("ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [str(exe), *args], env={**os.environ, **(env or {})}, stdout=out, stderr=out, start_new_session=True
    )


def start_gateway(nats_url: str, port: int, log: Path, redis_url: str | None = None) -> subprocess.Popen[bytes]:
    """``interlink-nats gateway`` on ``port`` (warnings only in its log), with redis when ``redis_url`` is set."""
    redis = ["--redis-url", redis_url] if redis_url else []
    return start_cli(
        ["gateway", "--nats-url", nats_url, *redis, "--port", str(port), "--log-level", "warning"], log=log
    )


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU, its reaped children's CPU) in seconds, from ``/proc/<pid>/stat``.

    Own CPU is utime+stime; children's is cutime+cstime, which counts only children it has waited for.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 is fields[0]
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / _TICKS, (cutime + cstime) / _TICKS


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), from ``/proc/<pid>/task/*/children``."""
    pids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids.extend(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return pids


def exit_on_term() -> None:
    """A TERM (a ``kill``, a CI's timeout) ends the bench as Ctrl-C does: through its ``finally`` blocks, which stop
    the servers and daemons it started (Python's default for TERM ends the process where it is, leaving them)."""

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_on_uvloop(main: Coroutine[Any, Any, T]) -> T:
    """``main`` on uvloop when installed, the loop the gateway and the submitter run on (``kernel.signals``):
    what the bench times (a client's calls, the spawning of ``squeue``) costs there what it costs them."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - not on Windows
        return asyncio.run(main)
    return uvloop.run(main)


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def nats_message_count(monitor_url: str) -> int:
    """in_msgs + out_msgs of the whole server (monitoring endpoint /varz)."""
    with urllib.request.urlopen(f"{monitor_url}/varz", timeout=2) as response:
        varz = json.loads(response.read())
    return int(varz["in_msgs"]) + int(varz["out_msgs"])


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that sends pre-built requests and reads Content-Length bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def call(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        chunked = False
        for line in head.split(b"\r\n"):
            lower = line.lower()
            if lower.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
            elif lower.startswith(b"transfer-encoding:") and b"chunked" in lower:
                chunked = True
        if chunked:
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
            return status, body
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def http_request(method: str, path: str, body: bytes, host: str = "127.0.0.1") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
