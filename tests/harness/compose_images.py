"""The project's images for the compose tests: the recipe, a podman of the tests' own, the base and the builds.

No container registry is reachable here, so the images start from a base bootstrapped from Debian's packages
(``debootstrap``, then ``podman import``; cached between local runs in a directory keyed by its inputs), and
``redis`` is a stand-in built from that base and tagged with the name the compose file uses. Everything runs in a
podman of the tests' own (temp ``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF``, nothing global changed) and
is removed at the end. Recipe and the reasons for each setting: /work/shared/reference/compose-local.md and
podman-local.md; README "Compose". The fixtures ``podman``, ``base_image`` and ``images`` are imported by name
by the test module that uses them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import missing_service
from interlink_nats.kernel.version import release_version

BUILD_TIMEOUT = 1200
"""Per test, in seconds: the first test that needs the images also waits for the base and the builds."""

ROOT = Path(__file__).resolve().parents[2]
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
            pool.submit(
                _build, podman, tag, dockerfile, context, {"PYTHON_IMAGE": base_image, "VERSION": release_version()}
            )
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
