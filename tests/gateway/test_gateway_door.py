"""One check at the door: ``/create`` refuses, through the gateway's HTTP app, what the Kubernetes API
server would refuse, before routing, groups or rendering read the pod: a 422 naming the field for a rule, a 400
for a value of the wrong JSON type.

The gateway here has a default pool and no submitter: a pod that passed the door would wait for the pool and be
a 503, so each 4xx below is the door's own, at once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stack import create_body, full_stack, gateway_only, new_pool, pod

Change = Callable[[dict[str, Any]], None]


def _meta(key: str, value: Any) -> Change:
    def change(p: dict[str, Any]) -> None:
        p["metadata"][key] = value

    return change


def _spec(key: str, value: Any) -> Change:
    def change(p: dict[str, Any]) -> None:
        p["spec"][key] = value

    return change


def _container(key: str, value: Any) -> Change:
    def change(p: dict[str, Any]) -> None:
        p["spec"]["containers"][0][key] = value

    return change


def _http_get(**fields: Any) -> Change:
    return _container("readinessProbe", {"httpGet": {"port": 8080, **fields}})


C0 = "spec.containers[0]"
RULES: list[tuple[str, Change, str]] = [
    # finding 6: names a site's tenant rule (`lab-*`) matched, and more
    ("namespace with a path", _meta("namespace", "lab-x/../team-b"), "metadata.namespace: must be a DNS label"),
    ("namespace with $(...)", _meta("namespace", "lab-$(id)"), "metadata.namespace: must be a DNS label"),
    ("namespace with a newline", _meta("namespace", "lab-x\nteam-b"), "metadata.namespace: must be a DNS label"),
    ("namespace with a glob", _meta("namespace", "lab-*"), "metadata.namespace: must be a DNS label"),
    ("namespace of 300", _meta("namespace", "lab-" + "x" * 296), "metadata.namespace: must be a DNS label"),
    ("namespace with a dot", _meta("namespace", "lab.x"), "metadata.namespace: must be a DNS label"),
    ("name with uppercase", _meta("name", "Pod_1"), "metadata.name: must be a DNS subdomain"),
    ("name of 254", _meta("name", "p" * 254), "metadata.name: must be a DNS subdomain"),
    # labels (finding 1's gateway half: a group name is a label value)
    (
        "group label with a newline",
        _meta("labels", {"kueue.x-k8s.io/pod-group-name": "g\nid > /tmp/x #"}),
        'metadata.labels["kueue.x-k8s.io/pod-group-name"]: a label value must be',
    ),
    ("label value of 64", _meta("labels", {"app": "x" * 64}), 'metadata.labels["app"]: a label value must be'),
    ("label value with a slash", _meta("labels", {"app": "a/b"}), 'metadata.labels["app"]: a label value must be'),
    ("label key with two slashes", _meta("labels", {"x/y/z": "v"}), 'metadata.labels["x/y/z"]: a key must be'),
    ("label key prefix uppercase", _meta("labels", {"Ex.com/a": "v"}), 'metadata.labels["Ex.com/a"]: a key must be'),
    ("label key name of 64", _meta("labels", {"x" * 64: "v"}), 'metadata.labels["' + "x" * 64 + '"]: a key must'),
    # annotations
    ("annotation key with a space", _meta("annotations", {"a b": "v"}), 'metadata.annotations["a b"]: a key must'),
    ("annotation key empty name", _meta("annotations", {"example.com/": "v"}), 'annotations["example.com/"]: a key'),
    (
        "annotations over 256 KiB",
        _meta("annotations", {"a": "x" * (128 * 1024), "b": "y" * (128 * 1024)}),
        "metadata.annotations: 262146 bytes of keys and values, more than Kubernetes' 262144",
    ),
    # integers in Kubernetes' ranges
    ("negative grace", _spec("terminationGracePeriodSeconds", -1), "spec.terminationGracePeriodSeconds: must be"),
    ("grace past int64", _spec("terminationGracePeriodSeconds", 2**63), "spec.terminationGracePeriodSeconds: must"),
    ("deadline of 0", _spec("activeDeadlineSeconds", 0), "spec.activeDeadlineSeconds: must be between 1 and"),
    ("deadline past int32", _spec("activeDeadlineSeconds", 2**31), "spec.activeDeadlineSeconds: must be between 1"),
    (
        "probe period -1",
        _container("livenessProbe", {"exec": {"command": ["true"]}, "periodSeconds": -1}),
        f"{C0}.livenessProbe.periodSeconds: must be at least 1",
    ),
    (
        "liveness success 2",
        _container("livenessProbe", {"exec": {"command": ["true"]}, "successThreshold": 2}),
        f"{C0}.livenessProbe.successThreshold: must be 1",
    ),
    (
        "startup success 3",
        _container("startupProbe", {"exec": {"command": ["true"]}, "successThreshold": 3}),
        f"{C0}.startupProbe.successThreshold: must be 1",
    ),
    # names inside the spec
    ("container name", _container("name", "Main"), f"{C0}.name: container names must be DNS labels"),
    ("port name with _", _container("ports", [{"name": "web_port", "containerPort": 80}]), f"{C0}.ports[0].name"),
    ("port name of 16", _container("ports", [{"name": "p" * 16, "containerPort": 80}]), f"{C0}.ports[0].name"),
    ("port name digits only", _container("ports", [{"name": "8080", "containerPort": 80}]), f"{C0}.ports[0].name"),
    ("port name with --", _container("ports", [{"name": "a--b", "containerPort": 80}]), f"{C0}.ports[0].name"),
    ("container port 0", _container("ports", [{"containerPort": 0}]), f"{C0}.ports[0].containerPort: must be"),
    (
        "duplicate port name",
        _container("ports", [{"name": "web", "containerPort": 80}, {"name": "web", "containerPort": 81}]),
        f"{C0}.ports[1].name: duplicate port name",
    ),
    ("env name with a newline", _container("env", [{"name": "A\nB", "value": "v"}]), f"{C0}.env[0].name: invalid"),
    ("env name not ASCII", _container("env", [{"name": "É", "value": "v"}]), f"{C0}.env[0].name: invalid"),
    (
        "envFrom prefix with a newline",
        _container("envFrom", [{"prefix": "P\n", "configMapRef": {"name": "cm", "optional": True}}]),
        f"{C0}.envFrom[0].prefix: must be printable ASCII",
    ),
    (
        "envFrom ConfigMap name",
        _container("envFrom", [{"configMapRef": {"name": "Bad_Name", "optional": True}}]),
        f"{C0}.envFrom[0].configMapRef.name: must be a ConfigMap/Secret name",
    ),
    (
        "secretKeyRef name",
        _container("env", [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "../s", "key": "k"}}}]),
        f"{C0}.env[0].valueFrom.secretKeyRef.name: must be a ConfigMap/Secret name",
    ),
    # finding 6: `$` let a final newline through these (it reached the wire as a bare LF)
    (
        "header name with a newline",
        _http_get(httpHeaders=[{"name": "X-Inj\n", "value": "v"}]),
        f"{C0}.readinessProbe.httpGet.httpHeaders[0].name: not an HTTP header name",
    ),
    (
        "header name with _",
        _http_get(httpHeaders=[{"name": "X_Inj", "value": "v"}]),
        f"{C0}.readinessProbe.httpGet.httpHeaders[0].name: not an HTTP header name",
    ),
    ("httpGet host with a newline", _http_get(host="localhost\n"), f"{C0}.readinessProbe.httpGet.host: not a host"),
    (
        "probe port name with a newline",
        _container("readinessProbe", {"tcpSocket": {"port": "web\n"}}),
        f"{C0}.readinessProbe.tcpSocket.port: a port number or the name",
    ),
    # placement, read by routing only once checked
    (
        "toleration key",
        _spec("tolerations", [{"key": "a b", "operator": "Exists"}]),
        "spec.tolerations[0].key: a key must",
    ),
    (
        "toleration Exists with a value",
        _spec("tolerations", [{"key": "pool.vk.io", "operator": "Exists", "value": "x"}]),
        "spec.tolerations[0].value: must be empty when the operator is Exists",
    ),
    (
        "toleration value",
        _spec("tolerations", [{"key": "pool.vk.io", "operator": "Equal", "value": "a\nb"}]),
        "spec.tolerations[0].value: must be a label value",
    ),
    ("nodeSelector value", _spec("nodeSelector", {"pool.vk.io": "a b"}), 'spec.nodeSelector["pool.vk.io"]: a label'),
]
TYPES: list[tuple[str, Change, str]] = [
    ("labels a list", _meta("labels", ["a"]), "metadata.labels: expected an object, got a list"),
    ("label value a number", _meta("labels", {"a": 1}), 'metadata.labels["a"]: expected a string, got a number'),
    ("annotation a list", _meta("annotations", {"a": []}), 'metadata.annotations["a"]: expected a string, got a list'),
    ("grace a string", _spec("terminationGracePeriodSeconds", "10"), "spec.terminationGracePeriodSeconds: expected"),
    ("nodeSelector pool a number", _spec("nodeSelector", {"pool.vk.io": 7}), 'spec.nodeSelector["pool.vk.io"]: exp'),
]


async def _answers(nats_url: str, cases: list[tuple[str, Change, str]]) -> dict[str, tuple[int, str]]:
    """Each case's (status, text) from one gateway (no submitter: a pod past the door would be a 503)."""
    out = {}
    async with gateway_only(nats_url, default_pool=new_pool(), pool_wait_s=0.2) as stack:
        for case, change, _ in cases:
            p = pod(containers={"main": ["true"]})
            change(p)
            response = await stack.post("/create", create_body(p))
            out[case] = (response.status_code, response.text)
    return out


