"""SIGHUP re-reads a daemon's configuration; every stop says why; a clean stop is quiet.

Before: a HUP stopped the submitter with exit 0 and no word why (its last line ``disconnected (reconnecting
with back-off unless closing)``), and the shipped unit (Restart=on-failure, no ExecReload) left the pool
offline. Each test runs ``interlink-nats submitter run --config FILE`` as the systemd unit does (a real
process, a real nats-server, real signals, a real file edited between them).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.subjects import config_subject
from stack import free_port, new_pool

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def hangup_at_default() -> Iterator[None]:
    """The command must see SIGHUP at its default even when the tests run under nohup (it is inherited)."""
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, before)


class Daemon:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, text: str, count: int = 1) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while self.text().count(text) < count:
            assert self.proc.poll() is None, f"exited {self.proc.returncode} waiting for {text!r}: {self.text()}"
            assert time.monotonic() < deadline, f"no {text!r} within {DEADLINE_S}s: {self.text()}"
            time.sleep(0.05)
        return [line for line in self.text().splitlines() if text in line][count - 1]

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def site_file(path: Path, pool: str, nats_url: str, state: Path, *, image_prefix: str, extra: str = "") -> None:
    path.write_text(
        f"pool: {pool}\nbackend: shell\nnats: {{url: '{nats_url}'}}\nstate_dir: {state}\n"
        f"build_config: {{image_prefix: '{image_prefix}'}}\n{extra}"
    )


async def announced(nats_url: str, pool: str, hup: Daemon, wanted: str) -> pb.BuildConfig:
    """The BuildConfig the pool announces after ``hup`` is sent SIGHUP, once it carries ``wanted``."""
    nc = await nats.connect(nats_url)
    try:
        seen: asyncio.Queue[pb.BuildConfig] = asyncio.Queue()

        async def got(msg: nats.aio.msg.Msg) -> None:
            await seen.put(pb.BuildConfig.parse(msg.data))

        await nc.subscribe(config_subject(pool), cb=got)
        await nc.flush()
        os.kill(hup.proc.pid, signal.SIGHUP)
        async with asyncio.timeout(DEADLINE_S):
            while (config := await seen.get()).image_prefix != wanted:
                pass
        return config
    finally:
        await nc.close()


def test_hangup_applies_a_changed_file_and_refuses_a_broken_one(nats_url: str, tmp_path: Path) -> None:
    pool, config, state = new_pool(), tmp_path / "site.yaml", tmp_path / "state"
    site_file(config, pool, nats_url, state, image_prefix="docker://old/")
    daemon = Daemon(["submitter", "run", "--config", str(config)], tmp_path / "submitter.log")
    try:
        daemon.wait_for("serving pool")

        # Changed: the BuildConfig, the labels and the accounting table apply (announced at once); a new NATS URL
        # and a new state dir need a restart, so they are named and the running values stay.
        site_file(
            config, pool, "nats://127.0.0.1:1", tmp_path / "elsewhere", image_prefix="docker://new/",
            extra="labels: {site: b}\nshell: {accounting: {namespaces: {lab: {run_as_user: nobody}}}}\n",
        )  # fmt: skip
        asyncio.run(announced(nats_url, pool, daemon, "docker://new/"))
        line = daemon.wait_for(f"reloaded {config}")
        assert "applied build_config, labels, shell.accounting;" in line, line
        assert "nats.url, state_dir changed but need a restart (the old values stay)" in line, line
        assert not (tmp_path / "elsewhere").exists()

        # Broken: refused whole, one line naming the key as the file spells it; the process keeps serving.
        config.write_text(config.read_text().replace("labels:", "lables:"))
        os.kill(daemon.proc.pid, signal.SIGHUP)
        line = daemon.wait_for(f"reload of {config} refused, the running configuration stays")
        assert "lables" in line, line
        broken_build_config = config.read_text().replace("lables:", "labels:").replace("image_prefix", "image_prefx")
        config.write_text(broken_build_config)
        os.kill(daemon.proc.pid, signal.SIGHUP)
        line = daemon.wait_for("refused, the running configuration stays", count=2)
        assert "image_prefx" in line, line

        # Still the same process, still serving the applied configuration.
        site_file(config, pool, nats_url, state, image_prefix="docker://third/")
        asyncio.run(announced(nats_url, pool, daemon, "docker://third/"))
        assert daemon.stop() == 0
        text = daemon.text()
        assert "stopping: SIGTERM received" in text, text
        assert "Traceback" not in text and "disconnected" not in text, text
    finally:
        daemon.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_every_stop_logs_its_cause_and_no_disconnect(sig: signal.Signals, nats_url: str, tmp_path: Path) -> None:
    pool, config = new_pool(), tmp_path / "site.yaml"
    site_file(config, pool, nats_url, tmp_path / "state", image_prefix="docker://")
    daemon = Daemon(["submitter", "run", "--config", str(config)], tmp_path / "submitter.log")
    try:
        daemon.wait_for("serving pool")
        assert daemon.stop(sig) == 0
        lines = daemon.text().splitlines()
        assert next(line for line in lines if "stopping:" in line).endswith(f"stopping: {sig.name} received"), lines
        assert not [line for line in lines if "disconnected" in line], lines
    finally:
        daemon.kill()


def test_gateway_hangup_applies_the_default_pool_and_refuses_a_bad_pool_name(nats_url: str, tmp_path: Path) -> None:
    config, port = tmp_path / "gateway.yaml", free_port()
    config.write_text(f"nats: {{url: '{nats_url}'}}\nport: {port}\ndefault_pool: hpc-a\n")
    daemon = Daemon(["gateway", "--config", str(config)], tmp_path / "gateway.log")
    try:
        daemon.wait_for("gateway listening")
        config.write_text(f"nats: {{url: '{nats_url}'}}\nport: {free_port()}\ndefault_pool: hpc-b\n")
        os.kill(daemon.proc.pid, signal.SIGHUP)
        line = daemon.wait_for(f"reloaded {config}")
        assert line.endswith("applied default_pool; port changed but need a restart (the old values stay)"), line
        config.write_text(f"nats: {{url: '{nats_url}'}}\nport: {port}\ndefault_pool: hpc a\n")
        os.kill(daemon.proc.pid, signal.SIGHUP)
        line = daemon.wait_for(f"reload of {config} refused, the running configuration stays")
        assert "default_pool: Value error, invalid pool name 'hpc a'" in line, line
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code < 500  # still serving
        assert daemon.stop() == 0
        assert "stopping: SIGTERM received" in daemon.text()
        assert "disconnected" not in daemon.text() and "Traceback" not in daemon.text(), daemon.text()
    finally:
        daemon.kill()
