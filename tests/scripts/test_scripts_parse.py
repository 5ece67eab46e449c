"""parse_pod: interLink's JSON -> the typed pod model the renderer reads (services/scripts/pod_parse.py).

Table tests of valid pods (the model they become) and invalid ones (the exact rejection, which the gateway sends
as its 4xx), then properties over the type-fuzzing corpus: the parser rejects a pod exactly when, and exactly as,
rendering does on every runtime, and it never changes its input.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interlink_nats.services.scripts import PodRejected, render_job
from interlink_nats.services.scripts.errors import PodMistyped, checked
from interlink_nats.services.scripts.launch import EnvVar
from interlink_nats.services.scripts.pod_model import (
    DownwardVolume,
    EmptyDir,
    EnvEntry,
    FieldRef,
    HostPath,
    KeyRef,
    NotAString,
    ObjectVolume,
    Pod,
    ProjectedVolume,
)
from interlink_nats.services.scripts.pod_parse import parse_pod
from interlink_nats.services.scripts.pod_resources import ContainerResources
from scripts_corpus import CORPUS, GPU_BUILDS, SCALE, field_is_in, mutated

UID = "3f1d2c4b-0000-1111-2222-333344445555"


def pod(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """A bare pod: one busybox container unless ``spec`` says otherwise."""
    return {
        "metadata": {"uid": UID, "name": "p", "namespace": "ns", **metadata},
        "spec": spec if spec is not None else {"containers": [{"name": "main", "image": "busybox"}]},
    }


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "busybox", **fields}


def with_containers(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod({"containers": list(containers), **spec})


def rejection(data: Any) -> str:
    with pytest.raises(PodRejected) as info:
        parse_pod(data)
    return str(info.value)


# --- valid pods ----------------------------------------------------------------------------------------------


def test_a_minimal_pod() -> None:
    parsed = parse_pod(pod())
    assert (parsed.metadata.uid, parsed.metadata.name, parsed.metadata.namespace) == (UID, "p", "ns")
    (c,) = parsed.spec.containers
    assert (c.where, c.name, c.image, c.command, c.args, c.working_dir) == (
        "spec.containers[0]",
        "main",
        "busybox",
        (),
        (),
        "",
    )
    assert (c.env, c.env_from, c.volume_mounts, c.resources) == ((), (), (), ContainerResources(0, 0, 0))
    assert parsed.spec.init_containers == parsed.spec.volumes == ()


@pytest.mark.parametrize(
    "wrap",
    [lambda p: p, lambda p: {"pod": p, "container": None}, lambda p: [{"pod": p}]],
    ids=["bare pod", "RetrievedPodData", "interLink <= 0.4 list"],
)
def test_every_shape_interlink_sends_parses_to_the_same_pod(wrap: Any) -> None:
    assert parse_pod(wrap(pod())) == parse_pod(pod())


def test_containers_keep_their_order_and_paths() -> None:
    spec = {
        "initContainers": [container(name="init", command=["sh", "-c", "true"])],
        "containers": [container(name="a", args=["x"], workingDir="/w"), container(name="b")],
    }
    parsed = parse_pod(pod(spec))
    assert [(c.where, c.name) for c in parsed.spec.init_containers] == [("spec.initContainers[0]", "init")]
    assert [(c.where, c.name) for c in parsed.spec.containers] == [
        ("spec.containers[0]", "a"),
        ("spec.containers[1]", "b"),
    ]
    assert parsed.spec.init_containers[0].command == ("sh", "-c", "true")
    assert (parsed.spec.containers[0].args, parsed.spec.containers[0].working_dir) == (("x",), "/w")


def test_env_literals_become_the_variables_the_container_gets_and_the_rest_is_left_to_rendering() -> None:
    env = [
        {"name": "PLAIN", "value": "1"},
        {"name": "EMPTY"},
        {"name": "REF", "value": "$(PLAIN)/x"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    (c,) = parse_pod(with_containers(container(env=env))).spec.containers
    assert c.env == (
        EnvVar("PLAIN", "1", False, 0),
        EnvVar("EMPTY", "", False, 1),
        EnvEntry("REF", "$(PLAIN)/x", None),
        EnvEntry("POD", "", FieldRef("metadata.name", "spec.containers[0].env[3].valueFrom.fieldRef.fieldPath")),
        EnvEntry("KEY", "", KeyRef("spec.containers[0].env[4].valueFrom.secretKeyRef", True, "s", "k", False)),
    )


def test_each_volume_kind_has_its_source() -> None:
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/srv", "type": "Directory"}},
        {"name": "cfg", "configMap": {"name": "app", "items": [{"key": "a", "path": "b", "mode": 0o400}]}},
        {"name": "sec", "secret": {"secretName": "s", "optional": True}},
        {"name": "dapi", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "proj", "projected": {"defaultMode": 0o440, "sources": [{"serviceAccountToken": {"path": "t"}}]}},
    ]
    app = {"metadata": {"name": "app"}, "data": {"a": "x"}}
    parsed = parse_pod(
        {"pod": pod({"containers": [container()], "volumes": volumes}), "container": [{"configMaps": [app]}]}
    )
    sources = {v.name: v.source for v in parsed.spec.volumes}
    assert [(v.index, v.kind, v.where) for v in parsed.spec.volumes][1] == (1, "hostPath", "spec.volumes[1].hostPath")
    assert sources["scratch"] == EmptyDir()
    assert sources["host"] == HostPath("/srv", "Directory")
    cfg = sources["cfg"]
    assert isinstance(cfg, ObjectVolume) and (cfg.secret, cfg.object_name, cfg.default_mode) == (False, "app", 0o644)
    (item,) = checked(cfg.items)
    assert (item.where, item.key, item.path, item.mode) == ("spec.volumes[2].configMap.items[0]", "a", "b", 0o400)
    sec = sources["sec"]
    assert isinstance(sec, ObjectVolume) and (sec.name_key, sec.optional, sec.default_mode) == (
        "secretName",
        True,
        0o600,
    )
    dapi = sources["dapi"]
    assert isinstance(dapi, DownwardVolume) and [i.field_path for i in checked(dapi.items)] == ["metadata.name"]
    proj = sources["proj"]
    assert isinstance(proj, ProjectedVolume) and proj.default_mode == 0o440
    assert checked(proj.sources) == ()  # service account tokens are left out


def test_interlink_data_is_decoded_by_name_and_the_last_container_wins() -> None:
    def entry(text: str) -> dict[str, Any]:
        return {
            "configMaps": [{"metadata": {"name": "cm"}, "data": {"a": text}, "binaryData": {"b": "AAE="}}],
            "secrets": [{"metadata": {"name": "s"}, "data": {"k": base64.b64encode(b"v").decode()}}],
        }

    data = parse_pod({"pod": pod(), "container": [entry("first"), entry("second")]}).data
    cm = data.config_maps["cm"]
    assert (cm.where, checked(cm.files)) == ("container[1].configMaps[0]", {"a": b"second", "b": b"\x00\x01"})
    assert (cm.key_where("a"), cm.key_where("b")) == (
        'container[1].configMaps[0].data["a"]',
        'container[1].configMaps[0].binaryData["b"]',
    )
    assert checked(data.secrets["s"].files) == {"k": b"v"}


def test_resources_are_parsed_with_where_the_gpus_are_asked() -> None:
    resources = {"requests": {"cpu": "250m", "memory": "1Ki"}, "limits": {"cpu": "1", "nvidia.com/gpu": 2}}
    (c,) = parse_pod(with_containers(container(resources=resources))).spec.containers
    assert (c.resources, c.gpu_kind) == (ContainerResources(1000, 1024, 2), "limits")


def test_an_image_of_another_type_is_left_to_the_runtime_to_reject() -> None:
    (c,) = parse_pod(with_containers(container(image=7))).spec.containers
    assert c.image == NotAString("int")


# Fields read only when rendering needs them: the pod parses, the field holds its rejection.
ON_DEMAND = [
    ({"status": 5}, lambda p: p.status.pod_ip, "status: expected an object, got a number"),
    ({"status": {"hostIP": []}}, lambda p: p.status.host_ip, "status.hostIP: expected a string, got a list"),
    ({"spec_nodeName": 1}, lambda p: p.spec.node_name, "spec.nodeName: expected a string, got a number"),
    (
        {"configMap_items": 3},
        lambda p: p.spec.volumes[0].source.items,
        "spec.volumes[0].configMap.items: expected a list, got a number",
    ),
]


@pytest.mark.parametrize(("change", "read", "message"), ON_DEMAND, ids=[m.split(":")[0] for _, _, m in ON_DEMAND])
def test_a_field_read_on_demand_keeps_its_rejection_until_it_is_read(
    change: dict[str, Any], read: Any, message: str
) -> None:
    data = pod()
    for key, value in change.items():
        if key == "status":
            data["status"] = value
        elif key in ("labels", "annotations"):
            data["metadata"][key] = value
        elif key == "configMap_items":
            data["spec"]["volumes"] = [{"name": "v", "configMap": {"name": "cm", "items": value}}]
            data = {"pod": data, "container": [{"configMaps": [{"metadata": {"name": "cm"}}]}]}
        else:
            data["spec"][key.removeprefix("spec_")] = value
    field = read(parse_pod(data))
    assert isinstance(field, PodRejected) and str(field) == message
    with pytest.raises(PodRejected, match="^" + message.replace("[", r"\[").replace("]", r"\]") + "$"):
        checked(field)


def test_a_null_annotation_is_absent_and_a_label_or_annotation_of_another_type_is_refused_at_once() -> None:
    """Checked at the door as the API server decodes them (map[string]string), not when something reads them."""
    meta = parse_pod(pod(annotations={"other": "x", "gone": None})).metadata
    assert (meta.annotation("other"), meta.annotation("gone"), meta.annotation("absent")) == ("x", None, None)
    assert meta.annotations == {"other": "x"}
    for data, message in [
        (pod(annotations={"slurm-job.vk.io/flags": 3}), 'metadata.annotations["slurm-job.vk.io/flags"]: expected a'),
        (pod(labels={"a": 1}), 'metadata.labels["a"]: expected a string, got a number'),
    ]:
        with pytest.raises(PodMistyped, match="^" + re.escape(message)):
            parse_pod(data)


# --- invalid pods: the exact message (the gateway's 4xx names the same field) -----------------------------------


def with_volume(volume: dict[str, Any]) -> dict[str, Any]:
    return pod({"containers": [container()], "volumes": [volume]})


def with_mounts(*mounts: dict[str, Any]) -> dict[str, Any]:
    return pod({"containers": [container(volumeMounts=list(mounts))], "volumes": [{"name": "v", "emptyDir": {}}]})


def with_env(*env: dict[str, Any]) -> dict[str, Any]:
    return with_containers(container(env=list(env)))


C0 = "spec.containers[0]"
INVALID: list[tuple[str, Any, str]] = [
    ("no pod", [], "pod: expected one pod"),
    ("not an object", "x", "pod: expected an object"),
    ("pod of another type", {"pod": 1}, "pod: expected an object, got a number"),
    ("metadata", {"metadata": [], "spec": {}}, "metadata: expected an object, got a list"),
    ("no uid", {"metadata": {}, "spec": {}}, "metadata.uid: the pod UID is required (it names the job directory)"),
    ("name", pod(name=1), "metadata.name: expected a string, got a number"),
    ("no containers", pod({}), "spec.containers: a pod needs at least one container"),
    ("volumeDevices", with_containers(container(volumeDevices=[])), f"{C0}.volumeDevices: not supported off-cluster"),
    (
        "typo",
        with_containers(container(comand=["x"])),
        f"{C0}.comand: unknown field: Kubernetes has no field 'comand' here (a typo?)",
    ),
    (
        "host network",
        pod({"containers": [container()], "hostNetwork": True}),
        "spec.hostNetwork: cannot share the host's namespaces on a batch site",
    ),
    (
        "pod spec field",
        pod({"containers": [container()], "hostnameOverride": "h"}),
        "spec.hostnameOverride: not supported off-cluster",
    ),
    (
        "sidecar",
        pod({"initContainers": [container(name="s", restartPolicy="Always")], "containers": [container()]}),
        "spec.initContainers[0].restartPolicy: sidecar containers are not supported",
    ),
    (
        "container name",
        with_containers(container(name="Main")),
        f"{C0}.name: container names must be DNS labels: 'Main'",
    ),
    (
        "duplicate container",
        with_containers(container(), container()),
        "spec.containers[1].name: duplicate container name 'main'",
    ),
    ("command word", with_containers(container(command=["a", 1])), f"{C0}.command[1]: expected a string, got a number"),
    (
        "working dir",
        with_containers(container(workingDir="w")),
        f"{C0}.workingDir: must be an absolute path without '..': 'w'",
    ),
    (
        "env name",
        with_env({"name": "A=B"}),
        f"{C0}.env[0].name: invalid environment variable name 'A=B': printable ASCII other than '=' (Kubernetes' rule)",
    ),
    ("env value", with_env({"name": "A", "value": 1}), f"{C0}.env[0].value: expected a string, got a number"),
    ("empty valueFrom", with_env({"name": "A", "valueFrom": {}}), f"{C0}.env[0].valueFrom: empty valueFrom"),
    (
        "resourceFieldRef",
        with_env({"name": "A", "valueFrom": {"resourceFieldRef": {}}}),
        f"{C0}.env[0].valueFrom.resourceFieldRef: unresolved valueFrom is not supported",
    ),
    (
        "envFrom",
        with_containers(container(envFrom=[{"prefix": "P"}])),
        f"{C0}.envFrom[0]: envFrom needs configMapRef or secretRef",
    ),
    (
        "resource",
        with_containers(container(resources={"limits": {"hugepages-2Mi": "1"}})),
        f'{C0}.resources.limits["hugepages-2Mi"]: unsupported resource (only cpu, memory, nvidia.com/gpu)',
    ),
    (
        "gpu fraction",
        with_containers(container(resources={"limits": {"nvidia.com/gpu": "500m"}})),
        f'{C0}.resources.limits["nvidia.com/gpu"]: GPU counts must be whole numbers',
    ),
    (
        "no such volume",
        with_mounts({"name": "w", "mountPath": "/w"}),
        f"{C0}.volumeMounts[0].name: no volume named 'w' in spec.volumes",
    ),
    (
        "mounted twice",
        with_mounts({"name": "v", "mountPath": "/v"}, {"name": "v", "mountPath": "/v/"}),
        f"{C0}.volumeMounts[1].mountPath: '/v/' is mounted twice",
    ),
    (
        "propagation",
        with_mounts({"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}),
        f"{C0}.volumeMounts[0].mountPropagation: only None/HostToContainer propagation is possible",
    ),
    (
        "volume kind",
        with_volume({"name": "v", "iscsi": {}}),
        "spec.volumes[0].iscsi: volume type 'iscsi' is not supported off-cluster",
    ),
    (
        "volume typo",
        with_volume({"name": "v", "emptydir": {}}),
        "spec.volumes[0].emptydir: unknown volume type: Kubernetes has no volume type 'emptydir' here (a typo?)",
    ),
    (
        "two sources",
        with_volume({"name": "v", "emptyDir": {}, "hostPath": {}}),
        "spec.volumes[0]: a volume needs exactly one source",
    ),
    (
        "duplicate volume",
        pod({"containers": [container()], "volumes": [{"name": "v", "emptyDir": {}}] * 2}),
        "spec.volumes[1].name: duplicate volume name 'v'",
    ),
    (
        "hostPath type",
        with_volume({"name": "v", "hostPath": {"path": "/x", "type": "Dir"}}),
        "spec.volumes[0].hostPath.type: unknown hostPath type 'Dir'",
    ),
    (
        "default mode",
        with_volume({"name": "v", "secret": {"secretName": "s", "defaultMode": 4096}}),
        "spec.volumes[0].secret.defaultMode: mode must be an integer between 0 and 0777",
    ),
    (
        "interLink data",
        {"pod": pod(), "container": [{"configMaps": [{"metadata": {"name": 1}}]}]},
        "container[0].configMaps[0].metadata.name: expected a string, got a number",
    ),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_pods_are_rejected_naming_the_field(data: Any, message: str) -> None:
    assert rejection(data) == message


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in INVALID], ids=[i for i, _, _ in INVALID])
def test_rendering_rejects_them_with_the_parsers_message(data: Any, message: str) -> None:
    with pytest.raises(PodRejected) as info:
        render_job(data)
    assert str(info.value) == message


# --- properties over the type-fuzzing corpus -----------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_the_corpus_parses(index: int) -> None:
    assert isinstance(parse_pod(CORPUS[index]), Pod)


@settings(
    max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=mutated(), runtime=st.sampled_from(sorted(GPU_BUILDS)))
def test_the_parser_rejects_what_rendering_rejects_with_the_same_message(data: dict[str, Any], runtime: str) -> None:
    """A rejection by the parser is rendering's on every runtime; what the parser accepts, rendering may still
    reject (a missing ConfigMap, a runtime's own rule), but never with a crash; and neither changes its input."""
    snapshot = copy.deepcopy(data)
    parse_error: PodRejected | None = None
    try:
        parse_pod(data)
    except PodRejected as e:
        parse_error = e
    assert parse_error is None or field_is_in(data, parse_error.field), parse_error
    render_error: PodRejected | None = None
    try:
        render_job(data, GPU_BUILDS[runtime])
    except PodRejected as e:
        render_error = e
    if parse_error is not None:
        assert render_error is not None and str(render_error) == str(parse_error)
    assert json.dumps(data, sort_keys=True) == json.dumps(snapshot, sort_keys=True)
