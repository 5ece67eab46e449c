"""The live stack the gateway fuzzing tests share, and what they share to build and check input.

One gateway + shell submitter (runtime ``none``) runs in a background thread for each test module,
on a real port; tests talk to it over HTTP like interLink does (the ``live`` and ``finished_pod``
fixtures, which each test module imports by name). Pods that pass validation really run on this host
(runtime ``none``), so every generated pod is defanged before it is sent: commands are only
``true`` or ``echo``, no pre-exec/MPI annotations, hostPath volumes only below a scratch directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from stack import create_body, eventually, full_stack, new_pool, pod

POOL = new_pool()
MAX_BODY = 256 * 1024
# INTERLINK_NATS_FUZZ_SCALE=20 for a longer campaign (nightly, or after touching wire/render code).
SCALE = max(1, int(os.environ.get("INTERLINK_NATS_FUZZ_SCALE", "1")))
POD_EXAMPLES = 100 * SCALE
LOG_EXAMPLES = 60 * SCALE
FUZZ = settings(
    deadline=None,
    # No shrinking: every step is an HTTP round trip (and maybe a job); the failure message has the body.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
# A 4xx message names the field first: "pod.metadata.uid: ...", "pod rejected: spec.volumes[0].name: ...".
FIELD_MESSAGE = re.compile(
    r"^(pod rejected: )?(body|pod|spec|metadata|container|configMap|secret|projectedvolumemaps|Opts|PodUID|"
    r"Namespace|PodName|ContainerName|\[\d+\])[^\n]*?: \S"
)


# --- the live stack ----------------------------------------------------------------------------


@dataclass
class Live:
    base_url: str
    pool: str
    sandbox: Path
    http: httpx.Client
    thread: threading.Thread

    def send(self, method: str, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        """``body`` as JSON; ``ensure_ascii`` so lone surrogates travel as valid ``\\udXXX`` escapes."""
        return self.http.request(
            method, path, content=json.dumps(body).encode(), headers={"content-type": "application/json"}, **kwargs
        )

    def assert_alive(self) -> None:
        assert self.thread.is_alive(), "the gateway's event loop died"
        ping = self.send("GET", "/status", [])
        assert ping.status_code == 200, ping.text
        assert ping.json()["status"] == "ok"


@pytest.fixture(scope="module")
def live(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The stack, served from its own event loop in a thread, so sync hypothesis tests can drive it."""
    state_dir = tmp_path_factory.mktemp("fuzz-state")
    sandbox = tmp_path_factory.mktemp("fuzz-hostpath")
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        box["stop"] = stop
        box["loop"] = asyncio.get_running_loop()
        site = {"storage": {"host_paths": [{"prefix": str(sandbox), "read_only": False}]}}  # defang()'s paths
        async with full_stack(
            nats_url, state_dir, pool=POOL, max_body_bytes=MAX_BODY, pool_wait_s=0.5, site=site
        ) as stack:
            box["url"] = stack.base_url
            ready.set()
            await stop.wait()
            # Workaround: nats-py's batched fetch never marks messages done, so draining the events
            # pull subscription waits out the 30 s drain timeout after bursts of events. Drop it first.
            with contextlib.suppress(Exception):
                await stack.gateway.events._sub.unsubscribe()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:  # surfaced by the fixture, not lost in the thread
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="fuzz-stack", daemon=True)
    thread.start()
    assert ready.wait(60), "the stack did not start"
    if "error" in box:
        raise box["error"]
    with httpx.Client(base_url=box["url"], timeout=30) as http:
        yield Live(box["url"], POOL, sandbox, http, thread)
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(30)
    assert not thread.is_alive(), "the stack did not stop"
    if "error" in box:
        raise box["error"]


def assert_not_5xx_and_explained(response: httpx.Response | requests.Response, what: str) -> None:
    assert response.status_code < 500, f"{what} -> {response.status_code}: {response.text[:500]}"
    if response.status_code >= 400:
        assert response.text.strip(), f"{what} -> {response.status_code} with an empty body"


# --- defanging: generated pods run on this host ------------------------------------------------

SAFE_PROGRAMS = ("true", "echo")


def defang(body: Any, sandbox: Path) -> Any:
    """Make whatever pod ``body`` holds harmless to run with runtime ``none``, keeping its wrong types."""
    entries = body if isinstance(body, list) else [body]
    for entry in entries:
        if isinstance(entry, dict):
            _defang_pod(entry.get("pod"), sandbox)
    return body


def _defang_pod(p: Any, sandbox: Path) -> None:
    if not isinstance(p, dict):
        return
    meta = p.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        # pre-exec runs on the host, mpi-flags prefix the command, flags reach the batch system.
        for key in [k for k in meta["annotations"] if isinstance(k, str) and k.startswith("slurm-job.vk.io/")]:
            del meta["annotations"][key]
    spec = p.get("spec")
    if not isinstance(spec, dict):
        return
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            for c in containers:
                if isinstance(c, dict) and isinstance(c.get("command"), list):
                    command = c["command"]
                    if command and isinstance(command[0], str) and command[0] not in SAFE_PROGRAMS:
                        command[0] = "echo"
                    if not command:
                        c["command"] = ["true"]
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        for i, v in enumerate(volumes):
            if (
                isinstance(v, dict)
                and isinstance(v.get("hostPath"), dict)
                and isinstance(v["hostPath"].get("path"), str)
            ):
                v["hostPath"]["path"] = f"{sandbox}/v{i}"


# --- hypothesis pods ---------------------------------------------------------------------------


def mostly(good: st.SearchStrategy[Any], *bad: st.SearchStrategy[Any], odds: int = 12) -> st.SearchStrategy[Any]:
    """``good`` about ``odds`` times as often as any one of ``bad``: most pods must get deep enough to run."""
    choices = [good] * odds + list(bad)  # not one_of: it would merge the copies of ``good``
    return st.integers(0, len(choices) - 1).flatmap(choices.__getitem__)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=12)
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
dns = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
odd_text = st.sampled_from(
    [
        "",
        "\ud800",
        "a\x00b",
        "$(HOME)",
        "$$(X)",
        "'\"`;|&",
        "é漢字🙂",
        "x" * 300,
        "A B",
        "../..",
        "/abs",
        "a=b",
        "-n",
        "\n",
    ]
)
text = mostly(st.text(max_size=16), odd_text, odds=2)
name_like = mostly(dns, odd_text, junk)


def _spots(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree, to drop a value of the wrong type there."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield value, k
            yield from _spots(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield value, i
            yield from _spots(v)


def _uid_of(body: Any) -> str | None:
    entry = body[0] if isinstance(body, list) and body else body
    try:
        uid = entry["pod"]["metadata"]["uid"]
    except (KeyError, TypeError, IndexError):
        return None
    return uid if isinstance(uid, str) else None


@pytest.fixture(scope="module")
def finished_pod(live: Live) -> dict[str, Any]:
    p = pod(containers={"main": ["echo", "hello"]}, name="logs")
    assert live.send("POST", "/create", create_body(p)).status_code == 200

    def done() -> bool:
        [status] = live.send("GET", "/status", [p]).json()
        return all("terminated" in c["state"] for c in status["containers"])

    asyncio.run(eventually(_async(done), what="the log pod finished"))
    return p


def _async(check: Any) -> Any:
    async def run() -> bool:
        return bool(check())

    return run
