"""Lifecycle hooks executed for real (bash, runtime ``none``): postStart beside the container and its failure,
preStop before the TERM and inside the grace period, exec/httpGet/sleep handlers, hostile values inert.

Synchronised on files the containers and hooks write; no fixed sleeps decide a result.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.status import ContainerFiles, JobMeta, map_status
from interlink_nats.submitters.jobdirs.files import read_container_files
from script_runs import PY, exit_code, log, pod, py, run
from script_runs import job_dir as job_dir
from test_scripts_exec_lifecycle import cancel, start, wait_for
from test_scripts_property import CANARY, INJECTIONS

# A container that notes a TERM (and whether the preStop marker was there by then), then ends with 143.
TERM_NOTER = """
import os, signal, sys, time
d = os.environ["INTERLINK_JOB_DIR"]
def on_term(*_):
    open(os.path.join(d, "termed"), "w").write("after-prestop" if os.path.exists(os.path.join(d, "prestop")) else "no")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(d, "up"), "w").close()
time.sleep(300)
"""


def shell(*script: str) -> dict[str, Any]:
    return {"exec": {"command": ["sh", "-c", "; ".join(script)]}}


def files(job_dir: Path, name: str) -> ContainerFiles:
    return read_container_files(job_dir, [name])[name]


def test_post_start_runs_beside_the_container_in_its_environment(job_dir: Path) -> None:
    waits = "import os, time\nwhile not os.path.exists('from-hook'): time.sleep(0.02)\nprint('hook seen')"
    hook = shell('printf "%s %s" "$GREETING" "$PWD" > from-hook')
    c = py("main", waits, env=[{"name": "GREETING", "value": "hi there"}], lifecycle={"postStart": hook})
    assert run(job_dir, pod([c])) == 0
    assert "hook seen" in log(job_dir, "main")
    seen = files(job_dir, "main")
    assert (seen.exit_code, seen.reason, seen.message) == (0, "", "")


def test_a_container_is_reported_running_once_its_post_start_completes(job_dir: Path) -> None:
    """As on a node: waiting while the hook runs (no start file), then running with the launch's start time."""
    gate = job_dir / "gate"
    hook = shell(f"while [ ! -e {gate} ]; do sleep 0.02; done")
    up = "import os; open(os.path.join(os.environ['INTERLINK_JOB_DIR'], 'up'), 'w').close()\n"
    c = py("main", up + "import time\nwhile not os.path.exists('../../end'): time.sleep(0.02)")
    c["lifecycle"] = {"postStart": hook}
    launched = time.time()
    proc = start(job_dir, pod([c]))
    wait_for(job_dir / "up")
    assert files(job_dir, "main").started_at is None
    gate.touch()
    wait_for(layout.started_path(job_dir, "main"))
    started = files(job_dir, "main").started_at
    assert started is not None and launched - 1 <= started <= launched + 5, "the launch's time, not the hook's end"
    (job_dir / "end").touch()
    assert proc.wait(timeout=60) == 0


def test_a_failing_post_start_kills_the_container_with_reason_failed_post_start_hook(job_dir: Path) -> None:
    # The hook fails once the container is up (its TERM handler set): a TERM that reaches a container in the
    # instant between its fork and bash resetting the traps it inherited is dropped (bash's trap_handler, then
    # reset_signal_handlers), and it would end by the KILL after the grace period instead: seen once under load.
    up = 'while [ ! -e "$INTERLINK_JOB_DIR/up" ]; do sleep 0.02; done'
    c = py("main", TERM_NOTER, lifecycle={"postStart": shell(up, "echo hook says no", "exit 3")})
    other = py("other", "pass")
    assert run(job_dir, pod([c, other], terminationGracePeriodSeconds=5)) == 143
    seen = files(job_dir, "main")
    assert (seen.exit_code, seen.reason) == (143, "FailedPostStartHook")
    assert seen.message == "PostStartHookError: the postStart hook failed with exit code 3"
    assert "hook says no" in log(job_dir, "main")
    assert exit_code(job_dir, "other") == 0 and files(job_dir, "other").reason == ""
    meta = JobMeta("u", "ns", "p", "pool", "1", (), ("main", "other"), "shell")
    status = map_status(
        meta, Observation(BackendState.FAILED, 143), read_container_files(job_dir, ["main", "other"]), now=0
    )
    main, _ = status.containers
    assert (main.reason, main.exit_code) == ("FailedPostStartHook", 143), "as /status shows it"
    assert main.message.startswith("PostStartHookError")


