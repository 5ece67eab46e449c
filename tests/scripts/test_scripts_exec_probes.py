"""Probes executed for real (bash, runtime ``none``): readiness reaching the status as ``ready``, a liveness
failure stopping the container with its reason, a startup probe gating liveness, tcpSocket, refusals by name.

Synchronised on files the containers and probes write; the probes' own periods are the only waits.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway.wire import container_status_json
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.status import JobMeta, map_status
from interlink_nats.submitters.jobdirs.files import read_container_files
from render_cases import ctr, data, rejected
from script_runs import PY, pod, py
from script_runs import job_dir as job_dir
from test_scripts_exec_lifecycle import cancel, start, wait_for
from test_scripts_property import CANARY, INJECTIONS

SERVER = """
import http.server, os, sys, time
d = os.environ["INTERLINK_JOB_DIR"]
open(os.path.join(d, "up"), "w").close()
while not os.path.exists(os.path.join(d, "serve")):
    time.sleep(0.02)
srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)
srv.serve_forever()
"""
WAITER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
open(os.path.join(os.environ["INTERLINK_JOB_DIR"], "up"), "w").close()
time.sleep(300)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def container(job_dir: Path) -> pb.ContainerStatus:
    meta = JobMeta("u", "ns", "p", "pool", "1", (), ("main",), "shell")
    files = read_container_files(job_dir, ["main"])
    return map_status(meta, Observation(BackendState.RUNNING), files, now=0).containers[0]


def eventually(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_readiness_reaches_the_status_not_ready_until_the_server_answers(job_dir: Path) -> None:
    port = free_port()
    probe = {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 1, "failureThreshold": 1}
    c = py("main", SERVER, str(port), ports=[{"name": "http", "containerPort": port}], readinessProbe=probe)
    proc = start(job_dir, pod([c]))
    wait_for(job_dir / "up")
    eventually(lambda: (job_dir / "containers" / "main.started").exists(), "the start")
    status = container(job_dir)
    assert status.phase == pb.ContainerPhase.RUNNING and status.ready is False
    assert container_status_json(status, "img")["ready"] is False
    (job_dir / "serve").touch()
    eventually(lambda: container(job_dir).ready is True, "ready after the server answers")
    assert container_status_json(container(job_dir), "img")["ready"] is True
    assert cancel(proc) == 143


def test_a_container_without_a_readiness_probe_is_ready_while_running(job_dir: Path) -> None:
    proc = start(job_dir, pod([py("main", WAITER)]))
    wait_for(job_dir / "up")
    status = container(job_dir)
    assert status.ready is None and container_status_json(status, "img")["ready"] is True
    cancel(proc)


def test_a_failing_liveness_probe_stops_the_container_with_its_reason(job_dir: Path) -> None:
    alive = job_dir / "alive"
    alive.touch()
    probe = {"exec": {"command": ["test", "-e", str(alive)]}, "periodSeconds": 1, "failureThreshold": 2}
    c = py("main", WAITER, livenessProbe=probe)
    proc = start(job_dir, pod([c], terminationGracePeriodSeconds=5))
    wait_for(job_dir / "up")
    alive.unlink()
    assert proc.wait(timeout=60) == 143
    seen = read_container_files(job_dir, ["main"])["main"]
    assert (seen.exit_code, seen.reason, seen.message) == (143, "Unhealthy", "Liveness probe failed 2 times in a row")


def test_a_startup_probe_gates_liveness(job_dir: Path) -> None:
    tries = job_dir / "startup-tries"
    startup = {
        "exec": {"command": ["sh", "-c", f'echo x >> {tries}; test -e "{job_dir}/started-ok"']},
        "periodSeconds": 1,
        "failureThreshold": 1000,
    }
    liveness = {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}
    c = py("main", WAITER, startupProbe=startup, livenessProbe=liveness)
    proc = start(job_dir, pod([c], terminationGracePeriodSeconds=5))
    wait_for(job_dir / "up")
    eventually(lambda: tries.exists() and len(tries.read_text().split()) >= 3, "three startup tries")
    assert proc.poll() is None, "liveness does not run before startup passes"
    (job_dir / "started-ok").touch()
    assert proc.wait(timeout=60) == 143
    assert read_container_files(job_dir, ["main"])["main"].message.startswith("Liveness probe failed")


def test_a_startup_probe_that_fails_stops_the_container(job_dir: Path) -> None:
    startup = {"tcpSocket": {"port": free_port()}, "periodSeconds": 1, "failureThreshold": 2}
    proc = start(job_dir, pod([py("main", WAITER, startupProbe=startup)], terminationGracePeriodSeconds=5))
    assert proc.wait(timeout=60) == 143
    seen = read_container_files(job_dir, ["main"])["main"]
    assert (seen.reason, seen.message) == ("Unhealthy", "Startup probe failed 2 times in a row")


def test_a_tcp_socket_readiness_probe(job_dir: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = {"tcpSocket": {"port": port}, "periodSeconds": 1}
        proc = start(job_dir, pod([py("main", WAITER, readinessProbe=probe)]))
        wait_for(job_dir / "up")
        eventually(lambda: container(job_dir).ready is True, "ready on an open port")
        cancel(proc)


@pytest.mark.parametrize(
    ("c", "field", "words"),
    [
        (ctr(livenessProbe={"grpc": {"port": 1}}), "livenessProbe.grpc", "no gRPC health client"),
        (ctr(livenessProbe={"exec": {"command": ["x"]}, "successThreshold": 2}), "successThreshold", "must be 1"),
        (ctr(readinessProbe={"exec": {"command": ["x"]}, "periodSeconds": -1}), "periodSeconds", "at least 1"),
        (ctr(readinessProbe={"tcpSocket": {"port": "nope"}}), "tcpSocket.port", "no port named 'nope'"),
        (ctr(startupProbe={}), "startupProbe", "exactly one of exec, httpGet or tcpSocket"),
        (
            ctr(readinessProbe={"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 3}),
            "terminationGracePeriodSeconds",
            "pod's grace period",
        ),
    ],
)
def test_a_probe_that_cannot_run_faithfully_is_refused_by_name(c: dict[str, Any], field: str, words: str) -> None:
    err = rejected(data([c]))
    assert err.field.startswith("spec.containers[0].") and err.field.endswith(field)
    assert words in err.message


def test_init_containers_may_not_have_probes() -> None:
    err = rejected(data([ctr()], init=[ctr("i", readinessProbe={"exec": {"command": ["x"]}})]))
    assert err.field == "spec.initContainers[0].readinessProbe"


@pytest.mark.parametrize("value", INJECTIONS)
def test_hostile_probe_words_stay_inert(job_dir: Path, value: str) -> None:
    """Each corpus value as an exec probe's word: passed as data (the probe passes only if it arrives intact)."""
    CANARY.unlink(missing_ok=True)
    expected = job_dir / "expected.json"
    expected.write_text(json.dumps([value]))
    check = f"import json, sys; sys.exit(0 if sys.argv[1:] == json.load(open({str(expected)!r})) else 1)"
    probe = {"exec": {"command": [PY, "-c", check, value]}, "periodSeconds": 1}
    proc = start(job_dir, pod([py("main", WAITER, readinessProbe=probe)]))
    wait_for(job_dir / "up")
    eventually(lambda: container(job_dir).ready is True, "the probe to pass with its word intact")
    cancel(proc)
    assert not CANARY.exists()
