"""``interlink-nats up`` as a user runs it: a real process, a real port, Ctrl-C.

Each test failed before the fix it names: a taken port printed "is up" and then hung (only kill -9
ended it); Ctrl-C left a running job's processes behind in a deleted directory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from stack import create_body, free_port, pod

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 60.0


def processes_mentioning(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker`` (the job's own processes, wherever they live)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def start_up(port: int, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "up", "--http-port", str(port), "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


async def read_line_with(proc: subprocess.Popen[str], needle: str) -> str:
    """stdout up to the first line containing ``needle``, that line included (read on a thread: the pipe blocks)."""
    assert proc.stdout is not None

    def read() -> str:
        seen = ""
        for line in proc.stdout:  # type: ignore[union-attr]
            seen += line
            if needle in line:
                break
        return seen

    seen = await asyncio.wait_for(asyncio.to_thread(read), DEADLINE_S)
    assert needle in seen, f"up exited ({proc.poll()}) before printing {needle!r}: {proc.stderr.read()}"  # type: ignore[union-attr]
    return seen


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_taken_port_is_one_line_and_a_prompt_nonzero_exit(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_up(port, tmp_path)
        try:
            out, err = proc.communicate(timeout=DEADLINE_S)
        finally:
            stop(proc)
    assert proc.returncode == 1, (out, err)
    assert "is up" not in out
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == f"interlink-nats: error: cannot listen on 127.0.0.1:{port}: Address already in use", err
    assert not (tmp_path / "state" / "nats").exists(), "nothing else may start when the port is taken"


async def test_up_answers_when_it_says_so_and_ctrl_c_stops_running_jobs(tmp_path: Path) -> None:
    port = free_port()
    marker = f"up-job-{uuid.uuid4().hex}"
    proc = start_up(port, tmp_path)
    try:
        shown = await read_line_with(proc, "is up")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as http:
            # "is up" means every part answers: the gateway's health and a create that needs the pool.
            assert (await http.get("/healthz")).status_code == 200
            p = pod(containers={"main": ["sh", "-c", "while :; do sleep 1; done", marker]})
            created = await http.post("/create", json=[create_body(p)])
            assert created.status_code == 200, created.text
            deadline = time.monotonic() + DEADLINE_S
            while not processes_mentioning(marker):
                assert time.monotonic() < deadline, "the job never started"
                await asyncio.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = await asyncio.to_thread(proc.communicate, timeout=DEADLINE_S)
    finally:
        stop(proc)
    assert proc.returncode == 0, err
    assert "cancelled 1 running job(s)" in out
    assert processes_mentioning(marker) == [], "Ctrl-C of up left the job running"
    # What a user needs (where the gateway listens, the pool, how to stop) once, not thrice among the
    # parts' start-up logs; --log-level info shows those.
    everything = (shown + out + err).splitlines()
    address = [line for line in everything if f"127.0.0.1:{port}" in line]
    assert address == [shown.splitlines()[-1]], everything
    assert "pool 'local'" in address[0] and "Ctrl-C to stop" in address[0]
    assert [line for line in everything if " INFO " in line] == []
    # At the default level too, one line says that it stops and why (it was logged at info only).
    assert [line for line in everything if "stopping" in line] == ["interlink-nats: stopping: SIGINT received"]


async def test_up_stopped_by_term_leaves_no_process_of_a_pod_that_escaped_its_group(tmp_path: Path) -> None:
    """processes that setsid or double-fork, and ignore TERM, survived stopping ``up``."""
    port = free_port()
    marker = f"up-tree-{uuid.uuid4().hex}"
    ignore = "trap '' TERM; while :; do sleep 1; done"
    proc = start_up(port, tmp_path)
    try:
        await read_line_with(proc, "is up")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as http:
            p = pod(
                containers={
                    "setsider": ["sh", "-c", f'setsid sh -c "{ignore}" {marker} & {ignore}', marker],
                    "forker": ["sh", "-c", f'(sh -c "{ignore}" {marker} &); {ignore}', marker],
                }
            )
            p["spec"]["terminationGracePeriodSeconds"] = 2
            created = await http.post("/create", json=[create_body(p)])
            assert created.status_code == 200, created.text
            deadline = time.monotonic() + DEADLINE_S
            while len(processes_mentioning(marker)) < 4:
                assert time.monotonic() < deadline, "the job never started"
                await asyncio.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, timeout=DEADLINE_S)
    finally:
        stop(proc)
    assert proc.returncode == 0, err
    assert "cancelled 1 running job(s)" in out
    assert [line for line in (out + err).splitlines() if "stopping" in line] == [
        "interlink-nats: stopping: SIGTERM received"
    ]
    assert processes_mentioning(marker) == [], "stopping up left the pod's escaped processes running"


@pytest.mark.parametrize("flag", ["--http-port", "--pool"])
def test_make_up_passes_args_through(flag: str) -> None:
    """`make up ARGS="…"` reaches the command (dry run of make: nothing starts)."""
    root = Path(__file__).resolve().parents[2]
    shown = subprocess.run(
        ["make", "-n", "-C", str(root), "up", f"ARGS={flag} x"], capture_output=True, text=True, check=True
    ).stdout
    assert f"interlink-nats up {flag} x" in shown


def test_make_up_installs_only_what_up_runs_and_make_test_adds_the_dev_tools(tmp_path: Path) -> None:
    """Two stamps: `up` needs .[all]; `test` .[all,dev], whose stamp satisfies `up` too (switching costs nothing)."""
    root = Path(__file__).resolve().parents[2]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)

    def planned(target: str) -> str:
        return subprocess.run(
            ["make", "-n", "-C", str(root), target, f"VENV={venv}", "PYTEST_ARGS=--co"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    fresh = planned("up")
    assert '-e ".[all]"' in fresh and "all,dev" not in fresh
    assert '-e ".[all,dev]"' in planned("test")
    (venv / ".installed-dev").touch()
    (venv / ".installed-all").touch()  # what the dev install leaves
    assert "pip" not in planned("up"), "make up after make test must not reinstall"
    (venv / ".installed-dev").unlink()
    assert '-e ".[all,dev]"' in planned("test"), "make test after make up must add the dev tools"
