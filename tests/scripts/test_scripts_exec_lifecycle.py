"""Rendered scripts executed for real: containers' order, exit codes and files, cancel and deadlines.

Init containers in order and fail-fast, main containers concurrently, the exit file and change journal
as each ends; a cancel reaches every container (a TERM-ignoring one after the grace), activeDeadlineSeconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from script_runs import NONE, exit_code, log, pod, py, run
from script_runs import job_dir as job_dir


def test_exit_codes_and_first_failure(job_dir: Path) -> None:
    data = pod(
        [
            py("ok", "pass"),
            py("bad", "import time, sys; time.sleep(0.3); sys.exit(3)"),
            py("worse", "import time, sys; time.sleep(0.6); sys.exit(4)"),
            py("signal", "import os; os.kill(os.getpid(), 9)"),
        ]
    )
    assert run(job_dir, data) == 3
    assert [exit_code(job_dir, n) for n in ("ok", "bad", "worse", "signal")] == [0, 3, 4, 137]


def test_the_job_exits_with_the_first_failure_in_container_order_not_in_time(job_dir: Path) -> None:
    """Containers are collected as they end (one fork each, `wait -n`); the job's code keeps to container order."""
    late = "import os, sys, time; p = os.environ['INTERLINK_JOB_DIR'] + '/containers/early.exit'\n" + (
        "end = time.time() + 20\nwhile not os.path.exists(p) and time.time() < end: time.sleep(0.02)\nsys.exit(5)"
    )
    assert run(job_dir, pod([py("late", late), py("early", "import sys; sys.exit(6)")])) == 5
    assert [exit_code(job_dir, n) for n in ("late", "early")] == [5, 6]


def test_every_container_file_written_is_noted_in_the_change_journal(job_dir: Path) -> None:
    """Started and exit files each add the job directory's name to the journal next to it (the poll's hint)."""
    data = pod([py("ok", "pass"), py("bad", "import sys; sys.exit(3)")], init=[py("first", "pass")])
    assert run(job_dir, data) == 3
    lines = layout.changes_path(job_dir).read_text().splitlines()
    assert lines == [job_dir.name] * 6  # three containers, each started and exited


def test_init_fail_fast(job_dir: Path) -> None:
    data = pod(
        [py("main1", "open('ran', 'w')"), py("main2", "pass")],
        init=[
            py("init1", "print('first')"),
            py("init2", "import sys; print('boom'); sys.exit(7)"),
            py("init3", "open('init3-ran', 'w')"),
        ],
    )
    assert run(job_dir, data) == 7
    assert exit_code(job_dir, "init1") == 0
    assert exit_code(job_dir, "init2") == 7
    assert log(job_dir, "init2") == "boom\n"
    for name in ("init3", "main1", "main2"):
        assert exit_code(job_dir, name) == 7
        assert "init container init2 failed with exit code 7" in log(job_dir, name)
        assert not layout.started_path(job_dir, name).exists()
    assert not list(job_dir.rglob("ran"))
    assert not list(job_dir.rglob("init3-ran"))


def test_init_containers_in_order_then_mains(job_dir: Path) -> None:
    append = "import os, time; open(os.environ['INTERLINK_JOB_DIR'] + '/order', 'a').write('{}\\n')"
    data = pod([py("m", append.format("m"))], init=[py(f"i{k}", append.format(k)) for k in range(3)])
    assert run(job_dir, data) == 0
    assert (job_dir / "order").read_text().split() == ["0", "1", "2", "m"]


RENDEZVOUS = """
import os, sys, time
me, other = sys.argv[1], sys.argv[2]
d = os.environ["INTERLINK_JOB_DIR"]
open(os.path.join(d, me + ".ready"), "w").close()
deadline = time.time() + 20
while not os.path.exists(os.path.join(d, other + ".ready")):
    if time.time() > deadline:
        sys.exit(9)
    time.sleep(0.02)
"""


def test_main_containers_run_concurrently(job_dir: Path) -> None:
    data = pod([py("a", RENDEZVOUS, "a", "b"), py("b", RENDEZVOUS, "b", "a")])
    assert run(job_dir, data) == 0
    assert exit_code(job_dir, "a") == 0
    assert exit_code(job_dir, "b") == 0


def test_exit_file_written_when_each_container_ends(job_dir: Path) -> None:
    """A quick container's exit file appears while a slow one still runs (submitters report it early)."""
    slow = (
        "import os, time, sys; p = os.environ['INTERLINK_JOB_DIR'] + '/containers/fast.exit'\n"
        "end = time.time() + 20\nwhile not os.path.exists(p) and time.time() < end: time.sleep(0.02)\n"
        "sys.exit(0 if os.path.exists(p) else 5)"
    )
    assert run(job_dir, pod([py("slow", slow), py("fast", "pass")])) == 0


