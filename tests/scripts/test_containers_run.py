"""Rendered scripts run by a real container runtime, checked by what the containers really did.

Podman runs for real here (``pytest -m podman``; the ``podman_host`` fixture configures it in a temp
dir). The same checks run with apptainer or singularity when one is on PATH (``pytest -m apptainer``),
and are skipped otherwise: neither can be installed on these machines or in CI.

Each container writes what it saw (argv, environ, file contents and modes, cwd, what it could write)
into a hostPath directory of the test; the test compares that with the pod. Podman-only behaviour
(labels, ``--memory``/``--cpus``, clean-up after a cancel) is in ``test_containers_run_podman.py``.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_runs import RT, Job, Runtime, eventually, make_pod, sh
from container_runs import start_job as start_job
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from podman_host import BUSYBOX, IMAGE, PodmanHost
from storage_sites import OPEN_HOST_PATHS


def _sandbox(root: Path) -> Path:
    """A busybox root filesystem directory: apptainer and singularity run a directory as an image."""
    rootfs = root / "bbox"
    for d in ("bin", "tmp", "etc", "proc", "sys", "dev", "work"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy(BUSYBOX, rootfs / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (rootfs / "bin" / applet).symlink_to("busybox")
    return rootfs


@pytest.fixture(
    params=[
        pytest.param("podman", marks=pytest.mark.podman),
        pytest.param("apptainer", marks=pytest.mark.apptainer),
        pytest.param("singularity", marks=pytest.mark.apptainer),
    ]
)
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    name = request.param
    if name == "podman":
        host: PodmanHost = request.getfixturevalue("podman_host")

        def podman_left(uid: str) -> list[str]:
            return [c["Id"] for c in host.containers(f"{layout.LABEL_POD_UID}={uid}")]

        return Runtime(name, pb.BuildConfig(runtime=RT.PODMAN, storage=OPEN_HOST_PATHS), IMAGE, podman_left)
    exe = shutil.which(name)
    if exe is None:  # cannot be installed here nor in CI: an opt-in check, never a failure
        pytest.skip(f"{name} is not on PATH")
    rt = RT.APPTAINER if name == "apptainer" else RT.SINGULARITY
    image = _sandbox(tmp_path_factory.mktemp(name))
    return Runtime(
        name, pb.BuildConfig(runtime=rt, executable=exe, storage=OPEN_HOST_PATHS), str(image), lambda uid: []
    )


# --- the pod surface -------------------------------------------------------------------------------

NASTY = 'it\'s "quoted" `tick` \\ $HOME ${X} $\nsecond line\ttab ü€😀'
SECRET = b"s3cr3t 'x' $y\n"

# Writes what the container saw into /out (a hostPath of the test).
CHECK = r"""
cd_seen=$(pwd)
printf '%s' "$cd_seen" > /out/pwd
cat /proc/self/environ > /out/environ
printf '%s\0' "$0" "$@" > /out/argv
mkdir -p /out/files
for f in /cm/a /cm/b.txt /items/sub/renamed /sec/token /sec400/token /proj/ns /down/annotations /down/name /etc/alpha \
         /scratch/order /host-in/given; do
  printf '%s %s\n' "$f" "$(stat -L -c %a "$f")" >> /out/modes
  cp "$f" "/out/files/$(echo "$f" | tr / _)"
done
for d in /cm /sec /proj /down /scratch-ro /deep /scratch; do
  if touch "$d/probe" 2>/dev/null; then echo "$d rw"; else echo "$d ro"; fi
done > /out/writable
if ( : >> /etc/alpha ) 2>/dev/null; then echo "/etc/alpha rw"; else echo "/etc/alpha ro"; fi >> /out/writable
echo from-main > /host-in/written
"""

# Two main containers that can only both finish when they run at the same time.
MEET = r"""
touch "/scratch/$0"
i=0
while [ ! -e "/scratch/$1" ]; do
  i=$((i + 1)); [ "$i" -lt 1200 ] || { echo "no sign of $1"; exit 9; }; sleep 0.1
