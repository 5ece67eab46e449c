"""The interLink wire format, parsed and produced with no I/O."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.gateway import wire
from interlink_nats.services.gateway.routing import pool_for_pod
from interlink_nats.services.scripts.errors import PodMistyped
from interlink_nats.services.scripts.pod_model import PodSpec
from interlink_nats.services.scripts.pod_parse import parse_pod

UID = "6f1c2e9a-1111-2222-3333-444455556666"
POD = {
    "metadata": {"name": "hello", "namespace": "default", "uid": UID},
    "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]},
}


def body(data: object) -> bytes:
    return json.dumps(data).encode()


def test_create_accepts_the_object_form_of_interlink_0_5_and_later() -> None:
    data = wire.parse_create(body({"pod": POD, "container": [], "jobConfig": {}}))
    assert data["pod"]["metadata"]["uid"] == UID


def test_create_accepts_the_one_element_array_of_interlink_0_4() -> None:
    data = wire.parse_create(body([{"pod": POD, "container": None}]))
    assert data["pod"]["metadata"]["uid"] == UID


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (b"", "body"),
        (b"{not json", "body"),
        (body([]), "body"),
        (body([{"pod": POD}, {"pod": POD}]), "body"),
        (body({"pod": {"metadata": {"name": "x", "namespace": "d"}, "spec": {}}}), "pod.metadata.uid"),
        (body({"pod": {"metadata": {"name": "x", "namespace": "d", "uid": 7}, "spec": {}}}), "pod.metadata.uid"),
        (body({"pod": {**POD, "spec": {"containers": []}}}), "pod.spec.containers"),
        (body({"pod": {**POD, "spec": "nope"}}), "pod.spec"),
        (body({"pod": POD, "container": {"a": 1}}), "container"),
        (body("a string"), "body"),
    ],
)
def test_create_rejects_malformed_bodies_naming_the_field(payload: bytes, field: str) -> None:
    with pytest.raises(wire.BadRequest) as caught:
        wire.parse_create(payload)
    assert caught.value.field == field
    assert 400 <= caught.value.status_code < 500


def test_status_of_empty_list_is_the_ping() -> None:
    assert wire.parse_status(b"[]") == []


def test_status_names_the_bad_pod_by_index() -> None:
    with pytest.raises(wire.BadRequest) as caught:
        wire.parse_status(body([POD, {"metadata": {"name": "x"}}]))
    assert caught.value.field == "[1].metadata.uid"


def test_logs_read_bytes_not_limitbytes_and_treat_go_zero_time_as_unset() -> None:
    request = wire.parse_logs(
        body(
            {
                "Namespace": "default",
                "PodUID": UID,
                "PodName": "hello",
                "ContainerName": "main",
                "Opts": {
                    "Tail": 0,
                    "Bytes": 100,
                    "Timestamps": False,
                    "Follow": True,
                    "Previous": False,
                    "SinceSeconds": 0,
                    "SinceTime": "0001-01-01T00:00:00Z",
                },
            }
        )
    )
    assert request.limit_bytes == 100
    assert request.tail is None
    assert request.follow is True
    assert request.since is None


def test_logs_since_seconds_becomes_an_absolute_time() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    request = wire.parse_logs(
        body(
            {
                "Namespace": "d",
                "PodUID": UID,
                "PodName": "p",
                "ContainerName": "c",
                "Opts": {"SinceSeconds": 60},
            }
        ),
        now=now,
    )
    assert request.since == now - timedelta(seconds=60)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"Tail": "10"}, "Opts.Tail"),
        ({"Tail": -1}, "Opts.Tail"),
        ({"Follow": "yes"}, "Opts.Follow"),
        ({"SinceTime": "yesterday"}, "Opts.SinceTime"),
        ({"SinceSeconds": 5, "SinceTime": "2026-01-01T00:00:00Z"}, "Opts"),
        ({"LimitBytes": 100}, "Opts.LimitBytes"),  # unknown keys are refused by name, as unknown pod fields are
        ({"tail": 5}, "Opts.tail"),
        ({"a\nb": 5}, 'Opts."a\\nb"'),  # a name that is no identifier is quoted: the message stays one line
    ],
)
def test_logs_reject_bad_options_naming_them(opts: dict[str, object], field: str) -> None:
    with pytest.raises(wire.BadRequest) as caught:
        wire.parse_logs(body({"Namespace": "d", "PodUID": UID, "PodName": "p", "ContainerName": "c", "Opts": opts}))
    assert caught.value.field == field


def test_pod_status_reports_every_container_with_vk_field_names() -> None:
    t0 = datetime(2026, 1, 1, 10, tzinfo=UTC)
    status = pb.JobStatus(
        state=pb.JobState.FAILED,
        containers=[
            pb.ContainerStatus(
                name="prep",
                init=True,
                phase=pb.ContainerPhase.TERMINATED,
                exit_code=3,
                started_at=t0,
                finished_at=t0 + timedelta(seconds=5),
                reason="Error",
            ),
            pb.ContainerStatus(
                name="main",
                phase=pb.ContainerPhase.TERMINATED,
                exit_code=3,
                reason="InitFailed",
                message="init container prep failed",
            ),
            pb.ContainerStatus(name="side", phase=pb.ContainerPhase.RUNNING, started_at=t0),
            pb.ContainerStatus(name="late", phase=pb.ContainerPhase.WAITING, reason="Pending"),
        ],
    )
    out = wire.pod_status_json(wire.PodIdentity(UID, "default", "hello"), "42", status, {"main": "busybox"})
    assert out["UID"] == UID and out["JID"] == "42" and out["name"] == "hello" and out["namespace"] == "default"
    assert [c["name"] for c in out["initContainers"]] == ["prep"]
    assert out["initContainers"][0]["state"]["terminated"] == {
        "exitCode": 3,
        "reason": "Error",
        "startedAt": "2026-01-01T10:00:00Z",
        "finishedAt": "2026-01-01T10:00:05Z",
    }
    main, side, late = out["containers"]
    assert main["state"]["terminated"]["exitCode"] == 3 and main["image"] == "busybox"
    assert side["state"] == {"running": {"startedAt": "2026-01-01T10:00:00Z"}} and side["ready"] is True
    assert late["state"] == {"waiting": {"reason": "Pending"}} and late["ready"] is False


def test_ping_aggregates_live_pools_and_omits_zero_resources() -> None:
    reports = [
        pb.ResourceReport(
            pool="a",
            capacity={"cpu": "64", "memory": "128Gi", "nvidia.com/gpu": "4", "pods": "100"},
            taints=[pb.Taint(key="site", value="a", effect="NoSchedule")],
        ),
        pb.ResourceReport(pool="b", capacity={"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "0"}),
    ]
    out = wire.ping_response(reports)
    assert out["status"] == "ok"
    assert out["resources"]["cpu"] == "64500m"
    assert out["resources"]["memory"] == "129Gi"
    assert out["resources"]["pods"] == "100"
    assert out["resources"]["accelerators"] == [{"resourceType": "nvidia.com/gpu", "available": "4"}]
    assert out["taints"] == [{"key": "site", "value": "a", "effect": "NoSchedule"}]
    assert "cpu" not in wire.ping_response([])["resources"]


def _spec(**spec: Any) -> PodSpec:
    """The parsed spec of a pod with ``spec``'s placement (routing reads the model, never the pod's JSON)."""
    containers = [{"name": "main", "image": "busybox"}]
    return parse_pod(
        {"metadata": {"uid": "u", "name": "p", "namespace": "ns"}, "spec": {"containers": containers, **spec}}
    ).spec


def test_pool_comes_from_the_toleration_kueue_injects() -> None:
    tolerations = [
        {"key": "virtual-node.interlink/no-schedule", "operator": "Exists"},
        {"key": "pool.vk.io", "operator": "Equal", "value": "site-a"},
    ]
    assert pool_for_pod(_spec(tolerations=tolerations), None) == "site-a"
    assert pool_for_pod(_spec(nodeSelector={"pool.vk.io": "b"}), None) == "b"
    assert pool_for_pod(_spec(), "local") == "local"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodeSelector": {"pool.vk.io": 87178291200}}, 'spec.nodeSelector["pool.vk.io"]'),  # found by the fuzzer
        ({"nodeSelector": {"pool.vk.io": 0}}, 'spec.nodeSelector["pool.vk.io"]'),
        ({"tolerations": [{"key": "x"}, {"key": "pool.vk.io", "value": ["a"]}]}, "spec.tolerations[1].value"),
    ],
)
def test_a_pool_that_is_not_a_string_is_refused_as_mistyped_naming_its_field(
    spec: dict[str, object], field: str
) -> None:
    """A type error (the gateway's 400, tests/gateway/test_gateway_door.py) while parsing, before routing reads it."""
    with pytest.raises(PodMistyped) as caught:
        _spec(**spec)
    assert caught.value.field == field
    assert "expected a string, got" in str(caught.value)


def test_a_pool_toleration_without_a_value_names_no_pool() -> None:
    exists = {"key": "pool.vk.io", "operator": "Exists"}
    assert pool_for_pod(_spec(tolerations=[exists, {**exists, "value": ""}]), "local") == "local"
    assert pool_for_pod(_spec(nodeSelector={"pool.vk.io": ""}), "local") == "local"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({}, "names no pool"),
        ({"tolerations": [{"key": "pool.vk.io", "value": "a"}], "nodeSelector": {"pool.vk.io": "b"}}, "more than one"),
        ({"tolerations": [{"key": "pool.vk.io", "value": "Bad.Pool"}]}, "invalid pool name"),
    ],
)
def test_pool_problems_are_4xx_with_a_reason(spec: dict[str, object], needle: str) -> None:
    with pytest.raises(wire.BadRequest) as caught:
        pool_for_pod(_spec(**spec), None)
    assert caught.value.status_code == 422
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    ("body", "lone"),
    [
        (b'{"a": "\\ud800"}', True),  # lone high surrogate, escaped
        (b'{"a": "x\\uDC00"}', True),  # lone low surrogate, escaped, upper case
        (b'{"a": "\xed\xa0\x80"}', True),  # the code unit as bytes (json decodes with surrogatepass)
        (b'{"a": "\\ud83d\\ude00"}', False),  # a valid pair
        ('{"a": "\ud7ff \u00e9 \U0001f600"}'.encode(), False),  # neighbours of the range, raw
        (b'{"a": "\\\\udc00"}', False),  # an escaped backslash, then plain text
        ('{"a": "\\ud800"}'.encode("utf-16"), True),
    ],
)
def test_the_cheap_surrogate_screen_never_misses_a_lone_surrogate(body: bytes, lone: bool) -> None:
    decoded = json.loads(body)
    try:
        json.dumps(decoded, ensure_ascii=False).encode()
        has_lone = False
    except UnicodeEncodeError:
        has_lone = True
    assert has_lone is lone
    if has_lone:
        assert wire.may_hold_surrogates(body)