async def test_what_the_api_server_refuses_is_a_422_naming_the_field(nats_url: str) -> None:
    answers = await _answers(nats_url, RULES)
    wrong = [
        f"{case}: {status} {text!r}"
        for case, _, message in RULES
        for status, text in [answers[case]]
        if status != 422 or message not in text or not text.startswith("pod rejected: ") or "\n" in text.strip()
    ]
    assert not wrong, "\n".join(wrong)


async def test_a_value_of_the_wrong_json_type_is_a_400_naming_the_field(nats_url: str) -> None:
    answers = await _answers(nats_url, TYPES)
    wrong = [
        f"{case}: {status} {text!r}"
        for case, _, message in TYPES
        for status, text in [answers[case]]
        if status != 400 or message not in text
    ]
    assert not wrong, "\n".join(wrong)


VALID_EDGES: list[Change] = [
    _meta("name", "a.b-c." + "d" * 60),  # a subdomain, not a label
    _meta("namespace", "n" * 63),
    _meta("labels", {"example.com/My_Key.1": "Val-1_x.Y", "empty": "", "kueue.x-k8s.io/queue-name": "q"}),
    _meta("annotations", {"Example.COM/Mixed-Case": "any text\nat all", "gone": None, "x": "y" * 200_000}),
    _container("env", [{"name": "my.var-1", "value": "v"}, {"name": "WITH SPACE", "value": "v"}]),
    _container("ports", [{"name": "http-alt2", "containerPort": 8080}, {"containerPort": 9090, "hostPort": 0}]),
    _spec("terminationGracePeriodSeconds", 0),
    _spec("activeDeadlineSeconds", 2**31 - 1),
    _spec("tolerations", [{"operator": "Exists"}, {"key": "pool.vk.io", "operator": "Exists"}]),
    _container("readinessProbe", {"httpGet": {"port": "http-alt2", "httpHeaders": [{"name": "X-Ok-1", "value": "v"}]}}),
]


