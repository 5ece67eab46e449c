"""Hand-written bad input to the gateway: each gets a 4xx that says what was wrong, never a 5xx.

Values of the wrong type, malformed JSON, wrong shapes, unknown UIDs, huge bodies, wrong
content types and methods, unknown paths; and the gateway still serves a real pod afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from gateway_fuzz import FIELD_MESSAGE, MAX_BODY, Live, _async, assert_not_5xx_and_explained
from gateway_fuzz import finished_pod as finished_pod
from gateway_fuzz import live as live
from stack import create_body, eventually, logs_body, pod

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
