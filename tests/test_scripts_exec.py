"""Rendered scripts executed for real by bash with runtime `none`: files, env, argv, exit codes, init
fail-fast, concurrency, cancel and deadline, all observed through the job directory contract (layout.py)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.jobdirs.files import prepare_job_dir

NONE = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)
PY = sys.executable
BASH = shutil.which("bash") or "/bin/bash"

# A container program: dumps argv, env, cwd and every file of its rootfs (content + mode) as JSON.
DUMP = r"""
import json, os, sys, base64
roots = [os.environ["INTERLINK_ROOTFS"]]
files = {}
for r in roots:
    for d, _, names in os.walk(r, followlinks=True):
        for n in names:
            p = os.path.join(d, n)
            files[os.path.relpath(p, r)] = {"b64": base64.b64encode(open(p, "rb").read()).decode(),
                                            "mode": os.stat(p).st_mode & 0o777}
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "files": files}))
"""


def pod(
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "00000000-0000-0000-0000-000000000001",
                "labels": {"app": "x"},
            },
            "spec": {"containers": containers, "initContainers": init or [], "volumes": volumes or [], **spec},
        },
        "container": [],
    }


def py(name: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "unused", "command": [PY, "-c", code], "args": list(args), **extra}


def run(job_dir: Path, data: dict[str, Any], timeout: float = 60, *, prepared: bool = False, path: str = "") -> int:
    """Run the script in ``job_dir``: written alone (the script makes its own layout), or ``prepared`` by
    the submitter's ``prepare_job_dir``; ``path`` replaces PATH."""
    job = render_job(data, NONE)
    script = job.script
    if prepared:
        prepare_job_dir(job_dir, script, job.layout)
    else:
        (job_dir / layout.SCRIPT_NAME).write_text(script)
    env = {**os.environ, layout.JOB_DIR_ENV: str(job_dir), **({"PATH": path} if path else {})}
    proc = subprocess.run(
        [BASH, layout.SCRIPT_NAME], cwd=job_dir, env=env, timeout=timeout, capture_output=True, text=True
    )
    return proc.returncode


def exit_code(job_dir: Path, name: str) -> int:
    return int(layout.exit_path(job_dir, name).read_text())


def log(job_dir: Path, name: str) -> str:
    return layout.log_path(job_dir, name).read_text()


def dump(job_dir: Path, name: str) -> dict[str, Any]:
    return json.loads(log(job_dir, name).strip().splitlines()[-1])


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    return d


def test_env_argv_cwd_arrive_exactly(job_dir: Path) -> None:
    weird = 'it\'s "$(whoami)" `id` $HOME * ? [a] \\ \n\ttab ünï €'
    c = py(
        "main",
        DUMP,
        "plain",
        weird,
        "$(GREETING) and $$(GREETING) and $(UNSET)",
        "",
        env=[
            {"name": "GREETING", "value": "hi"},
            {"name": "WEIRD", "value": weird},
            {"name": "REF", "value": "<$(GREETING)>"},
            {"name": "my-dashed.name", "value": "ok"},
            {"name": "EMPTY", "value": ""},
            {"name": "DUP", "value": "1"},
            {"name": "DUP", "value": "2"},
        ],
    )
    assert run(job_dir, pod([c])) == 0
    out = dump(job_dir, "main")
    assert out["argv"] == ["plain", weird, "hi and $(GREETING) and $(UNSET)", ""]
    env = out["env"]
    assert env["WEIRD"] == weird
    assert env["REF"] == "<hi>"
    assert env["my-dashed.name"] == "ok"
    assert env["EMPTY"] == ""
    assert env["DUP"] == "2"
    assert env[layout.ROOTFS_ENV] == str(job_dir / layout.ROOTFS_DIR / "main")
    assert env[layout.JOB_DIR_ENV] == str(job_dir)
    assert out["cwd"] == str(job_dir / layout.ROOTFS_DIR / "main")
    assert exit_code(job_dir, "main") == 0
    started = int(layout.started_path(job_dir, "main").read_text())
    assert abs(started - time.time()) < 60


def test_cwd_from_job_dir_without_env_var(job_dir: Path) -> None:
    """Submitters may rely on the cwd alone."""
    (job_dir / layout.SCRIPT_NAME).write_text(render_job(pod([py("main", "print('ok')")]), NONE).script)
    env = {k: v for k, v in os.environ.items() if k != layout.JOB_DIR_ENV}
    assert subprocess.run(["bash", layout.SCRIPT_NAME], cwd=job_dir, env=env, timeout=30).returncode == 0
    assert log(job_dir, "main") == "ok\n"
    assert job_dir.stat().st_mode & 0o777 == 0o700


