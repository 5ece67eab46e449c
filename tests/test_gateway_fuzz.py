"""Fuzzing the gateway's HTTP API against a real stack: no input ever gets a 5xx or crashes it.

One gateway + shell submitter (runtime ``none``) runs in a background thread for the whole
module, on a real port; tests talk to it over HTTP like interLink does. Three sources of input:

* schemathesis, from the gateway's own OpenAPI file (positive and negative data for every
  operation; ``GET /status`` and ``GET /getLogs`` really carry their JSON bodies);
* hypothesis pods: valid-ish RetrievedPodData with random names, env, volumes of every kind,
  resources, junk fields and values of the wrong type dropped anywhere;
* hand-written bad input: malformed JSON, wrong shapes, unknown UIDs, huge bodies, wrong
  content types and methods.

Pods that pass validation really run on this host (runtime ``none``), so every generated pod
is defanged before it is sent: commands are only ``true`` or ``echo``, no pre-exec/MPI
annotations, hostPath volumes only below a scratch directory.
"""

from __future__ import annotations

import asyncio
import base64
import collections
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
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from stack import create_body, eventually, full_stack, logs_body, new_pool, pod

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "services" / "gateway" / "openapi.json"
SCHEMA = schemathesis.openapi.from_path(str(SCHEMA_FILE))


def _strict(raw: dict[str, Any]) -> dict[str, Any]:
    """The same API with the pod fields the gateway needs made required, so schemathesis gets past the
    identity checks and reaches the renderer, the submitter and back (its negative mode then mutates
    near-valid pods)."""
    schemas = raw["components"]["schemas"]
    word = {"type": "string", "minLength": 1, "maxLength": 12}
    schemas["ObjectMeta"]["required"] = ["name", "namespace", "uid"]
    for key in ("name", "namespace"):
        schemas["ObjectMeta"]["properties"][key] = word
    schemas["ObjectMeta"]["properties"]["uid"] = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,11}$"}
    one_element = raw["paths"]["/create"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"][1]
    one_element.update(minItems=1, maxItems=1)
    container = {
        "type": "object",
        "required": ["name", "command"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z]([a-z0-9-]{0,6}[a-z0-9])?$"},
            "image": {"type": "string"},
            "command": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "args": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "workingDir": {"type": "string"},
            "env": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                },
            },
        },
    }
    schemas["Pod"]["required"] = ["metadata", "spec"]
    schemas["Pod"]["properties"]["spec"] = {
        "type": "object",
        "required": ["containers"],
        "properties": {
            "containers": {"type": "array", "minItems": 1, "maxItems": 3, "items": container},
            "initContainers": {"type": "array", "maxItems": 2, "items": container},
        },
    }
    return raw


STRICT_SCHEMA = schemathesis.openapi.from_dict(_strict(json.loads(SCHEMA_FILE.read_text())))
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
        async with full_stack(nats_url, state_dir, pool=POOL, max_body_bytes=MAX_BODY, pool_wait_s=0.5) as stack:
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


# --- schemathesis ------------------------------------------------------------------------------

OPERATIONS = [("/create", "POST"), ("/status", "GET"), ("/delete", "POST"), ("/getLogs", "GET")]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# Negative /create bodies are slow to generate (~0.25 s each): fewer of them.
EXAMPLES = {("/create", GenerationMode.NEGATIVE): 12 * SCALE}


