"""Every long-lived command stops cleanly on SIGINT, SIGTERM, its parent's death, and SIGHUP where it is
not a daemon (``up``, the controller; the submitter and the gateway re-read their configuration on it).

Before: SIGHUP (the terminal closed, the SSH session dropped) killed ``interlink-nats up`` at once and left
the embedded nats-server, the running jobs and ``/tmp/interlink-nats-up-*`` behind; a parent killed with
-9 left every command running. Each test runs the command as a user would (a real process, real signals)
and looks for what it left: processes, temp dirs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from stack import create_body, free_port, new_pool, pod

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 60.0
PARENT = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(3600)"
"""A parent that starts the command and waits: killing it -9 is the supervisor that died."""

HOW = ["SIGHUP", "SIGTERM", "SIGINT", "parent-killed"]


def children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        of = todo.pop()
        kids = [child for child, parent in parents.items() if parent == of]
        found += kids
        todo += kids
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def until(check: Callable[[], bool], what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {DEADLINE_S}s: {log and log.read_text()}"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def hangup_as_from_a_terminal() -> Iterator[None]:
    """The commands get SIGHUP at its default even when the tests run under ``nohup`` (a detached CI job): an
    ignored SIGHUP is inherited, and the commands respect it by design (kernel/signals.py, tested below)."""
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, before)


class Command:
    """``interlink-nats <args>`` started directly, or under a parent that the test kills -9."""

    def __init__(self, args: list[str], tmp_path: Path, how: str, env: dict[str, str] | None = None) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.log = tmp_path / "command.log"
        env = {**os.environ, "TMPDIR": str(self.tmp), **(env or {})}
        argv = [*CLI, *args]
        if how == "parent-killed":
            argv = [sys.executable, "-c", PARENT, *argv]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.how = how
        self.pid = self.proc.pid
        if how == "parent-killed":
            until(lambda: bool(children(self.proc.pid)), "the parent starting the command")
            self.pid = children(self.proc.pid)[0]

    def wait_for(self, text: str) -> None:
        until(lambda: text in self.log.read_text() or not alive(self.pid), f"{text!r} in the log", self.log)
        assert text in self.log.read_text(), self.log.read_text()

    def stop(self) -> list[int]:
        """Stop the command as ``how`` says; return the processes it had started."""
        spawned = children(self.pid)
        if self.how == "parent-killed":
            self.proc.kill()
            self.proc.wait()
        else:
            os.kill(self.pid, getattr(signal, self.how))
        until(lambda: not alive(self.pid), f"the command to exit after {self.how}", self.log)
        if self.how != "parent-killed":
            assert self.proc.wait(DEADLINE_S) == 0, self.log.read_text()
        return spawned

    def kill(self) -> None:
        for pid in [self.pid, *children(self.pid)]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def assert_nothing_left(self, spawned: list[int]) -> None:
        until(lambda: not any(alive(pid) for pid in spawned), "the command's children to exit", self.log)
        assert list(self.tmp.iterdir()) == [], f"left behind in TMPDIR: {list(self.tmp.iterdir())}"
        assert "Traceback" not in self.log.read_text(), self.log.read_text()


@pytest.mark.parametrize("how", HOW)
def test_up_leaves_no_process_no_job_and_no_temp_dir(how: str, tmp_path: Path) -> None:
    port = free_port()
    marker = f"up-job-{uuid.uuid4().hex}"
    command = Command(["up", "--http-port", str(port)], tmp_path, how)
    try:
        command.wait_for("is up")
        p = pod(containers={"main": ["sh", "-c", "while :; do sleep 1; done", marker]})
        created = httpx.post(f"http://127.0.0.1:{port}/create", json=[create_body(p)], timeout=30)
        assert created.status_code == 200, created.text
        until(lambda: bool(processes_mentioning(marker)), "the job to start")
        assert any(b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children(command.pid))
        spawned = command.stop()
        command.assert_nothing_left(spawned)
        assert processes_mentioning(marker) == [], f"{how} left the job running"
        assert processes_mentioning(str(command.tmp)) == [], f"{how} left the nats-server running"
    finally:
        command.kill()


def test_up_killed_9_takes_its_nats_server_with_it(tmp_path: Path) -> None:
    """Nothing can clean up after SIGKILL; the kernel still stops the nats-server (PR_SET_PDEATHSIG)."""
    command = Command(["up", "--http-port", str(free_port())], tmp_path, "SIGKILL")
    try:
        command.wait_for("is up")
        os.kill(command.pid, signal.SIGKILL)
        command.proc.wait()
        until(lambda: processes_mentioning(str(command.tmp)) == [], "the nats-server to exit")
    finally:
        command.kill()


@pytest.mark.parametrize("how", ["SIGTERM", "parent-killed"])
def test_gateway_stops_on_term_and_parent_death(how: str, nats_url: str, tmp_path: Path) -> None:
    """A daemon: SIGHUP re-reads its configuration instead (tests/submitter/test_reload.py)."""
    args = ["gateway", "--nats-url", nats_url, "--port", str(free_port()), "--default-pool", new_pool()]
    command = Command(args, tmp_path, how)
    try:
        command.wait_for("gateway listening")
        command.assert_nothing_left(command.stop())
        assert "gateway stopping" in command.log.read_text()
    finally:
        command.kill()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "parent-killed"])
def test_submitter_stops_on_every_stop_signal(how: str, nats_url: str, tmp_path: Path) -> None:
    args = ["submitter", "shell", "--nats-url", nats_url, "--pool", new_pool(), "--state-dir", str(tmp_path / "s")]
    command = Command(args, tmp_path, how)
    try:
        command.wait_for("serving pool")
        command.assert_nothing_left(command.stop())
        cause = "the parent process" if how == "parent-killed" else f"{how} received"
        assert f"stopping: {cause}" in command.log.read_text(), command.log.read_text()  # every stop says why
    finally:
        command.kill()


@pytest.mark.parametrize("how", ["SIGHUP", "SIGINT", "parent-killed"])
def test_controller_stops_on_hangup_interrupt_and_parent_death(how: str, tmp_path: Path) -> None:
    """The controller ran under a bare asyncio.run: Ctrl-C printed a KeyboardInterrupt traceback."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    command = Command(["controller", "run", "--probe-port", "0"], tmp_path, how, {"KUBECONFIG": str(kubeconfig)})
    try:
        command.wait_for("Kueue API not available")  # running, retrying against an API that is not there
        command.assert_nothing_left(command.stop())
    finally:
        command.kill()


def signal_mask(pid: int, field: str) -> int:
    """``SigIgn`` / ``SigCgt`` of /proc/<pid>/status: the signals a process ignores / catches, as a bit mask."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} for {pid}")


def test_a_command_started_under_nohup_keeps_ignoring_hangups_and_stops_on_term(nats_url: str, tmp_path: Path) -> None:
    args = ["submitter", "shell", "--nats-url", nats_url, "--pool", new_pool(), "--state-dir", str(tmp_path / "s")]
    hup = 1 << (signal.SIGHUP - 1)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does; the child inherits it
    try:
        command = Command(args, tmp_path, "SIGTERM")
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        command.wait_for("serving pool")  # its handlers are installed by then
        assert signal_mask(command.pid, "SigIgn") & hup, "the command stopped ignoring SIGHUP"
        assert not signal_mask(command.pid, "SigCgt") & hup
        assert signal_mask(command.pid, "SigCgt") & (1 << (signal.SIGTERM - 1))
        os.kill(command.pid, signal.SIGHUP)  # dropped by the kernel: ignored signals are never queued
        command.assert_nothing_left(command.stop())
    finally:
        command.kill()