def volume_pod(tmp_path: Path) -> dict[str, Any]:
    host = tmp_path / "host"
    host.mkdir()
    (host / "h.txt").write_text("from host")
    mounts = [
        {"name": "cfg", "mountPath": "/etc/cfg"},
        {"name": "items", "mountPath": "/etc/items"},
        {"name": "sec", "mountPath": "/sec", "readOnly": True},
        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        {"name": "downward", "mountPath": "/info"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "host", "mountPath": "/host"},
        {"name": "cfg", "mountPath": "/app/app.conf", "subPath": "app.conf"},
    ]
    c = py("main", DUMP, volumeMounts=mounts)
    data = pod(
        [c],
        volumes=[
            {"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 0o644}},
            {
                "name": "items",
                "configMap": {
                    "name": "app-config",
                    "items": [
                        {"key": "app.conf", "path": "sub/dir/renamed.conf", "mode": 0o400},
                        {"key": "blob", "path": "blob.bin"},
                    ],
                },
            },
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o644}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {
                "name": "downward",
                "downwardAPI": {
                    "items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                    ]
                },
            },
            {"name": "scratch", "emptyDir": {}},
            {"name": "host", "hostPath": {"path": str(host), "type": "Directory"}},
            {"name": "unused", "secret": {"secretName": "creds"}},
        ],
    )
    data["container"] = [
        {
            "name": "main",
            "configMaps": [
                {
                    "metadata": {"name": "app-config"},
                    "data": {"app.conf": "x=1\n"},
                    "binaryData": {"blob": base64.b64encode(b"\x00\xff\x01").decode()},
                }
            ],
            "secrets": [
                {
                    "metadata": {"name": "creds"},
                    "data": {
                        "password": base64.b64encode(b"hunter2\n").decode(),
                        "key.bin": base64.b64encode(b"\x00\x01").decode(),
                    },
                }
            ],
            "projectedvolumemaps": [
                {
                    "metadata": {"name": "token"},
                    "data": {"token": "eyJ.tok", "ca.crt": "-----BEGIN-----\nX\n", "namespace": "ns"},
                }
            ],
        }
    ]
    return data