@pytest.mark.parametrize("strict", [False, True], ids=["served-schema", "strict-schema"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[p for p, _ in OPERATIONS])
def test_schemathesis_cases_never_get_a_5xx(
    live: Live, path: str, method: str, mode: GenerationMode, strict: bool
) -> None:
    schema = STRICT_SCHEMA if strict else SCHEMA

    @settings(FUZZ, max_examples=EXAMPLES.get((path, mode), 25 * SCALE))
    @given(case=schema[path][method].as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        if path == "/create" and case.body is not NOT_SET:
            defang(case.body, live.sandbox)
        response = case.call(base_url=live.base_url, timeout=30)
        sent = response.request.body
        if mode is GenerationMode.POSITIVE:
            assert sent, f"{method} {path} was sent without its JSON body"  # GET bodies must really travel
        assert_not_5xx_and_explained(response, f"{method} {path} {sent!r:.300}")
        case.validate_response(response, checks=CHECKS)
        if path == "/create" and response.status_code == 200:  # it runs: cancel it
            live.send("POST", "/delete", case.body if isinstance(case.body, dict) else case.body[0])
        if path == "/create" and 400 <= response.status_code < 500 and response.status_code != 413:
            assert FIELD_MESSAGE.match(response.text), f"create 4xx names no field: {response.text[:300]}"

    check()
    live.assert_alive()


@settings(FUZZ, max_examples=10)
@given(data=st.data())
def test_schemathesis_health_and_metrics(live: Live, data: st.DataObject) -> None:
    for path in ("/healthz", "/metrics"):
        case = data.draw(SCHEMA[path]["GET"].as_strategy(), label=path)
        response = case.call(base_url=live.base_url, timeout=30)
        assert response.status_code == 200, response.text
        case.validate_response(response, checks=CHECKS)


def test_the_served_openapi_is_the_one_fuzzed(live: Live) -> None:
    served = live.http.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == json.loads(SCHEMA_FILE.read_text())


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
quantity = mostly(
    st.sampled_from(["100m", "1", "1Gi", "2.5", "500Mi", "1e3", "0", "1.5Ki", "2"]),
    st.sampled_from(["-1", "abc", "1Zi", " 2 ", "9" * 40, "", "1e400", "Infinity"]),
    st.integers(-5, 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    junk,
    odds=12,
)
resource_names = mostly(
    st.sampled_from(["cpu", "memory"]),
    st.sampled_from(["nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi", "bogus"]),
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(resource_names, quantity, max_size=3),
        "limits": st.dictionaries(resource_names, quantity, max_size=3),
    },
)
field_paths = mostly(
    st.sampled_from(
        [
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "metadata.labels",
            "metadata.annotations",
            "metadata.labels['app']",
            "status.podIP",
        ]
    ),
    st.sampled_from(["spec.nodeName", "spec.bogus", "metadata.labels['", ""]),
)
mode = mostly(st.sampled_from([None, 0o644, 0o400, 0o755, 0o600]), st.integers(-1, 0o1000), junk)
rel_path = mostly(
    st.one_of(dns, st.sampled_from(["a/b", "dir/file.txt"])),
    st.sampled_from(["../up", "/abs", "a//b", ".", "", "x\x00y"]),
)
abs_path = mostly(
    dns.map(lambda s: f"/{s}"),
    st.sampled_from(["/data", "/a/b/c", "/", "rel", "/a,b", "/a:b", "/x/../y", "/x\x00y", ""]),
)
volume_kinds = mostly(
    st.sampled_from(["emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath"]),
    st.sampled_from(["persistentVolumeClaim", "nfs"]),
    odds=8,
)
base64_or_not = mostly(st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()), text)


@st.composite
def volume(draw: st.DrawFn, vname: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(volume, configMaps, secrets) — the data interLink would attach, sometimes missing or broken."""
    kind = draw(volume_kinds)
    cms: list[dict[str, Any]] = []
    secrets: list[dict[str, Any]] = []
    keys = draw(st.lists(rel_path, min_size=1, max_size=3, unique=True))
    items = draw(
        st.one_of(
            st.none(),
            st.none(),
            st.lists(
                st.fixed_dictionaries(
                    {"key": mostly(st.sampled_from(keys), junk), "path": rel_path}, optional={"mode": mode}
                ),
                max_size=2,
            ),
        )
    )
    optional = draw(st.one_of(st.none(), st.booleans()))
    source: dict[str, Any]
    if kind == "emptyDir":
        source = draw(st.sampled_from([{}, {"medium": "Memory"}, {"sizeLimit": "1Gi"}]))
    elif kind in ("configMap", "secret"):
        obj_name = draw(dns)
        name_key = "name" if kind == "configMap" else "secretName"
        source = {name_key: draw(mostly(st.just(obj_name), name_like)), "optional": optional, "defaultMode": draw(mode)}
        if items is not None:
            source["items"] = items
        if draw(mostly(st.just(True), st.just(False), odds=4)):  # interLink sent the object
            data = draw(st.dictionaries(st.sampled_from(keys), base64_or_not if kind == "secret" else text, max_size=3))
            obj: dict[str, Any] = {"metadata": {"name": obj_name}, "data": data}
            if kind == "configMap" and draw(st.booleans()):
                obj["binaryData"] = draw(st.dictionaries(st.sampled_from(keys), base64_or_not, max_size=2))
            (cms if kind == "configMap" else secrets).append(obj)
    elif kind == "downwardAPI":
        source = {
            "items": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {"path": rel_path, "fieldRef": st.fixed_dictionaries({"fieldPath": field_paths})},
                        optional={"mode": mode},
                    ),
                    max_size=3,
                )
            )
        }
    elif kind == "projected":
        sources = draw(
            st.lists(
                mostly(
                    st.sampled_from(
                        [
                            {"serviceAccountToken": {"path": "token"}},
                            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"configMap": {"name": "absent", "optional": True}},
                        ]
                    ),
                    st.sampled_from([{"secret": {"name": "absent"}}, {"clusterTrustBundle": {"path": "x"}}, {}]),
                ),
                max_size=3,
            )
        )
        source = {"sources": sources, "defaultMode": draw(mode)}
    elif kind == "hostPath":  # the path is moved below the sandbox by defang()
        source = {
            "path": draw(abs_path),
            "type": draw(
                mostly(
                    st.sampled_from(["", "DirectoryOrCreate", "FileOrCreate"]),
                    st.sampled_from(["Directory", "File", "Socket", "Bogus"]),
                )
            ),
        }
    else:
        source = {"claimName": "c"} if kind == "persistentVolumeClaim" else {"server": "s", "path": "/"}
    return {"name": vname, kind: source}, cms, secrets


env_var = mostly(
    st.fixed_dictionaries(
        {
            "name": mostly(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), text),
            "value": st.one_of(text, st.just("$(A)-$$(B)")),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("FROM_FIELD"),
            "valueFrom": st.fixed_dictionaries({"fieldRef": st.fixed_dictionaries({"fieldPath": field_paths})}),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("FROM_REF"),
            "valueFrom": st.one_of(
                st.fixed_dictionaries(
                    {
                        "configMapKeyRef": st.fixed_dictionaries(
                            {"name": dns, "key": dns}, optional={"optional": st.booleans()}
                        )
                    }
                ),
                st.fixed_dictionaries(
                    {
                        "secretKeyRef": st.fixed_dictionaries(
                            {"name": dns, "key": dns}, optional={"optional": st.booleans()}
                        )
                    }
                ),
                st.just({"resourceFieldRef": {"resource": "limits.cpu"}}),
            ),
        }
    ),
    odds=4,
)


@st.composite
def container(draw: st.DrawFn, cname: Any, volume_names: list[str]) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": cname,
        "image": draw(
            mostly(st.sampled_from(["busybox", "docker://busybox:1.36", "/images/x.sif", "oras://r/x:1"]), text)
        ),
    }
    # Only harmless programs: these pods run on this host.
    c["command"] = draw(st.one_of(st.just(["true"]), st.lists(text, max_size=3).map(lambda a: ["echo", *a])))
    if draw(st.booleans()):
        c["args"] = draw(st.lists(text, max_size=3))
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_var, max_size=4))
    if draw(st.integers(0, 4)) == 0:
        c["envFrom"] = draw(
            st.lists(
                mostly(
                    st.fixed_dictionaries(
                        {"configMapRef": st.fixed_dictionaries({"name": dns}, optional={"optional": st.just(True)})},
                        optional={"prefix": text},
                    ),
                    st.fixed_dictionaries({"secretRef": st.fixed_dictionaries({"name": dns})}),
                    st.just({"bogusRef": {}}),
                    odds=3,
                ),
                max_size=2,
            )
        )
    if volume_names and draw(st.booleans()):
        mount_paths = draw(st.lists(abs_path, min_size=1, max_size=3, unique=True))
        c["volumeMounts"] = [
            draw(
                st.fixed_dictionaries(
                    {
                        "name": mostly(st.sampled_from(volume_names), st.just("missing"), junk),
                        "mountPath": st.just(path),
                    },
                    optional={
                        "readOnly": st.booleans(),
                        "subPath": rel_path,
                        "subPathExpr": st.just("$(FROM_FIELD)"),
                        "mountPropagation": mostly(
                            st.sampled_from(["None", "HostToContainer"]), st.just("Bidirectional")
                        ),
                    },
                )
            )
            for path in mount_paths
        ]
    if draw(st.booleans()):
        c["workingDir"] = draw(abs_path)
    if draw(st.booleans()):
        c["resources"] = draw(resources)
    if draw(st.integers(0, 7)) == 0:  # junk fields: ignored ones, unsupported ones, made-up ones
        c.update(
            draw(
                st.dictionaries(
                    mostly(
                        st.sampled_from(["ports", "imagePullPolicy", "stdin", "securityContext", "tty"]),
                        st.sampled_from(["lifecycle", "restartPolicy", "bogus"]),
                        st.text(max_size=6),
                        odds=4,
                    ),
                    junk,
                    max_size=2,
                )
            )
        )
    return c


@st.composite
def pod_bodies(draw: st.DrawFn, pool: str) -> Any:
    """A RetrievedPodData: valid-ish, then junk fields, then values of the wrong type at random spots."""
    uid = draw(
        mostly(
            st.uuids().map(str),
            st.sampled_from(["", "..", "a/b", "x" * 300, "\ud800", "ok-uid_1.2", "a b", "abc\n"]),
            junk,
        )
    )
    meta: dict[str, Any] = {
        "name": draw(name_like),
        "namespace": draw(mostly(st.just("default"), name_like)),
        "uid": uid,
    }
    if draw(st.booleans()):
        meta["labels"] = draw(st.dictionaries(dns, text, max_size=3))
    if draw(st.booleans()):
        meta["annotations"] = draw(
            st.dictionaries(
                mostly(
                    dns,
                    st.sampled_from(
                        [
                            "slurm-job.vk.io/flags",
                            "slurm-job.vk.io/pre-exec",
                            "slurm-job.vk.io/mpi-flags",
                            "slurm-job.vk.io/image-root",
                            "interlink.eu/pod-ip",
                        ]
                    ),
                    odds=3,
                ),
                text,
                max_size=3,
            )
        )
    vnames = draw(st.lists(mostly(dns, name_like.filter(lambda v: isinstance(v, str))), max_size=4, unique=True))
    volumes, cms, secrets = [], [], []
    for vname in vnames:
        v, c, s = draw(volume(vname))
        volumes.append(v)
        cms += c
        secrets += s
    n_init, n_main = draw(st.integers(0, 2)), draw(st.integers(1, 3))
    names: list[Any] = [
        f"c{i}-{n}" if isinstance(n, str) else n
        for i, n in enumerate(draw(st.lists(name_like, min_size=n_init + n_main, max_size=n_init + n_main)))
    ]
    if len(names) > 1 and draw(st.integers(0, 9)) == 0:
        names[-1] = names[0]  # a duplicate container name
    init = [draw(container(n, vnames)) for n in names[:n_init]]
    main = [draw(container(n, vnames)) for n in names[n_init:]]
    spec: dict[str, Any] = {"containers": main}
    if init:
        spec["initContainers"] = init
    if volumes:
        spec["volumes"] = volumes
    placement = draw(
        mostly(
            st.sampled_from(["default", "toleration", "selector", "both-agree"]),
            st.sampled_from(["conflict", "invalid"]),
        )
    )
    toleration = {"key": "pool.vk.io", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    if placement in ("toleration", "both-agree", "conflict"):
        spec["tolerations"] = [toleration]
    if placement in ("selector", "both-agree"):
        spec["nodeSelector"] = {"pool.vk.io": pool}
    if placement == "conflict":
        spec["nodeSelector"] = {"pool.vk.io": pool + "-other"}
    if placement == "invalid":
        spec["tolerations"] = [{**toleration, "value": "Not A Pool!"}]
    spec.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "restartPolicy": st.sampled_from(["Never", "Always"]),
                    "activeDeadlineSeconds": mostly(st.integers(1, 10**6), st.integers(-1, 0), junk),
                    "terminationGracePeriodSeconds": mostly(st.integers(0, 100), junk),
                    "hostNetwork": mostly(st.just(False), st.just(True)),
                    "ephemeralContainers": st.just([]),
                    "resources": resources,
                },
            )
        )
    )
    if draw(st.integers(0, 5)) == 0:
        spec.update(
            draw(st.dictionaries(st.sampled_from(["affinity", "overhead", "bogus", "hostPID"]), junk, max_size=2))
        )
    the_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
    body: Any = {
        "pod": the_pod,
        "container": [
            {"name": n, "configMaps": None, "secrets": None, "projectedvolumemaps": None, "emptyDirs": None}
            for n in names
        ],
        "jobConfig": {"SingularityHubProxy": {"server": "", "master_token": "", "cache_validity_seconds": 0}},
    }
    # Real interLink puts every object in every container's entry; spread them at random instead.
    for entry in body["container"]:
        entry["configMaps"] = [cm for cm in cms if draw(mostly(st.just(True), st.just(False), odds=3))] or None
        entry["secrets"] = [s for s in secrets if draw(mostly(st.just(True), st.just(False), odds=3))] or None
    if draw(st.integers(0, 9)) == 0:
        body = [body]  # interLink <= 0.4
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        where, key = draw(st.sampled_from(list(_spots(body))), label="mutated spot")
        where[key] = draw(junk, label="wrong value")
    return body


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


def test_hypothesis_pods_get_200_or_a_4xx_naming_a_field(live: Live) -> None:
    answers: collections.Counter[int] = collections.Counter()

    @settings(FUZZ, max_examples=POD_EXAMPLES)
    @given(body=pod_bodies(live.pool))
    def check(body: Any) -> None:
        defang(body, live.sandbox)
        response = live.send("POST", "/create", body)
        answers[response.status_code] += 1
        what = f"create {json.dumps(body)[:600]}"
        assert_not_5xx_and_explained(response, what)
        if response.status_code == 200:
            created = response.json()
            assert created["PodUID"] == _uid_of(body), created
            assert created["PodJID"], created
            the_pod = (body[0] if isinstance(body, list) else body)["pod"]
            status = live.send("GET", "/status", [the_pod])
            assert status.status_code == 200, status.text
            [one] = status.json()
            assert one["UID"] == created["PodUID"]
            deleted = live.send("POST", "/delete", the_pod)
            assert deleted.status_code == 200, deleted.text
        else:
            assert response.status_code in (400, 413, 422), f"{what}\n-> {response.status_code} {response.text}"
            if response.status_code != 413:
                assert FIELD_MESSAGE.match(response.text), (
                    f"{what}\n-> {response.status_code} names no field: {response.text[:300]}"
                )
        live.assert_alive()

    check()
    # The property proves little unless the generator's pods often get all the way through.
    assert answers[200] >= POD_EXAMPLES // 20, answers


# --- getLogs options on a real pod -------------------------------------------------------------

log_int = mostly(
    st.integers(0, 1000),
    st.integers(-3, -1),
    st.integers(2**62, 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    junk,
    odds=8,
)
log_bool = mostly(st.booleans(), st.none(), st.integers(0, 1), junk)
since_time = mostly(
    st.sampled_from(["0001-01-01T00:00:00Z", "", "2024-01-01T00:00:00Z", "2999-01-01T00:00:00+02:00"]),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-14:00",
            "0001-01-01T00:00:00+14:00",
            "0002-01-01T00:00:00+14:00",
            "not a time",
            "2024-02-30T00:00:00Z",
            "2024-01-01",
            "2024-01-01T00:00:00",
        ]
    ),
    st.datetimes().map(str),
    junk,
)
log_opts = st.fixed_dictionaries(
    {},
    optional={
        "Tail": log_int,
        "Bytes": log_int,
        "SinceSeconds": log_int,
        "SinceTime": since_time,
        "Timestamps": log_bool,
        "Follow": log_bool,
        "Previous": log_bool,
    },
)


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


HELLO_PREFIX_WITH_TIMESTAMP = re.compile(r"[0-9TZ:.+\-]*( (h(e(l(l(o(\n)?)?)?)?)?)?)?")


def is_output_of_hello(text: str) -> bool:
    """What ``echo hello``'s log may look like under any getLogs options: all of it (with or without a
    timestamp), nothing, or the first N bytes of either (Kubernetes' limit-bytes counts from the start)."""
    return "hello\n".startswith(text) or "hello\n" in text or HELLO_PREFIX_WITH_TIMESTAMP.fullmatch(text) is not None


def test_getlogs_options_on_a_real_pod_never_get_a_5xx(live: Live, finished_pod: dict[str, Any]) -> None:
    answers: collections.Counter[int] = collections.Counter()

    @settings(FUZZ, max_examples=LOG_EXAMPLES)
    @given(opts=mostly(log_opts, junk), container=mostly(st.just("main"), text))
    def check(opts: Any, container: str) -> None:
        body = logs_body(finished_pod, container)
        body["Opts"] = opts
        response = live.send("GET", "/getLogs", body)
        answers[response.status_code] += 1
        assert_not_5xx_and_explained(response, f"getLogs {json.dumps(body)[:400]}")
        if response.status_code == 200:  # all of it, its tail, its first N bytes (--limit-bytes), or nothing
            assert is_output_of_hello(response.text), response.text
        else:
            assert response.status_code in (400, 404), response.text
            assert FIELD_MESSAGE.match(response.text) or response.status_code == 404, response.text
        live.assert_alive()

    check()
    assert answers[200] >= LOG_EXAMPLES // 10, answers


# --- wrong types the renderer must reject (found by the fuzzing above) ----------------------------


def _minimal(**container: Any) -> dict[str, Any]:
    p = pod(containers={"main": ["true"]})
    p["spec"]["containers"][0].update(container)
    return create_body(p)


def _with(
    body: dict[str, Any],
    *,
    spec: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    pod_fields: dict[str, Any] | None = None,
    entry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body["pod"]["spec"].update(spec or {})
    body["pod"]["metadata"].update(meta or {})
    body["pod"].update(pod_fields or {})
    body["container"][-1].update(entry or {})
    return body


MOUNT = {"volumeMounts": [{"name": "v", "mountPath": "/v"}]}
IP_ENV = {"env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
LABELS_ENV = {"env": [{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]}
RENDERER_CRASHES = {
    "resources-not-an-object": _minimal(resources=True),
    "resources-limits-a-list": _minimal(resources={"limits": ["cpu"]}),
    "volumeMount-name-a-list": _with(
        _minimal(volumeMounts=[{"name": [], "mountPath": "/v"}]), spec={"volumes": [{"name": "v", "emptyDir": {}}]}
    ),
    "configMaps-entry-a-string": _with(_minimal(), entry={"configMaps": ["x"]}),
    "secrets-metadata-a-string": _with(_minimal(), entry={"secrets": [{"metadata": "x"}]}),
    "pod-status-a-string": _with(_minimal(**IP_ENV), pod_fields={"status": "x"}),
    "labels-a-list": _with(_minimal(**LABELS_ENV), meta={"labels": ["a"]}),
    "mpi-flags-not-a-string": _with(_minimal(), meta={"annotations": {"slurm-job.vk.io/mpi-flags": 1}}),
    "configMap-item-a-string": _with(
        _minimal(**MOUNT),
        spec={"volumes": [{"name": "v", "configMap": {"name": "cm", "items": ["x"]}}]},
        entry={"configMaps": [{"metadata": {"name": "cm"}, "data": {"k": "v"}}]},
    ),
    "projected-downwardAPI-a-string": _with(
        _minimal(**MOUNT), spec={"volumes": [{"name": "v", "projected": {"sources": [{"downwardAPI": "x"}]}}]}
    ),
    "configMapKeyRef-name-a-list": _minimal(
        env=[{"name": "E", "valueFrom": {"configMapKeyRef": {"name": [], "key": "k"}}}]
    ),
}


@pytest.mark.parametrize("body", list(RENDERER_CRASHES.values()), ids=list(RENDERER_CRASHES))
def test_values_of_the_wrong_type_are_a_4xx_naming_the_field(live: Live, body: dict[str, Any]) -> None:
    response = live.send("POST", "/create", body)
    assert_not_5xx_and_explained(response, f"create {json.dumps(body)}")
    assert response.status_code in (400, 422), response.text
    assert FIELD_MESSAGE.match(response.text), response.text


# --- hand-written bad input --------------------------------------------------------------------

GOOD_LOGS = {"Namespace": "default", "PodUID": "u", "PodName": "p", "ContainerName": "c", "Opts": {}}


@pytest.mark.parametrize(
    ("path", "method"), [("/create", "POST"), ("/status", "GET"), ("/delete", "POST"), ("/getLogs", "GET")]
)
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b" \n",
        b"{",
        b"[1,",
        b"{'single': 'quotes'}",
        b"\xff\xfe\x00",
        b"null",
        b"NaN",
        b"1e999",
        b'"text"',
        b"[" * 100_000,
        b'{"a":' * 50_000,
        b"9" * 5000,
        b"[" + b"9" * 5000 + b"]",
        b"\xef\xbb\xbf[]",
        b'{"pod": {"metadata": {"uid": "\\ud800", "name": "n", "namespace": "d"}}}',
    ],
    ids=lambda raw: repr(raw[:20]),
)
def test_malformed_json_is_a_400_with_a_message(live: Live, path: str, method: str, raw: bytes) -> None:
    response = live.http.request(method, path, content=raw, headers={"content-type": "application/json"})
    assert_not_5xx_and_explained(response, f"{method} {path} {raw[:40]!r}")
    if path != "/status" or raw.strip() not in (b"[]", b"\xef\xbb\xbf[]"):
        assert 400 <= response.status_code < 500, f"{raw[:40]!r} -> {response.status_code} {response.text[:200]}"
    live.assert_alive()


@pytest.mark.parametrize(
    ("path", "method", "body", "field"),
    [
        ("/create", "POST", [], "body"),
        ("/create", "POST", [{}, {}], "body"),
        ("/create", "POST", {"pod": []}, "pod"),
        ("/create", "POST", {"pod": {"metadata": {"uid": 1}}}, "pod.metadata.uid"),
        ("/create", "POST", {"pod": {"metadata": {"uid": "u", "name": "n", "namespace": "d"}, "spec": []}}, "pod.spec"),
        (
            "/create",
            "POST",
            {"pod": {"metadata": {"uid": "u", "name": "n", "namespace": "d"}, "spec": {}}},
            "pod.spec.containers",
        ),
        ("/status", "GET", {"not": "a list"}, "body"),
        ("/status", "GET", [1], "[0]"),
        ("/status", "GET", [{"metadata": {"uid": "u", "name": "n"}}], "[0].metadata.namespace"),
        ("/delete", "POST", [], "body"),
        ("/delete", "POST", {"metadata": None}, "body.metadata"),
        ("/getLogs", "GET", [], "body"),
        ("/getLogs", "GET", {**GOOD_LOGS, "PodUID": 7}, "PodUID"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": [1]}, "Opts"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": {"Tail": "3"}}, "Opts.Tail"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": {"Tail": -1}}, "Opts.Tail"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": {"SinceSeconds": -5}}, "Opts.SinceSeconds"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": {"SinceTime": "9999-12-31T23:59:59-14:00"}}, "Opts.SinceTime"),
        ("/getLogs", "GET", {**GOOD_LOGS, "Opts": {"SinceTime": "yesterday"}}, "Opts.SinceTime"),
    ],
)
def test_wrong_shapes_are_a_400_naming_the_field(live: Live, path: str, method: str, body: Any, field: str) -> None:
    response = live.send(method, path, body)
    assert response.status_code == 400, response.text
    assert response.text.startswith(f"{field}: "), response.text


def test_unknown_uids(live: Live) -> None:
    stranger = pod(containers={"main": ["true"]})
    deleted = live.send("POST", "/delete", stranger)
    assert deleted.status_code == 200 and deleted.text.strip(), deleted.text
    status = live.send("GET", "/status", [stranger])
    assert status.status_code == 200 and status.json() == []
    logs = live.send("GET", "/getLogs", logs_body(stranger, "main"))
    assert logs.status_code == 404 and stranger["metadata"]["uid"] in logs.text


def test_unknown_container_of_a_known_pod_is_a_404(live: Live, finished_pod: dict[str, Any]) -> None:
    logs = live.send("GET", "/getLogs", logs_body(finished_pod, "nope"))
    assert logs.status_code == 404 and "'nope'" in logs.text


@pytest.mark.parametrize(
    ("path", "method"), [("/create", "POST"), ("/status", "GET"), ("/delete", "POST"), ("/getLogs", "GET")]
)
def test_huge_bodies_are_a_413(live: Live, path: str, method: str) -> None:
    huge = json.dumps({"pad": "x" * (MAX_BODY + 1)}).encode()
    declared = live.http.request(method, path, content=huge)
    assert declared.status_code == 413 and str(MAX_BODY) in declared.text, declared.text

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        for i in range(0, len(huge), 16 * 1024):
            yield huge[i : i + 16 * 1024]

    streamed = live.http.request(method, path, content=chunks())
    assert streamed.status_code == 413 and str(MAX_BODY) in streamed.text, streamed.text
    live.assert_alive()


def test_a_body_just_under_the_limit_is_parsed(live: Live) -> None:
    pad = "x" * (MAX_BODY - 200)
    response = live.send("GET", "/status", [{"metadata": {"uid": "u", "name": "n", "namespace": "d", "pad": pad}}])
    assert response.status_code == 200 and response.json() == []


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "application/xml",
        None,
        "application/json; charset=latin-1",
    ],
)
def test_content_type_is_not_trusted_but_never_breaks_anything(live: Live, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    ping = live.http.request("GET", "/status", content=b"[]", headers=headers)
    assert ping.status_code == 200, ping.text  # interLink's JSON, whatever the label says
    form = live.http.request("POST", "/create", content=b"pod=x&container=y", headers=headers)
    assert form.status_code == 400 and form.text.startswith("body: "), form.text
    xml = live.http.request("POST", "/delete", content=b"<pod uid='x'/>", headers=headers)
    assert xml.status_code == 400 and xml.text.startswith("body: "), xml.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/create"),
        ("PUT", "/create"),
        ("PATCH", "/status"),
        ("GET", "/delete"),
        ("DELETE", "/getLogs"),
        ("POST", "/healthz"),
    ],
)
def test_wrong_methods_are_a_405(live: Live, method: str, path: str) -> None:
    response = live.http.request(method, path, content=b"{}")
    assert response.status_code == 405 and response.text.strip(), response.text


def test_unknown_paths_are_a_404(live: Live) -> None:
    response = live.http.request("POST", "/createe", content=b"{}")
    assert response.status_code == 404 and response.text.strip()


def test_the_gateway_still_serves_a_real_pod_after_the_fuzzing(live: Live) -> None:
    p = pod(containers={"main": ["echo", "still-here"]}, name="after")
    created = live.send("POST", "/create", create_body(p))
    assert created.status_code == 200, created.text

    def done() -> bool:
        [status] = live.send("GET", "/status", [p]).json()
        return all("terminated" in c["state"] for c in status["containers"])

    asyncio.run(eventually(_async(done), what="the pod finished"))
    assert live.send("GET", "/getLogs", logs_body(p, "main")).text == "still-here\n"
    health = live.http.get("/healthz")
    assert health.status_code == 200 and health.json()["nats"] is True
