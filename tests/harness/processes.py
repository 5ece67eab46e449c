"""Real ``interlink-nats`` processes for tests that kill them or measure them (RSS)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from stack import eventually

BIN = Path(sys.executable).parent


class Proc:
    """An ``interlink-nats`` command as a child process, killable with SIGKILL."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "interlink-nats"), *self.args],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


async def wait_healthy(client: httpx.AsyncClient) -> None:
    async def ok() -> bool:
        try:
            return (await client.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(ok, within=30, what="the gateway to answer /healthz")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process now (``VmRSS`` in ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