def only_commands(tmp_path: Path, *names: str) -> str:
    """A PATH with only these commands: a script that needs another one fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    return str(bin_dir)


@pytest.mark.parametrize("prepared", [False, True], ids=["own-setup", "prepared"])
def test_volumes_content_and_modes(job_dir: Path, tmp_path: Path, prepared: bool) -> None:
    """The same files, modes and mounts whether the script makes the layout or the submitter did."""
    assert run(job_dir, volume_pod(tmp_path), prepared=prepared) == 0
    files = dump(job_dir, "main")["files"]

    def f(path: str) -> tuple[bytes, int]:
        return base64.b64decode(files[path]["b64"]), files[path]["mode"]

    assert f("etc/cfg/app.conf") == (b"x=1\n", 0o644)
    assert f("etc/cfg/blob") == (b"\x00\xff\x01", 0o644)
    assert f("etc/items/sub/dir/renamed.conf") == (b"x=1\n", 0o400)
    assert f("etc/items/blob.bin") == (b"\x00\xff\x01", 0o644)
    assert "etc/items/app.conf" not in files
    assert f("sec/password") == (b"hunter2\n", 0o600)
    assert f("sec/key.bin") == (b"\x00\x01", 0o600)
    sa = "var/run/secrets/kubernetes.io/serviceaccount"
    assert f(f"{sa}/token") == (b"eyJ.tok", 0o600)
    assert f(f"{sa}/ca.crt") == (b"-----BEGIN-----\nX\n", 0o600)
    assert f("info/name")[0] == b"p"
    assert f("info/app")[0] == b"x"
    assert f("info/labels")[0] == b'app="x"'
    assert f("host/h.txt")[0] == b"from host"
    assert f("app/app.conf") == (b"x=1\n", 0o644)
    # Volume data (secrets included) is removed when the job ends; logs and exit files stay.
    assert not (job_dir / layout.VOLUMES_DIR).exists()
    assert not (job_dir / layout.ROOTFS_DIR).exists()
    assert not (job_dir / layout.PREPARED_FILE).is_symlink(), "a rerun makes its own layout again"
    assert (tmp_path / "host" / "h.txt").exists()
    assert exit_code(job_dir, "main") == 0


@pytest.mark.parametrize("prepared", [False, True], ids=["own-setup", "prepared"])
def test_secret_files_are_private_while_running(job_dir: Path, tmp_path: Path, prepared: bool) -> None:
    """Look at the host side: job dir 0700, secret files 0600 in volumes/ while the container runs."""
    job_dir.chmod(0o755)
    data = volume_pod(tmp_path)
    check = (
        "import os, stat, json; v = os.environ['INTERLINK_JOB_DIR'] + '/volumes';"
        "print(json.dumps({p: os.stat(os.path.join(v, p)).st_mode & 0o777 for p in"
        " ['sec', 'sec/password', 'cfg', 'cfg/app.conf', 'scratch', '.']}))"
    )
    data["pod"]["spec"]["containers"][0]["command"] = [PY, "-c", check]
    data["pod"]["spec"]["containers"][0]["args"] = []
    assert run(job_dir, data, prepared=prepared) == 0
    modes = json.loads(log(job_dir, "main"))
    assert modes == {
        "sec": 0o700,
        "sec/password": 0o600,
        "cfg": 0o755,
        "cfg/app.conf": 0o644,
        "scratch": 0o777,
        ".": 0o700,
    }


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
    assert (job_dir / layout.DEADLINE_FILE).exists()


def test_host_path_check_failure_fails_every_container(job_dir: Path, tmp_path: Path) -> None:
    data = pod(
        [py("main", "open('ran', 'w')")],
        init=[py("init", "pass")],
        volumes=[{"name": "h", "hostPath": {"path": str(tmp_path / "missing"), "type": "Directory"}}],
    )
    data["pod"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/h"}]
    assert run(job_dir, data) == 125
    assert exit_code(job_dir, "init") == 125
    assert exit_code(job_dir, "main") == 125
    assert "pod setup failed" in log(job_dir, "main")


@pytest.mark.parametrize("prepared", [False, True], ids=["own-setup", "prepared"])
def test_working_dir_and_shared_empty_dir(job_dir: Path, prepared: bool) -> None:
    writer = py(
        "writer",
        "open('shared.txt', 'w').write('hello')",
        workingDir="/work",
        volumeMounts=[{"name": "scratch", "mountPath": "/work"}],
    )
    reader = py(
        "reader",
        "import os; print(open(os.environ['INTERLINK_ROOTFS'] + '/data/shared.txt').read())",
        workingDir="/somewhere/else",
        volumeMounts=[{"name": "scratch", "mountPath": "/data"}],
    )
    data = pod([reader], init=[writer], volumes=[{"name": "scratch", "emptyDir": {}}])
    assert run(job_dir, data, prepared=prepared) == 0
    assert log(job_dir, "reader") == "hello\n"


def test_pre_exec_runs_before_containers(job_dir: Path) -> None:
    data = pod([py("main", "import os; print(os.environ['FROM_PRE_EXEC'])")])
    data["pod"]["metadata"]["annotations"] = {"slurm-job.vk.io/pre-exec": "export FROM_PRE_EXEC=yes\n"}
    assert run(job_dir, data) == 0
    assert log(job_dir, "main") == "yes\n"


def test_mpi_flags_prefix_the_command(job_dir: Path) -> None:
    data = pod([py("main", DUMP, "x")])
    data["pod"]["metadata"]["annotations"] = {"slurm-job.vk.io/mpi-flags": "env MPI_WRAPPED='a b'"}
    assert run(job_dir, data) == 0
    assert dump(job_dir, "main")["env"]["MPI_WRAPPED"] == "a b"


@pytest.mark.parametrize("prepared", [False, True], ids=["own-setup", "prepared"])
def test_empty_dir_sub_path_is_created_and_pre_exec_cd_is_harmless(job_dir: Path, prepared: bool) -> None:
    c = py(
        "main",
        "import os; open('out.txt', 'w').write('x'); print(os.path.realpath('.'))",
        workingDir="/w",
        volumeMounts=[{"name": "scratch", "mountPath": "/w", "subPath": "a/b"}],
    )
    data = pod([c], volumes=[{"name": "scratch", "emptyDir": {}}])
    data["pod"]["metadata"]["annotations"] = {"slurm-job.vk.io/pre-exec": "cd /"}
    assert run(job_dir, data, prepared=prepared) == 0
    assert log(job_dir, "main").strip() == str(job_dir / layout.VOLUMES_DIR / "scratch" / "a" / "b")


def test_prepared_layout_of_directories_needs_no_marker(job_dir: Path, tmp_path: Path) -> None:
    """A layout without links (runtime none, no volumes: each container's rootfs directory) is tested entry by
    entry: prepared, the script runs no mkdir/chmod and the submitter made no ``.prepared``; after the clean-up
    removed the rootfs, a rerun finds the layout gone and makes it itself."""
    data = pod([py("main", "import os; print(os.getcwd() == os.environ['INTERLINK_ROOTFS'])", workingDir="/")])
    path = only_commands(tmp_path, "env", "rm")
    assert run(job_dir, data, prepared=True, path=path) == 0
    assert log(job_dir, "main") == "True\n"
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()
    assert not (job_dir / layout.ROOTFS_DIR).exists()
    layout.exit_path(job_dir, "main").unlink()
    (job_dir / layout.CONTAINERS_DIR / f"main{layout.LOG_SUFFIX}").unlink()
    assert run_written(job_dir) == 0
    assert log(job_dir, "main") == "True\n"


def test_layout_prepared_for_another_path_is_not_trusted(job_dir: Path, tmp_path: Path) -> None:
    """The submitter's links point into the job dir as it named it: when that name leads elsewhere on the
    node running the script (another file system mounted there), the script makes its own layout."""
    data = job_dir_volume_pod(tmp_path)
    job = render_job(data, NONE)
    prepare_job_dir(job_dir, job.script, job.layout)
    shutil.rmtree(job_dir / layout.VOLUMES_DIR)  # trusting the layout would fail to write the files
    (job_dir / layout.PREPARED_FILE).unlink()
    (tmp_path / "elsewhere").mkdir()
    (job_dir / layout.PREPARED_FILE).symlink_to(tmp_path / "elsewhere")
    assert run_written(job_dir) == 0
    files = dump(job_dir, "main")["files"]
    assert base64.b64decode(files["etc/cfg/app.conf"]["b64"]) == b"x=1\n"
    assert base64.b64decode(files["sec/password"]["b64"]) == b"hunter2\n"


def test_rerun_of_a_prepared_job_makes_its_own_layout(job_dir: Path, tmp_path: Path) -> None:
    """The clean-up removes .prepared with the volumes: a rerun (Slurm requeue) sets the pod up again."""
    assert run(job_dir, volume_pod(tmp_path), prepared=True) == 0
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()
    layout.exit_path(job_dir, "main").unlink()
    assert run_written(job_dir) == 0
    assert base64.b64decode(dump(job_dir, "main")["files"]["etc/cfg/app.conf"]["b64"]) == b"x=1\n"
    assert exit_code(job_dir, "main") == 0


def run_written(job_dir: Path) -> int:
    """Run the script already in ``job_dir``."""
    env = {**os.environ, layout.JOB_DIR_ENV: str(job_dir)}
    return subprocess.run(["bash", layout.SCRIPT_NAME], cwd=job_dir, env=env, timeout=60).returncode


def job_dir_volume_pod(tmp_path: Path) -> dict[str, Any]:
    """:func:`volume_pod` without its hostPath volume: every mount is below the job dir."""
    data = volume_pod(tmp_path)
    spec = data["pod"]["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "host"]
    mounts = spec["containers"][0]["volumeMounts"]
    spec["containers"][0]["volumeMounts"] = [m for m in mounts if m["name"] != "host"]
    return data


def test_prepared_job_runs_no_set_up_command(job_dir: Path, tmp_path: Path) -> None:
    """With the layout prepared (no hostPath link to make), the script starts no mkdir, chmod nor ln: only
    base64 (binary data), env (the containers) and rm (the clean-up) are on its PATH."""
    data = job_dir_volume_pod(tmp_path)
    data["pod"]["spec"]["containers"][0]["workingDir"] = "/scratch/work"
    path = only_commands(tmp_path, "base64", "env", "rm")
    assert run(job_dir, data, prepared=True, path=path) == 0
    out = dump(job_dir, "main")
    assert out["cwd"] == str(job_dir / layout.VOLUMES_DIR / "scratch" / "work")  # made through the link
    files = out["files"]
    assert (base64.b64decode(files["etc/cfg/app.conf"]["b64"]), files["etc/cfg/app.conf"]["mode"]) == (b"x=1\n", 0o644)
    assert files["etc/items/sub/dir/renamed.conf"]["mode"] == 0o400
    assert base64.b64decode(files["etc/items/blob.bin"]["b64"]) == b"\x00\xff\x01"
    assert (base64.b64decode(files["sec/password"]["b64"]), files["sec/password"]["mode"]) == (b"hunter2\n", 0o600)
    assert not (job_dir / layout.VOLUMES_DIR).exists()


def test_prepared_job_dir_reached_under_another_name(job_dir: Path, tmp_path: Path) -> None:
    """The script runs in the job dir through an alias (a symlinked mount point): the submitter's links
    still lead into it, so its layout is used (no mkdir, chmod nor ln on PATH)."""
    job = render_job(job_dir_volume_pod(tmp_path), NONE)
    prepare_job_dir(job_dir, job.script, job.layout)
    alias = tmp_path / "alias"
    alias.symlink_to(job_dir)
    env = {**os.environ, layout.JOB_DIR_ENV: str(alias), "PATH": only_commands(tmp_path, "base64", "env", "rm")}
    assert subprocess.run([BASH, layout.SCRIPT_NAME], cwd=alias, env=env, timeout=60).returncode == 0
    assert base64.b64decode(dump(job_dir, "main")["files"]["etc/cfg/app.conf"]["b64"]) == b"x=1\n"