async def test_a_pod_at_the_edges_of_every_rule_passes_and_runs(nats_url: str, tmp_path: Path) -> None:
    p = pod(containers={"main": ["true"]})
    for change in VALID_EDGES:
        change(p)
    async with full_stack(nats_url, tmp_path) as stack:
        p["spec"]["nodeSelector"] = {"pool.vk.io": stack.pool}
        response = await stack.post("/create", create_body(copy.deepcopy(p)))
        assert response.status_code == 200, response.text
        record = stack.gateway.store.get(p["metadata"]["uid"])
        assert record is not None and record.pool == stack.pool and record.images == {"main": "busybox"}


@pytest.mark.parametrize("namespace", ["lab-x/../team-b", "lab-$(id)", "lab-x\nteam-b", "lab-*", "l" * 300])
async def test_a_namespace_a_site_rule_would_match_never_reaches_a_pool(nats_url: str, namespace: str) -> None:
    """Finding 6: each ran as the tenant of the site rule ``lab-*``; now the door refuses it, so no pool (and no
    account rule) ever sees it, even with a submitter listening."""
    async with gateway_only(nats_url, default_pool=new_pool(), pool_wait_s=0.2) as stack:
        p = pod(containers={"main": ["true"]})
        p["metadata"]["namespace"] = namespace
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 422 and response.text.startswith("pod rejected: metadata.namespace: ")
        assert stack.gateway.store.get(p["metadata"]["uid"]) is None
