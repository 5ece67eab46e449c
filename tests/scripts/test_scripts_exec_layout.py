"""Rendered scripts in a job directory the submitter prepared: its layout is trusted only where it was made."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.jobdirs.files import prepare_job_dir, remove_ended_layout
from script_runs import BASH, NONE, dump, exit_code, log, only_commands, pod, py, run, volume_pod
from script_runs import job_dir as job_dir


def test_prepared_layout_of_directories_needs_no_marker(job_dir: Path, tmp_path: Path) -> None:
    """A layout without links (runtime none, no volumes: each container's rootfs directory) is tested entry by
    entry: prepared, the script runs no mkdir/chmod/rm and the submitter made no ``.prepared``; after the
    submitter's clean-up removed the rootfs, a rerun finds the layout gone and makes it itself."""
    data = pod([py("main", "import os; print(os.getcwd() == os.environ['INTERLINK_ROOTFS'])", workingDir="/")])
    path = only_commands(tmp_path, "env")
    assert run(job_dir, data, prepared=True, path=path) == 0
    assert log(job_dir, "main") == "True\n"
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()
    assert (job_dir / layout.ROOTFS_DIR).is_dir(), "the submitter's layout is the submitter's to remove"
    remove_ended_layout(job_dir)
    assert not (job_dir / layout.ROOTFS_DIR).exists()
    layout.exit_path(job_dir, "main").unlink()
    (job_dir / layout.CONTAINERS_DIR / f"main{layout.LOG_SUFFIX}").unlink()
    assert run_written(job_dir) == 0
    assert log(job_dir, "main") == "True\n"


@pytest.mark.parametrize("marker", [False, True], ids=["links-tested", "marker"])
def test_layout_prepared_for_another_path_is_not_trusted(job_dir: Path, tmp_path: Path, marker: bool) -> None:
    """The submitter's links point into the job dir as it named it: when that name leads elsewhere on the
    node running the script (another file system mounted there), the script makes its own layout, whether it
    tests each link against its target or (a ``subPath`` to a file among them) the marker."""
    data = job_dir_volume_pod(tmp_path) if marker else directory_links_pod(tmp_path)
    job = render_job(data, NONE)
    assert (layout.PREPARED_TEST in job.script) == marker
    prepare_job_dir(job_dir, job.script, job.layout)
    here = tmp_path / "here"
    job_dir.rename(here)  # the script runs here; the submitter's name for it now leads to another directory,
    prepare_job_dir(job_dir, job.script, job.layout)  # with a layout of its own, which the links lead into
    assert run_written(here) == 0  # trusting the layout, the container would read the other one's empty volumes
    files = dump(here, "main")["files"]
    assert base64.b64decode(files["etc/cfg/app.conf"]["b64"]) == b"x=1\n"
    assert base64.b64decode(files["sec/password"]["b64"]) == b"hunter2\n"


def test_rerun_of_a_prepared_job_makes_its_own_layout(job_dir: Path, tmp_path: Path) -> None:
    """The submitter's clean-up removes the volumes and the rootfs: a rerun (Slurm requeue) finds its links'
    targets gone and sets the pod up again."""
    assert run(job_dir, job_dir_volume_pod(tmp_path), prepared=True) == 0
    assert (job_dir / layout.VOLUMES_DIR).is_dir(), "the submitter's layout, left for the submitter to remove"
    remove_ended_layout(job_dir)
    assert not (job_dir / layout.VOLUMES_DIR).exists() and not (job_dir / layout.ROOTFS_DIR).exists()
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


def directory_links_pod(tmp_path: Path) -> dict[str, Any]:
    """:func:`job_dir_volume_pod` without its ``subPath`` mount (a link to a file): every link leads to one of
    the layout's directories, so the script tests each one and needs no marker."""
    data = job_dir_volume_pod(tmp_path)
    container = data["pod"]["spec"]["containers"][0]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if "subPath" not in m]
    return data


