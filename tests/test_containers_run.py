"""Rendered scripts run by a real container runtime, checked by what the containers really did.

Podman runs for real here (``pytest -m podman``; the ``podman_host`` fixture configures it in a temp
dir). The same checks run with apptainer or singularity when one is on PATH (``pytest -m apptainer``),
and are skipped otherwise: neither can be installed on these machines or in CI.

Each container writes what it saw (argv, environ, file contents and modes, cwd, what it could write)
into a hostPath directory of the test; the test compares that with the pod. Podman-only behaviour
(labels, ``--memory``/``--cpus``, clean-up after a cancel) is in the tests named ``test_podman_*``.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.status import JobMeta, map_status
from interlink_nats.submitters.jobdirs.files import read_container_files
from podman_host import BUSYBOX, IMAGE, IMAGE_WITH_ENTRYPOINT, PodmanHost

RT = pb.ContainerRuntime


@dataclass
class Runtime:
    name: str
    build_config: pb.BuildConfig
    image: str
    leftovers: Callable[[str], list[str]]
    """Containers of one pod UID still known to the runtime after its script ended."""


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

        return Runtime(name, pb.BuildConfig(runtime=RT.PODMAN), IMAGE, podman_left)
    exe = shutil.which(name)
    if exe is None:  # cannot be installed here nor in CI: an opt-in check, never a failure
        pytest.skip(f"{name} is not on PATH")
    rt = RT.APPTAINER if name == "apptainer" else RT.SINGULARITY
    image = _sandbox(tmp_path_factory.mktemp(name))
    return Runtime(name, pb.BuildConfig(runtime=rt, executable=exe), str(image), lambda uid: [])


@pytest.fixture
def podman(podman_host: PodmanHost) -> Runtime:
    def left(uid: str) -> list[str]:
        return [c["Id"] for c in podman_host.containers(f"{layout.LABEL_POD_UID}={uid}")]

    return Runtime("podman", pb.BuildConfig(runtime=RT.PODMAN), IMAGE, left)


# --- pods and jobs ---------------------------------------------------------------------------------


def make_pod(
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    data: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": str(uuid.uuid4()), "labels": {"app": 'ütf-8 "x"'}},
            "spec": {"containers": containers, "initContainers": init or [], "volumes": volumes or [], **spec},
        },
        "container": [data] if data else [],
    }


def sh(name: str, script: str, image: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["sh", "-c", script, name], "args": list(args), **extra}


@dataclass
class Job:
    job_dir: Path
    uid: str
    proc: subprocess.Popen[bytes]

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)

    def exit_code(self, name: str) -> int:
        return int(layout.exit_path(self.job_dir, name).read_text())

    def log(self, name: str) -> str:
        return layout.log_path(self.job_dir, name).read_text()


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[[Runtime, dict[str, Any]], Job]]:
    """Render a pod for the runtime and start its script as the shell backend does (own process group)."""
    jobs: list[Job] = []

    def start(rt: Runtime, data: dict[str, Any]) -> Job:
        job_dir = tmp_path / f"job{len(jobs)}"
        job_dir.mkdir()
        (job_dir / layout.SCRIPT_NAME).write_text(render_job(data, rt.build_config).script)
        with (job_dir / layout.JOB_STDOUT).open("wb") as job_out:
            proc = subprocess.Popen(
                ["bash", layout.SCRIPT_NAME],
                cwd=job_dir,
                env={**os.environ, layout.JOB_DIR_ENV: str(job_dir)},
                stdin=subprocess.DEVNULL,
                stdout=job_out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        job = Job(job_dir, data["pod"]["metadata"]["uid"], proc)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()


def eventually(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    """Wait for an event with a generous deadline (the machine may be loaded); back-off capped at 0.2 s."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


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
for f in /cm/a /cm/b.txt /items/sub/renamed /sec/token /sec400/token /proj/ns /down/labels /down/name /etc/alpha \
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
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
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
    assert files["_down_labels"] == 'app="ütf-8 \\"x\\""'.encode()
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
    assert (job.job_dir / layout.DEADLINE_FILE).exists()
    assert job.exit_code("sleeper") in (137, 143)
    assert runtime.leftovers(job.uid) == []


# --- podman only -----------------------------------------------------------------------------------


