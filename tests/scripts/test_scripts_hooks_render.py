"""Lifecycle hooks as the renderer checks them: each refusal names its field; a pod without hooks renders as before."""

from __future__ import annotations

from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job
from render_cases import ctr, data, rejected

L = "spec.containers[0].lifecycle"


@pytest.mark.parametrize(
    ("lifecycle", "field", "words"),
    [
        ({"preStop": {}}, f"{L}.preStop", "exactly one of exec, httpGet or sleep"),
        ({"preStop": {"sleep": {"seconds": 1}, "exec": {"command": ["x"]}}}, f"{L}.preStop", "exactly one"),
        ({"preStop": {"tcpSocket": {"port": 80}}}, f"{L}.preStop.tcpSocket", "deprecated"),
        ({"preStop": {"grpc": {"port": 80}}}, f"{L}.preStop.grpc", "unknown field"),
        ({"postStart": {"exec": {"command": []}}}, f"{L}.postStart.exec.command", "a command is required"),
        ({"postStart": {"exec": {"command": [1]}}}, f"{L}.postStart.exec.command[0]", "expected a string"),
        ({"postStart": {"sleep": {"seconds": -1}}}, f"{L}.postStart.sleep.seconds", "non-negative"),
        ({"postStart": {"httpGet": {"port": 80, "scheme": "HTTPS"}}}, f"{L}.postStart.httpGet.scheme", "only HTTP"),
        ({"postStart": {"httpGet": {"port": 0}}}, f"{L}.postStart.httpGet.port", "between 1 and 65535"),
        ({"postStart": {"httpGet": {"port": "web"}}}, f"{L}.postStart.httpGet.port", "no port named 'web'"),
        ({"postStart": {"httpGet": {"port": 80, "host": "a b"}}}, f"{L}.postStart.httpGet.host", "not a host"),
        ({"postStart": {"httpGet": {"port": 80, "path": "x"}}}, f"{L}.postStart.httpGet.path", "absolute URL path"),
        ({"postStart": {"httpGet": {"port": 80, "path": "/a\r\nX: y"}}}, f"{L}.postStart.httpGet.path", "control"),
        (
            {"postStart": {"httpGet": {"port": 80, "httpHeaders": [{"name": "A:B", "value": "v"}]}}},
            f"{L}.postStart.httpGet.httpHeaders[0].name",
            "not an HTTP header name",
        ),
        (
            {"postStart": {"httpGet": {"port": 80, "httpHeaders": [{"name": "A", "value": "v\r\nInjected: 1"}]}}},
            f"{L}.postStart.httpGet.httpHeaders[0].value",
            "control characters",
        ),
        ({"stopSignal": "SIGINT"}, f"{L}.stopSignal", "not supported off-cluster"),
        ({"preStart": {}}, f"{L}.preStart", "unknown field"),
    ],
)
def test_a_hook_that_cannot_run_faithfully_is_refused_by_name(
    lifecycle: dict[str, Any], field: str, words: str
) -> None:
    err = rejected(data([ctr(lifecycle=lifecycle)]))
    assert err.field == field
    assert words in err.message


def test_init_containers_may_not_have_hooks() -> None:
    err = rejected(data([ctr()], init=[ctr("i", lifecycle={"preStop": {"sleep": {"seconds": 1}}})]))
    assert err.field == "spec.initContainers[0].lifecycle"


def test_a_named_port_resolves_from_the_containers_ports_and_only_hook_pods_get_hook_code() -> None:
    get = {"httpGet": {"port": "web", "path": "/hi"}}
    c = ctr(ports=[{"name": "web", "containerPort": 8080}], lifecycle={"postStart": get})
    for runtime in (pb.ContainerRuntime.NONE, pb.ContainerRuntime.PODMAN, pb.ContainerRuntime.APPTAINER):
        script = render_job(data([c]), pb.BuildConfig(runtime=runtime)).script
        assert "__http_get 127.0.0.1 8080 /hi" in script
        plain = render_job(data([ctr()]), pb.BuildConfig(runtime=runtime)).script
        assert "__pg[" not in plain and "__http_get" not in plain and "--name" not in plain


def test_a_hook_command_runtime_none_cannot_run_is_refused_by_its_own_path() -> None:
    c = ctr(lifecycle={"preStop": {"exec": {"command": ["A=1", "x"]}}})
    err = rejected(data([c]), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    assert err.field == "spec.containers[0].lifecycle.preStop.exec.command[0]"