def test_a_pod_whose_layout_the_script_makes_removes_it_itself(job_dir: Path, tmp_path: Path) -> None:
    """Runtime none with only a hostPath mount: the submitter makes no layout (a link to a host path is the
    script's to make), so the script, which made the rootfs, removes it at exit; the host's file stays."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "h.txt").write_text("from host")
    data = pod([py("main", "print(open('/dev/null').read() == '')", volumeMounts=[{"name": "h", "mountPath": "/h"}])])
    data["pod"]["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": str(host)}}]
    assert render_job(data, NONE).layout == []
    assert run(job_dir, data, prepared=True) == 0
    assert not (job_dir / layout.ROOTFS_DIR).exists(), "the script made it, the script removed it"
    assert (host / "h.txt").read_text() == "from host"
    assert exit_code(job_dir, "main") == 0


def test_a_batch_backend_asks_the_script_to_remove_the_layout_the_submitter_made(job_dir: Path, tmp_path: Path) -> None:
    """Slurm's jobs run on a node, away from the submitter: the backend sets ``JOB_REMOVES_LAYOUT_ENV`` and the
    script removes the submitter's layout (volumes, secrets among them, the rootfs, the marker) at exit, so the
    login node's submitter does not; logs and exit files stay. Without it the layout is the submitter's."""
    data = job_dir_volume_pod(tmp_path)
    assert run(job_dir, data, prepared=True, env={layout.JOB_REMOVES_LAYOUT_ENV: "1"}) == 0
    assert not (job_dir / layout.VOLUMES_DIR).exists() and not (job_dir / layout.ROOTFS_DIR).exists()
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()
    assert exit_code(job_dir, "main") == 0, "logs and exit files stay"
    assert base64.b64decode(dump(job_dir, "main")["files"]["sec/password"]["b64"]) == b"hunter2\n", "it ran prepared"
    remove_ended_layout(job_dir)  # the submitter's poll after it: nothing left to remove, nothing fails


@pytest.mark.parametrize("marker", [False, True], ids=["links-tested", "marker"])
def test_prepared_job_runs_no_set_up_command(job_dir: Path, tmp_path: Path, marker: bool) -> None:
    """With the layout prepared (no hostPath link to make), the script starts no mkdir, chmod, ln nor rm (the
    submitter removes its layout once the job ended): only base64 (binary data) and env (the containers) are
    on its PATH. The submitter makes the marker only for a script that tests it (a ``subPath`` to a file)."""
    data = job_dir_volume_pod(tmp_path) if marker else directory_links_pod(tmp_path)
    data["pod"]["spec"]["containers"][0]["workingDir"] = "/scratch/work"
    path = only_commands(tmp_path, "base64", "env")
    assert run(job_dir, data, prepared=True, path=path) == 0
    out = dump(job_dir, "main")
    assert out["cwd"] == str(job_dir / layout.VOLUMES_DIR / "scratch" / "work")  # made through the link
    files = out["files"]
    assert (base64.b64decode(files["etc/cfg/app.conf"]["b64"]), files["etc/cfg/app.conf"]["mode"]) == (b"x=1\n", 0o644)
    assert files["etc/items/sub/dir/renamed.conf"]["mode"] == 0o400
    assert base64.b64decode(files["etc/items/blob.bin"]["b64"]) == b"\x00\xff\x01"
    assert (base64.b64decode(files["sec/password"]["b64"]), files["sec/password"]["mode"]) == (b"hunter2\n", 0o600)
    assert (job_dir / layout.PREPARED_FILE).is_symlink() == marker
    assert (job_dir / layout.VOLUMES_DIR).is_dir()
    remove_ended_layout(job_dir)
    assert not (job_dir / layout.VOLUMES_DIR).exists() and not (job_dir / layout.ROOTFS_DIR).exists()
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()
    assert exit_code(job_dir, "main") == 0, "logs and exit files stay"


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