@pytest.mark.podman
def test_podman_labels_and_resources(
    podman: Runtime, podman_host: PodmanHost, start_job: Callable[[Runtime, dict[str, Any]], Job], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    limits = r"""
cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us
while [ ! -e /gate/open ]; do sleep 0.1; done
"""
    data = make_pod(
        [
            {
                **sh("limited", limits, podman.image),
                "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}, "requests": {"cpu": "250m"}},
                "volumeMounts": [{"name": "gate", "mountPath": "/gate"}],
            }
        ],
        volumes=[{"name": "gate", "hostPath": {"path": str(gate)}}],
    )
    job = start_job(podman, data)
    eventually(lambda: len(podman_host.containers(f"{layout.LABEL_POD_UID}={job.uid}")) == 1, "the running container")
    [container] = podman_host.containers(f"{layout.LABEL_POD_UID}={job.uid}")
    assert container["Labels"][layout.LABEL_CONTAINER] == "limited"
    assert container["Labels"][layout.LABEL_JOB_DIR] == str(job.job_dir)
    (gate / "open").touch()
    assert job.wait() == 0
    assert job.log("limited").split() == [str(64 * 2**20), "50000", "100000"]
    assert podman.leftovers(job.uid) == []


@pytest.mark.podman
def test_podman_command_and_args_follow_kubernetes_over_the_image(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    # command replaces the image's ENTRYPOINT and drops its CMD; args alone replace only the CMD.
    img = IMAGE_WITH_ENTRYPOINT
    data = make_pod(
        [
            {"name": "image-defaults", "image": img},
            {"name": "args-only", "image": img, "args": ["a 1", "$(X)"], "env": [{"name": "X", "value": "x"}]},
            {"name": "command-only", "image": img, "command": ["echo", "mine"]},
            {"name": "both", "image": img, "command": ["echo", "mine"], "args": ["b"]},
        ]
    )
    job = start_job(podman, data)
    assert job.wait() == 0
    assert job.log("image-defaults") == "entrypoint cmd\n"
    assert job.log("args-only") == "entrypoint a 1 x\n"
    assert job.log("command-only") == "mine\n"
    assert job.log("both") == "mine b\n"


@pytest.mark.podman
def test_podman_memory_limit_kills_with_137(
    podman: Runtime, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    data = make_pod(
        [
            {
                **sh("hog", "dd if=/dev/zero of=/dev/null bs=128M count=1", podman.image),
                "resources": {"limits": {"memory": "32Mi"}},
            }
        ]
    )
    job = start_job(podman, data)
    assert job.wait() == 137
    assert job.exit_code("hog") == 137
    # podman reports OOMKilled=false on these cgroups: the status says it cannot tell, rather than guessing.
    meta = JobMeta(job.uid, "ns", "p", "pool", "1", (), ("hog",), "shell")
    files = read_container_files(job.job_dir, ["hog"])
    [hog] = map_status(meta, Observation(BackendState.FAILED, 137), files, now=time.time()).containers
    assert (hog.exit_code, hog.reason) == (137, "Error")
    assert "memory limit" in hog.message and "did not say which" in hog.message


@pytest.mark.podman
def test_podman_cancel_removes_every_container(
    podman: Runtime, podman_host: PodmanHost, start_job: Callable[[Runtime, dict[str, Any]], Job]
) -> None:
    # "trap" makes PID 1 honour TERM in one container; the other ignores it and must be killed after the grace.
    data = make_pod(
        [
            sh("polite", "trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done", podman.image),
            sh("stubborn", "echo up; sleep 600", podman.image),
        ],
        terminationGracePeriodSeconds=2,
    )
    job = start_job(podman, data)
    label = f"{layout.LABEL_POD_UID}={job.uid}"
    eventually(
        lambda: all(layout.log_path(job.job_dir, n).exists() and "up" in job.log(n) for n in ("polite", "stubborn")),
        "both containers up",
    )
    os.killpg(job.proc.pid, signal.SIGTERM)  # what the shell backend's cancel does first
    job.wait()
    assert job.exit_code("polite") == 0 and "bye" in job.log("polite")
    assert job.exit_code("stubborn") == 137
    assert podman_host.containers(label) == []