def start(job_dir: Path, data: dict[str, Any]) -> subprocess.Popen[bytes]:
    (job_dir / layout.SCRIPT_NAME).write_text(render_job(data, NONE).script)
    env = {**os.environ, layout.JOB_DIR_ENV: str(job_dir)}
    return subprocess.Popen(
        ["bash", layout.SCRIPT_NAME], cwd=job_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_for(path: Path, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def cancel(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    """SIGTERM the job script as a batch system's cancel does, again every second until it ends.

    Why again: bash can take a signal in the instant it reaps another child and leave its trap
    pending while it sleeps in ``wait`` for a container that only the trap would stop (seen once
    in a full suite on a loaded machine, right after container c ended). A second signal wakes it;
    the script's trap is idempotent, so what is asserted after is unchanged.
    """
    end = time.monotonic() + timeout
    while True:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            assert time.monotonic() < end, f"the job script ignored SIGTERM for {timeout} s"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


SLEEPER = """
import os, sys, time, subprocess
d = os.environ["INTERLINK_JOB_DIR"]
child = subprocess.Popen(["sleep", "300"])  # a grandchild must be stopped too
open(os.path.join(d, sys.argv[1] + ".pids"), "w").write(f"{os.getpid()} {child.pid}")
time.sleep(300)
"""


def test_cancel_reaches_every_container(job_dir: Path) -> None:
    data = pod([py("a", SLEEPER, "a"), py("b", SLEEPER, "b"), py("c", "import sys; sys.exit(0)")])
    proc = start(job_dir, data)
    for n in ("a", "b"):
        wait_for(job_dir / f"{n}.pids")
    wait_for(layout.exit_path(job_dir, "c"))
    assert cancel(proc) == 143
    assert exit_code(job_dir, "a") == 143
    assert exit_code(job_dir, "b") == 143
    assert exit_code(job_dir, "c") == 0
    pids = [int(p) for n in ("a", "b") for p in (job_dir / f"{n}.pids").read_text().split()]
    end = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in pids)
    assert not (job_dir / layout.VOLUMES_DIR).exists()


def test_cancel_during_init_reports_every_container(job_dir: Path) -> None:
    data = pod([py("main", "pass")], init=[py("init", SLEEPER, "init")])
    proc = start(job_dir, data)
    wait_for(job_dir / "init.pids")
    assert cancel(proc) == 143
    assert exit_code(job_dir, "init") == 143
    assert exit_code(job_dir, "main") == 143
    assert "cancelled" in log(job_dir, "main")


def wait_for_sleep(session: int, timeout: float = 20) -> None:
    """Until the container's ``sleep`` runs in the job's session (its shell has forked it): then bash is in
    its ``wait`` for the container, where the race is."""
    end = time.monotonic() + timeout
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm == "sleep" and int(stat[stat.rindex(")") + 2 :].split()[3]) == session:
                return
        assert time.monotonic() < end, "the container's sleep never started"
        time.sleep(0.02)


def test_a_term_to_every_process_at_once_reports_143_every_time(tmp_path: Path) -> None:
    """Slurm's cancel (slurmstepd) sends TERM to every process of the job at once: the script's trap and the
    container's own end race inside bash's ``wait``, where bash 5.2 can reap the container and lose its status.
    Every run must still record the TERM's 143 (never bash's -1) and end at once, not after the grace period's
    KILL (30 s by default)."""
    up = {"name": "main", "image": "unused", "command": ["sh", "-c", 'touch "$INTERLINK_JOB_DIR/up"; sleep 300']}
    for attempt in range(10):  # the race went the wrong way in about half the runs before the fix
        job_dir = tmp_path / f"job{attempt}"
        job_dir.mkdir()
        (job_dir / layout.SCRIPT_NAME).write_text(render_job(pod([up]), NONE).script)
        proc = subprocess.Popen(
            ["bash", layout.SCRIPT_NAME],
            cwd=job_dir,
            env={**os.environ, layout.JOB_DIR_ENV: str(job_dir)},
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(job_dir / "up")
        wait_for_sleep(proc.pid)
        subprocess.run(["pkill", "-TERM", "-s", str(proc.pid)], check=True)
        assert proc.wait(timeout=60) == 143, f"run {attempt}"
        assert exit_code(job_dir, "main") == 143, f"run {attempt}"


def test_term_ignoring_container_is_killed_after_grace(job_dir: Path) -> None:
    stubborn = (
        "import signal, time, os, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(os.environ['INTERLINK_JOB_DIR'] + '/up', 'w').close(); time.sleep(300)"
    )
    proc = start(job_dir, pod([py("main", stubborn)], terminationGracePeriodSeconds=1))
    wait_for(job_dir / "up")
    assert cancel(proc) == 137
    assert exit_code(job_dir, "main") == 137


def test_active_deadline_stops_the_pod(job_dir: Path) -> None:
    t0 = time.monotonic()
    assert run(job_dir, pod([py("main", "import time; time.sleep(60)")], activeDeadlineSeconds=1)) == 143
    assert time.monotonic() - t0 < 20
    assert exit_code(job_dir, "main") == 143
    assert layout.deadline_path(job_dir).exists()