def test_the_cheap_surrogate_screen_passes_ordinary_pods() -> None:
    pod = {"pod": {"metadata": {"name": "caf\u00e9", "uid": "u"}, "spec": {"containers": [{"name": "m"}]}}}
    assert not wire.may_hold_surrogates(json.dumps(pod).encode())
    assert not wire.may_hold_surrogates(json.dumps(pod, ensure_ascii=False).encode())


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [{"name": "m", "env": -1.5}]},
        {"containers": [{"name": "m", "env": {"A": "b"}}]},
        {"containers": [{"name": "m"}], "initContainers": 7.0},
        {"containers": [{"name": "m"}], "initContainers": [{"name": "i", "env": "A=b"}]},
    ],
    ids=["env-number", "env-object", "init-number", "init-env-string"],
)
def test_create_leaves_malformed_container_shapes_to_the_pod_parser(spec: dict[str, object]) -> None:
    """CI's schema fuzzer sent ``env: -1.5``: a size check here raised TypeError (a 500); the wire reads only
    what it needs and the renderer's parser names the field (test_scripts_render_rejects)."""
    pod = {"metadata": {"name": "p", "namespace": "d", "uid": UID}, "spec": spec}
    wire.parse_create(body({"pod": pod, "container": []}))  # shape errors are named later, by the pod parser


def test_ping_follows_what_is_free_plus_what_the_pools_jobs_hold() -> None:
    busy = pb.ResourceReport(
        pool="busy",
        capacity={"cpu": "64", "memory": "128Gi", "pods": "100"},
        free={"cpu": "2", "memory": "bad", "pods": "100"},  # an unparsable free figure: the total stands
        held={"cpu": "6"},
    )
    full = pb.ResourceReport(pool="full", capacity={"cpu": "8"}, free={"cpu": "60"}, held={"cpu": "4"})
    unknown = pb.ResourceReport(pool="old", capacity={"cpu": "16"})  # a pool that cannot tell: its total
    assert wire.ping_response([busy, full, unknown])["resources"]["cpu"] == str(64 + 8 + 16)  # default: totals
    out = wire.ping_response([busy, full, unknown], free=True)
    assert out["resources"]["cpu"] == str(2 + 6 + 8 + 16)
    assert out["resources"]["memory"] == "128Gi"
    assert out["resources"]["pods"] == "100"