def test_pre_stop_runs_before_the_term_on_cancel(job_dir: Path) -> None:
    c = py("main", TERM_NOTER, lifecycle={"preStop": shell("echo stopping", ': > "$INTERLINK_JOB_DIR/prestop"')})
    plain = py("plain", TERM_NOTER.replace('"up"', '"up2"').replace('"termed"', '"termed2"'))
    proc = start(job_dir, pod([c, plain], terminationGracePeriodSeconds=20))
    wait_for(job_dir / "up")
    wait_for(job_dir / "up2")
    assert cancel(proc) == 143
    assert (job_dir / "termed").read_text() == "after-prestop"
    assert exit_code(job_dir, "main") == 143 and exit_code(job_dir, "plain") == 143
    assert "stopping" in log(job_dir, "main")


def test_a_pre_stop_hook_counts_in_the_grace_period(job_dir: Path) -> None:
    """A hook longer than the grace period: the container never gets its TERM, only the KILL at the end."""
    c = py("main", TERM_NOTER, lifecycle={"preStop": {"sleep": {"seconds": 120}}})
    proc = start(job_dir, pod([c], terminationGracePeriodSeconds=1))
    wait_for(job_dir / "up")
    t0 = time.monotonic()
    assert cancel(proc, timeout=60) == 137
    assert time.monotonic() - t0 < 30, "killed at the end of the grace period, not after the hook"
    assert exit_code(job_dir, "main") == 137
    assert not (job_dir / "termed").exists()


def test_a_pre_stop_runs_on_the_deadline_too(job_dir: Path) -> None:
    c = py("main", TERM_NOTER, lifecycle={"preStop": shell(': > "$INTERLINK_JOB_DIR/prestop"')})
    assert run(job_dir, pod([c], activeDeadlineSeconds=1)) == 143
    assert (job_dir / "termed").read_text() == "after-prestop"


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, dict[str, str]]] = []
    status = 200
    answer_once: Path | None = None
    """The answer waits until this file exists (the container is up: see the failing postStart test)."""

    def do_GET(self) -> None:
        type(self).seen.append((self.path, dict(self.headers.items())))
        gate, end = type(self).answer_once, time.monotonic() + 30
        while gate is not None and not gate.exists() and time.monotonic() < end:
            time.sleep(0.02)
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def server() -> Iterator[tuple[int, type[_Recorder]]]:
    handler = type("Recorder", (_Recorder,), {"seen": [], "status": 200, "answer_once": None})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1], handler
    finally:
        srv.shutdown()
        srv.server_close()


def test_http_get_hooks_reach_a_named_port_with_their_path_and_headers(
    job_dir: Path, server: tuple[int, type[_Recorder]]
) -> None:
    port, recorder = server
    hostile = "$(touch /tmp/x) `id` 'q' \"d\" ; \\ é"
    get = {"port": "web", "path": "/ready?x=$(id)&y='1'", "httpHeaders": [{"name": "X-Probe", "value": hostile}]}
    c = py(
        "main",
        TERM_NOTER,
        ports=[{"name": "web", "containerPort": port}],
        lifecycle={"postStart": {"httpGet": get}, "preStop": {"httpGet": {"port": port, "path": "/stop"}}},
    )
    proc = start(job_dir, pod([c]))
    wait_for(job_dir / "up")
    end = time.monotonic() + 20
    while not recorder.seen:
        assert time.monotonic() < end, "the postStart request never came"
        time.sleep(0.02)
    assert cancel(proc) == 143
    paths = [p for p, _ in recorder.seen]
    assert paths == ["/ready?x=$(id)&y='1'", "/stop"]
    assert recorder.seen[0][1]["X-Probe"].encode("latin-1").decode() == hostile  # http.server reads latin-1
    assert files(job_dir, "main").reason == "", "a 200 is a success"


def test_an_http_get_post_start_answered_500_fails(job_dir: Path, server: tuple[int, type[_Recorder]]) -> None:
    port, recorder = server
    recorder.status = 500
    recorder.answer_once = job_dir / "up"  # the failure reaches a container that is up (see the exec test above)
    c = py("main", TERM_NOTER, lifecycle={"postStart": {"httpGet": {"port": port}}})
    assert run(job_dir, pod([c], terminationGracePeriodSeconds=5)) == 143
    assert files(job_dir, "main").reason == "FailedPostStartHook"
    assert [p for p, _ in recorder.seen] == ["/"]


@pytest.mark.parametrize("value", INJECTIONS)
def test_hostile_hook_words_stay_inert(job_dir: Path, value: str) -> None:
    """Each corpus value as an exec word: passed as data, never read by the shell."""
    CANARY.unlink(missing_ok=True)
    out = "os.path.join(os.environ['INTERLINK_JOB_DIR'], 'argv.json')"
    record = f"import json, os, sys; open({out}, 'w').write(json.dumps(sys.argv[1:]))"
    waits = f"import os, time\nwhile not os.path.exists({out}): time.sleep(0.02)"
    c = py("main", waits, lifecycle={"postStart": {"exec": {"command": [PY, "-c", record, value]}}})
    assert run(job_dir, pod([c])) == 0
    assert json.loads((job_dir / "argv.json").read_text()) == [value]
    assert not CANARY.exists()