done
echo "met $1"
"""


def surface_pod(rt: Runtime, out: Path, host_in: Path) -> dict[str, Any]:
    img = rt.image
    data = {
        "configMaps": [
            {"metadata": {"name": "cm"}, "data": {"a": "alpha\n", "b.txt": NASTY}},
            {"metadata": {"name": "cm-env"}, "data": {"K1": "v1", "K2": NASTY}},
        ],
        "secrets": [{"metadata": {"name": "sec"}, "data": {"token": base64.b64encode(SECRET).decode()}}],
        "projectedvolumemaps": [{"metadata": {"name": "proj"}, "data": {"ns": "ns-value"}}],
    }
    volumes = [
        {"name": "cm", "configMap": {"name": "cm"}},
        {
            "name": "cm-items",
            "configMap": {"name": "cm", "items": [{"key": "a", "path": "sub/renamed", "mode": 0o640}]},
        },
        {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "sec400", "secret": {"secretName": "sec", "defaultMode": 0o400}},
        {"name": "proj", "projected": {"sources": []}},
        {
            "name": "down",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                ]
            },
        },
        {"name": "scratch", "emptyDir": {}},
        {"name": "out", "hostPath": {"path": str(out), "type": "Directory"}},
        {"name": "host-in", "hostPath": {"path": str(host_in), "type": "DirectoryOrCreate"}},
    ]
    check_mounts = [
        {"name": "cm", "mountPath": "/cm"},
        {"name": "cm-items", "mountPath": "/items"},
        {"name": "sec", "mountPath": "/sec"},
        {"name": "sec400", "mountPath": "/sec400"},
        {"name": "proj", "mountPath": "/proj"},
        {"name": "down", "mountPath": "/down"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "scratch", "mountPath": "/scratch-ro", "readOnly": True},
        {"name": "scratch", "mountPath": "/deep", "subPath": "deep/dir"},
        {"name": "cm", "mountPath": "/etc/alpha", "subPath": "a"},
        {"name": "out", "mountPath": "/out"},
        {"name": "host-in", "mountPath": "/host-in"},
    ]
    env = [
        {"name": "A", "value": NASTY},
        {"name": "B", "value": "pre-$(A)-post $$(A) $(MISSING)"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a"}}},
    ]
    scratch = [{"name": "scratch", "mountPath": "/scratch"}]
    return make_pod(
        [
            {
                **sh("check", CHECK, img, "$(A)", "lit $$(A)", "ü", "$(B)"),
                "env": env,
                "envFrom": [{"configMapRef": {"name": "cm-env"}, "prefix": "CM_"}, {"secretRef": {"name": "sec"}}],
                "volumeMounts": check_mounts,
                "workingDir": "/etc",
            },
            {**sh("ping", MEET, img, "pong"), "volumeMounts": scratch},
            {**sh("pong", MEET, img, "ping"), "volumeMounts": scratch},
        ],
        init=[
            {**sh("init-1", "echo 1 >> /scratch/order", img), "volumeMounts": scratch},
            {**sh("init-2", "echo 2 >> /scratch/order", img), "volumeMounts": scratch},
        ],
        volumes=volumes,
        data=data,
    )


def test_pod_surface(runtime: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], tmp_path: Path) -> None:
    out, host_in = tmp_path / "out", tmp_path / "host-in"
    out.mkdir()
    host_in.mkdir()
    (host_in / "given").write_text("from the host\n")
    job = start_job(runtime, surface_pod(runtime, out, host_in))
    assert job.wait() == 0, (job.job_dir / layout.JOB_STDOUT).read_text()
    for name in ("init-1", "init-2", "check", "ping", "pong"):
        assert job.exit_code(name) == 0, job.log(name)
    assert job.log("ping") == "met pong\n" and job.log("pong") == "met ping\n"  # ran at the same time

    argv = (out / "argv").read_bytes().decode().split("\0")[:-1]
    assert argv == ["check", NASTY, "lit $(A)", "ü", f"pre-{NASTY}-post $(A) $(MISSING)"]
    environ = dict(e.split("=", 1) for e in (out / "environ").read_bytes().decode().split("\0") if e)
    assert environ["A"] == NASTY
    assert environ["B"] == f"pre-{NASTY}-post $(A) $(MISSING)"
    assert environ["POD_NAME"] == "p"
    assert environ["TOKEN"] == SECRET.decode()
    assert environ["FROM_CM"] == "alpha\n"
    assert environ["CM_K1"] == "v1" and environ["CM_K2"] == NASTY
    assert environ["token"] == SECRET.decode()  # envFrom secretRef, no prefix
    assert (out / "pwd").read_text() == "/etc"

    files = {p.name: p.read_bytes() for p in (out / "files").iterdir()}
    assert files["_cm_a"] == b"alpha\n"
    assert files["_cm_b.txt"] == NASTY.encode()
    assert files["_items_sub_renamed"] == b"alpha\n"
    assert files["_sec_token"] == SECRET and files["_sec400_token"] == SECRET
    assert files["_proj_ns"] == b"ns-value"
    assert files["_down_name"] == b"p"
    assert files["_down_annotations"] == 'app="ütf-8 \\"x\\""'.encode()  # a label value cannot hold these
    assert files["_etc_alpha"] == b"alpha\n"  # subPath: one key of the configMap as a file
    assert files["_scratch_order"] == b"1\n2\n"  # init containers in order, sharing the emptyDir
    assert files["_host-in_given"] == b"from the host\n"
    modes = dict(line.split(" ") for line in (out / "modes").read_text().splitlines())
    assert modes["/sec/token"] == "600" and modes["/sec400/token"] == "400"
    assert modes["/cm/a"] == "644" and modes["/items/sub/renamed"] == "640"
    writable = dict(line.split(" ") for line in (out / "writable").read_text().splitlines())
    assert writable == {
        "/cm": "ro",
        "/sec": "ro",
        "/proj": "ro",
        "/down": "ro",
        "/scratch-ro": "ro",
        "/etc/alpha": "ro",
        "/deep": "rw",
        "/scratch": "rw",
    }
    assert (host_in / "written").read_text() == "from-main\n"  # hostPath is the host's directory
    assert runtime.leftovers(job.uid) == []


def test_init_failure_stops_the_pod(runtime: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]) -> None:
    img = runtime.image
    data = make_pod(
        [sh("main", "echo main ran", img)],
        init=[sh("first", "echo first; exit 3", img), sh("second", "echo second ran", img)],
    )
    job = start_job(runtime, data)
    assert job.wait() == 3
    assert job.exit_code("first") == 3 and job.log("first") == "first\n"
    assert job.exit_code("second") == 3 and "second ran" not in job.log("second")
    assert "init container first failed" in job.log("main") and "main ran" not in job.log("main")


def test_exit_codes(runtime: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]) -> None:
    img = runtime.image
    data = make_pod(
        [
            sh("ok", "true", img),
            sh("fails", "exit 42", img),
            {"name": "missing-command", "image": img, "command": ["/no/such/program"]},
            {"name": "missing-image", "image": img + "-not-there", "command": ["true"]},
        ]
    )
    if runtime.name == "podman":
        # Unlike the kubelet, podman does not create a workingDir missing from the image (by design, see
        # podman PR 9054): the container fails at once with podman's own explanation.
        data["pod"]["spec"]["containers"].append({**sh("no-workdir", "pwd", img), "workingDir": "/no/such/dir"})
    job = start_job(runtime, data)
    assert job.wait() != 0
    assert job.exit_code("ok") == 0
    assert job.exit_code("fails") == 42
    if runtime.name == "podman":
        assert job.exit_code("missing-command") == 127, job.log("missing-command")
        assert job.exit_code("missing-image") == 125
        assert "image not known" in job.log("missing-image")  # podman's own words, in the container's log
        assert f"image {img}-not-there is not on this host and podman could not pull it" in job.log("missing-image")
        assert job.exit_code("no-workdir") == 126
        assert 'workdir "/no/such/dir" does not exist' in job.log("no-workdir")
    else:  # apptainer reports its own failures (a missing program included) with 255
        assert job.exit_code("missing-command") != 0 and job.exit_code("missing-image") != 0
    assert runtime.leftovers(job.uid) == []


def test_logs_while_running_and_after(
    runtime: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    script = 'echo "first line"; while [ ! -e /gate/open ]; do sleep 0.1; done; echo "second line"'
    data = make_pod(
        [{**sh("talker", script, runtime.image), "volumeMounts": [{"name": "gate", "mountPath": "/gate"}]}],
        volumes=[{"name": "gate", "hostPath": {"path": str(gate)}}],
    )
    job = start_job(runtime, data)
    log = layout.log_path(job.job_dir, "talker")
    eventually(lambda: log.exists() and "first line" in log.read_text(), "the first line while it runs")
    assert not layout.exit_path(job.job_dir, "talker").exists()
    (gate / "open").touch()
    assert job.wait() == 0
    assert job.log("talker") == "first line\nsecond line\n"


def test_active_deadline(runtime: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]) -> None:
    # PID 1 of a container ignores TERM unless it handles it: the grace period must end in a kill.
    data = make_pod(
        [sh("sleeper", "echo up; sleep 600", runtime.image)],
        activeDeadlineSeconds=3,
        terminationGracePeriodSeconds=1,
    )
    job = start_job(runtime, data)
    assert job.wait(timeout=120) != 0
    assert layout.deadline_path(job.job_dir).exists()
    assert job.exit_code("sleeper") in (137, 143)
    assert runtime.leftovers(job.uid) == []
