"""Rendered scripts executed for real by bash with runtime ``none``: what each container gets.

Env, argv and cwd exactly, volumes' content and modes, private secret files, working dirs and shared
emptyDirs, subPaths, pre-exec and MPI flags, a failing hostPath check.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.jobdirs.files import remove_ended_layout
from script_runs import DUMP, NONE, PY, dump, exit_code, log, pod, py, run, volume_pod
from script_runs import job_dir as job_dir


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
    # Volume data (secrets included) is removed when the job ends, by whoever made the layout: the script at
    # exit where it made it, else the submitter once it sees the job end; logs and exit files stay.
    if prepared:
        assert (job_dir / layout.VOLUMES_DIR).is_dir(), "the submitter's layout is the submitter's to remove"
        remove_ended_layout(job_dir)
    assert not (job_dir / layout.VOLUMES_DIR).exists()
    assert not (job_dir / layout.ROOTFS_DIR).exists()
    assert not (job_dir / layout.PREPARED_FILE).is_symlink(), "a rerun makes its own layout again"
    assert (tmp_path / "host" / "h.txt").exists()
    assert exit_code(job_dir, "main") == 0
    assert log(job_dir, "main")


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


def test_a_locale_the_host_lacks_reaches_the_container_without_a_shell_warning(job_dir: Path) -> None:
    """bash warns ("setlocale: LC_ALL: cannot change locale") when it is assigned one: locale names go
    through env(1), and the container's log holds only what the container printed."""
    env = [{"name": "LC_ALL", "value": "xx_YY.UTF-8"}, {"name": "PLAIN", "value": "p"}]
    c = py("main", "import os; print(os.environ['LC_ALL'], os.environ['PLAIN'])", env=env)
    assert run(job_dir, pod([c])) == 0
    assert log(job_dir, "main") == "xx_YY.UTF-8 p\n"
