"""Values of the wrong JSON type anywhere in a pod or in interLink's data: the renderer either renders the pod or
raises PodRejected naming a field that is in the input, never any other exception (a 500 in the gateway).

Property: take a valid pod (every feature the renderer reads: all volume kinds with and without interLink data,
env valueFrom/envFrom, downward API, annotations, resources, ...), replace a few random nested values with values of
OTHER JSON types (null, bool, int, float, string, list, object), render it for every runtime.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, pod_resources, render_job
from test_scripts_golden import BUILD, CASES

RT = pb.ContainerRuntime
UID = "0b6c1f9e-aaaa-bbbb-cccc-1234567890ab"
# INTERLINK_NATS_FUZZ_SCALE=20 for a longer campaign (as for tests/test_gateway_fuzz.py).
SCALE = max(1, int(os.environ.get("INTERLINK_NATS_FUZZ_SCALE", "1")))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def rich_pod() -> dict[str, Any]:
    """Every field the renderer reads, with the interLink data to resolve them (renders for every runtime)."""
    env = [
        {"name": "PLAIN", "value": "x $(POD) $$(NOT)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "UIDV", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "LABELS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
        {"name": "ANNS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "CMK", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a.txt"}}},
        {"name": "CMO", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}},
        {"name": "SK", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "user", "optional": False}}},
    ]
    mounts = [
        {"name": "cm", "mountPath": "/cm", "readOnly": True},
        {"name": "cm-items", "mountPath": "/cm-items"},
        {"name": "cm-opt", "mountPath": "/cm-opt"},
        {"name": "sec", "mountPath": "/sec", "mountPropagation": "None"},
        {"name": "proj", "mountPath": "/proj"},
        {"name": "proj-data", "mountPath": "/proj-data"},
        {"name": "dapi", "mountPath": "/dapi"},
        {"name": "scratch", "mountPath": "/scratch", "subPathExpr": "$(POD)"},
        {"name": "scratch", "mountPath": "/scratch2", "subPath": "sub/dir", "readOnly": False},
        {"name": "host", "mountPath": "/host"},
        {"name": "host-file", "mountPath": "/host-file"},
    ]
    items = [{"key": "a.txt", "path": "dir/a.txt", "mode": 0o400}, {"key": "b.bin", "path": "b.bin"}]
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "echo $(PLAIN)"],
        "args": ["--x", "$(NS)"],
        "workingDir": "/scratch",
        "env": env,
        "envFrom": [
            {"configMapRef": {"name": "env", "optional": False}, "prefix": "CM_"},
            {"secretRef": {"name": "sec"}},
        ],
        "volumeMounts": mounts,
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi"},
            "limits": {"cpu": 2, "memory": "2Gi", "nvidia.com/gpu": "1"},
        },
        "imagePullPolicy": "IfNotPresent",
    }
    init = {"name": "init", "image": "/images/init.sif", "command": ["true"], "resources": {"limits": {"cpu": "1"}}}
    volumes = [
        {"name": "cm", "configMap": {"name": "cm", "defaultMode": 0o644}},
        {"name": "cm-items", "configMap": {"name": "cm", "items": items, "optional": False}},
        {"name": "cm-opt", "configMap": {"name": "absent", "optional": True}},
        {"name": "sec", "secret": {"secretName": "sec", "items": [{"key": "user", "path": "u", "mode": 0o644}]}},
        {
            "name": "proj",
            "projected": {
                "defaultMode": 0o600,
                "sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"configMap": {"name": "cm", "items": [{"key": "a.txt", "path": "cm/a.txt"}]}},
                    {"secret": {"name": "sec", "optional": True}},
                    {"secret": {"name": "absent", "optional": True}},
                    {
                        "downwardAPI": {
                            "items": [
                                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}, "mode": 0o400},
                                {"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}},
                            ]
                        }
                    },
                ],
            },
        },
        {"name": "proj-data", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        {
            "name": "dapi",
            "downwardAPI": {
                "defaultMode": 0o444,
                "items": [
                    {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
                    {"path": "anns", "fieldRef": {"fieldPath": "metadata.annotations['team']"}},
                ],
            },
        },
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "host", "hostPath": {"path": "/srv/data", "type": "DirectoryOrCreate"}},
        {"name": "host-file", "hostPath": {"path": "/srv/file", "type": "FileOrCreate"}},
        {"name": "unused", "hostPath": {"path": "/srv/other", "type": "Directory"}},
    ]
    annotations = {
        "slurm-job.vk.io/flags": "--partition=gpu --time=01:00:00",
        "slurm-job.vk.io/pre-exec": "module load x",
        "slurm-job.vk.io/singularity-options": "--cleanenv",
        "slurm-job.vk.io/singularity-mounts": "--bind /cvmfs",
        "slurm-job.vk.io/singularity-commands": "--quiet",
        "slurm-job.vk.io/image-root": "docker://registry.example/",
        "slurm-job.vk.io/mpi-flags": "mpirun -np 2",
        "interlink.eu/pod-ip": "10.0.0.9",
        "team": "a",
    }
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "rich",
                "namespace": "ns",
                "uid": UID,
                "labels": {"app": "x", "tier": "it's"},
                "annotations": annotations,
            },
            "spec": {
                "initContainers": [init],
                "containers": [container, {**init, "name": "side", "image": "side:1"}],
                "volumes": volumes,
                "nodeName": "vk-node",
                "serviceAccountName": "default",
                "hostNetwork": False,
                "ephemeralContainers": [],
                "activeDeadlineSeconds": 3600,
                "terminationGracePeriodSeconds": 10,
                "resources": {"limits": {"memory": "8Gi"}},
                "restartPolicy": "Never",
            },
            "status": {"podIP": "10.0.0.8", "hostIP": "192.168.1.1"},
        },
        "container": [
            {"name": "init"},
            {
                "name": "main",
                "configMaps": [
                    {
                        "metadata": {"name": "cm"},
                        "data": {"a.txt": "line 1\n", "e": None},
                        "binaryData": {"b.bin": base64.b64encode(b"\x00\x01\xfe").decode()},
                    },
                    {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CERT"}},
                    {"metadata": {"name": "env"}, "data": {"A": "1", "B": "$(A)"}},
                ],
                "secrets": [{"metadata": {"name": "sec"}, "data": {"user": b64("svc"), "password": b64("hunter2")}}],
                "projectedvolumemaps": [{"metadata": {"name": "proj-data"}, "data": {"token": "t", "namespace": "ns"}}],
            },
            {"name": "side", "configMaps": [], "secrets": None},
        ],
        "jobConfig": {},
    }


GPU_BUILDS = {
    "apptainer": BUILD["apptainer"],
    "singularity": BUILD["singularity"],
    "podman": BUILD["podman"],
    "none": BUILD["none"],
}
CORPUS: list[dict[str, Any]] = [rich_pod(), *(case[0] for case in CASES.values())]
RENDERS: list[tuple[int, str, pb.BuildConfig]] = [
    *((0, runtime, bc) for runtime, bc in GPU_BUILDS.items()),
    *((k + 1, name, bc) for k, (name, (_, bc)) in enumerate(CASES.items())),
]


@pytest.mark.parametrize(("index", "bc"), [(k, bc) for k, _, bc in RENDERS], ids=[f"{k}-{n}" for k, n, _ in RENDERS])
def test_corpus_renders(index: int, bc: pb.BuildConfig) -> None:
    """The mutation property below starts from pods that render: otherwise it would test nothing."""
    render_job(copy.deepcopy(CORPUS[index]), bc)


# --- field paths ---------------------------------------------------------------------------------

_SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
MISSING = object()


def _segments(path: str) -> list[str | int]:
    out: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        assert m and m.end() > pos, f"unparsable field path {path!r} at {pos}"
        name, index, key = m.groups()
        out.append(name if name is not None else int(index) if index is not None else json.loads(key))
        pos = m.end()
    return out


def field_is_in(data: dict[str, Any], path: str) -> bool:
    """A rejection's field names a place in the input: it follows the input's members and list items; past an
    absent or null member (Kubernetes: null is absent) it may only name members, i.e. required fields of that
    absent object (``metadata.uid`` when there is no metadata). A list index out of range, an index into an
    object, or a member of a string, number or list is a path that is not in the input."""
    segments = _segments(path)
    node: Any
    if segments[0] == "pod":  # the whole pod (e.g. "not valid Unicode")
        node, segments = data["pod"], segments[1:]
    elif segments[0] == "container":
        node = data
    else:
        node = data["pod"]
    for seg in segments:
        if isinstance(seg, int):
            if not isinstance(node, list) or seg >= len(node):
                return False
            node = node[seg]
        elif node is None:
            continue  # inside an absent object: only members
        elif not isinstance(node, dict):
            return False
        else:
            node = node.get(seg)
    return True


def test_field_paths_resolve() -> None:
    d = rich_pod()
    assert field_is_in(d, 'metadata.annotations["slurm-job.vk.io/mpi-flags"]')
    assert field_is_in(d, "spec.containers[0].volumeMounts[3].mountPropagation")
    assert field_is_in(d, "container[1].configMaps[0].data")
    assert field_is_in(d, "status")
    assert field_is_in(d, "spec.containers[0].command")  # present
    assert field_is_in(d, "spec.containers[1].workingDir")  # absent but in an existing object
    assert field_is_in(d, "spec.containers[1].env.x")  # a required field of an absent object
    assert not field_is_in(d, "spec.containers[1].env[0]")
    assert not field_is_in(d, "spec.containers.name")
    assert not field_is_in(d, "spec.containers[7]")
    assert not field_is_in(d, "spec.volumes[0].configMap.name.x")
    assert not field_is_in(d, "container[9].secrets")


# --- mutation ------------------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every nested position (object members and list items) below the top level."""
    out: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out += _paths(child, (*prefix, key))
    return out


PATHS = [_paths(d) for d in CORPUS]

small = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**40), st.text(max_size=8))
JSON_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "bool": st.booleans(),
    "int": st.one_of(st.integers(-3, 1000), st.integers(), st.sampled_from([0, 1, -1, 2**63, 2**64 + 1, 10**30])),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "str": st.one_of(st.text(max_size=12), st.sampled_from(["", "true", "x", "1", "1e999999", "/", "..", "a/b"])),
    "list": st.lists(small, max_size=3),
    "dict": st.dictionaries(st.text(max_size=6), small, max_size=3),
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    for kind, t in (("int", int), ("float", float), ("str", str), ("list", list), ("dict", dict)):
        if isinstance(value, t):
            return kind
    raise AssertionError(value)


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(0, len(CORPUS) - 1))
    data = copy.deepcopy(CORPUS[index])
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        old = _kind(_get(data, path))
        kind = draw(st.sampled_from([k for k in JSON_KINDS if k != old]))
        _set(data, path, draw(JSON_KINDS[kind]))
    return data


def check_renders_or_names_a_field(data: dict[str, Any], bc: pb.BuildConfig, mask: bool = False) -> None:
    snapshot = json.dumps(data)
    rejected: PodRejected | None = None
    try:
        render_job(data, bc, mask_secrets=mask)
    except PodRejected as e:
        rejected = e
    except Exception as e:  # the bug class: a crash is a 500 in the gateway
        raise AssertionError(f"{type(e).__name__}: {e}\n{snapshot[:4000]}") from e
    event("rendered" if rejected is None else "rejected")
    if rejected is not None:
        assert field_is_in(data, rejected.field), f"{rejected.field!r} is not in the input: {rejected}"
        assert str(rejected).startswith(rejected.field + ": ")
    assert json.dumps(data) == snapshot, "render_job modified its input"


@settings(
    max_examples=600 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mutated(), runtime=st.sampled_from(sorted(GPU_BUILDS)), mask=st.booleans())
def test_values_of_any_json_type_render_or_are_rejected_naming_the_field(
    data: dict[str, Any], runtime: str, mask: bool
) -> None:
    check_renders_or_names_a_field(data, GPU_BUILDS[runtime], mask)


@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
def test_pod_resources_never_crashes(data: dict[str, Any]) -> None:
    if not isinstance(data.get("pod"), dict):
        return
    rejected: PodRejected | None = None
    try:
        pod_resources(data["pod"])
    except PodRejected as e:
        rejected = e
    if rejected is not None:
        assert field_is_in(data, rejected.field), rejected


# --- the cases the gateway fuzzer found (tests/test_gateway_fuzz.py), and their siblings ---------


def _pod(**container: Any) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": UID},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"], **container}]},
        },
        "container": [{"name": "main"}],
    }


def _with(
    d: dict[str, Any],
    *,
    spec: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
    entry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    d["pod"]["spec"].update(spec or {})
    d["pod"]["metadata"].update(meta or {})
    d["pod"].update(pod or {})
    d["container"][-1].update(entry or {})
    return d


MOUNT = {"volumeMounts": [{"name": "v", "mountPath": "/v"}]}
EMPTY_DIR = {"volumes": [{"name": "v", "emptyDir": {}}]}
CM = {"configMaps": [{"metadata": {"name": "cm"}, "data": {"k": "v"}}]}


def _env(value_from: dict[str, Any]) -> dict[str, Any]:
    return {"env": [{"name": "E", "valueFrom": value_from}]}


def _field_env(path: str) -> dict[str, Any]:
    return _env({"fieldRef": {"fieldPath": path}})


WRONG_TYPES: dict[str, tuple[dict[str, Any], str]] = {
    # found by the gateway fuzzer
    "resources-true": (_pod(resources=True), "spec.containers[0].resources"),
    "limits-a-list": (_pod(resources={"limits": ["cpu"]}), "spec.containers[0].resources.limits"),
    "mount-name-a-list": (
        _with(_pod(volumeMounts=[{"name": [], "mountPath": "/v"}]), spec=EMPTY_DIR),
        "spec.containers[0].volumeMounts[0].name",
    ),
    "configMaps-entry-a-string": (_with(_pod(), entry={"configMaps": ["x"]}), "container[0].configMaps[0]"),
    "secret-metadata-a-string": (
        _with(_pod(), entry={"secrets": [{"metadata": "x"}]}),
        "container[0].secrets[0].metadata",
    ),
    "status-a-string": (_with(_pod(**_field_env("status.podIP")), pod={"status": "x"}), "status"),
    "labels-a-list": (_with(_pod(**_field_env("metadata.labels")), meta={"labels": ["a"]}), "metadata.labels"),
    "mpi-flags-an-int": (
        _with(_pod(), meta={"annotations": {"slurm-job.vk.io/mpi-flags": 1}}),
        'metadata.annotations["slurm-job.vk.io/mpi-flags"]',
    ),
    "configMap-item-a-string": (
        _with(_pod(**MOUNT), spec={"volumes": [{"name": "v", "configMap": {"name": "cm", "items": ["x"]}}]}, entry=CM),
        "spec.volumes[0].configMap.items[0]",
    ),
    "projected-downwardAPI-a-string": (
        _with(_pod(**MOUNT), spec={"volumes": [{"name": "v", "projected": {"sources": [{"downwardAPI": "x"}]}}]}),
        "spec.volumes[0].projected.sources[0].downwardAPI",
    ),
    "configMapKeyRef-name-a-list": (
        _pod(**_env({"configMapKeyRef": {"name": [], "key": "k"}})),
        "spec.containers[0].env[0].valueFrom.configMapKeyRef.name",
    ),
    "hostPath-type-a-list": (
        _with(_pod(**MOUNT), spec={"volumes": [{"name": "v", "hostPath": {"path": "/x", "type": []}}]}),
        "spec.volumes[0].hostPath.type",
    ),
    # values that used to be coerced silently (0, [], "false" are not what the field means)
    "env-value-an-int": (_pod(env=[{"name": "E", "value": 0}]), "spec.containers[0].env[0].value"),
    "workingDir-an-int": (_pod(workingDir=0), "spec.containers[0].workingDir"),
    "readOnly-a-string": (
        _with(_pod(volumeMounts=[{"name": "v", "mountPath": "/v", "readOnly": "false"}]), spec=EMPTY_DIR),
        "spec.containers[0].volumeMounts[0].readOnly",
    ),
    "subPath-a-list": (
        _with(_pod(volumeMounts=[{"name": "v", "mountPath": "/v", "subPath": []}]), spec=EMPTY_DIR),
        "spec.containers[0].volumeMounts[0].subPath",
    ),
    "optional-a-string": (
        _with(_pod(**MOUNT), spec={"volumes": [{"name": "v", "configMap": {"name": "cm", "optional": "yes"}}]}),
        "spec.volumes[0].configMap.optional",
    ),
    "hostNetwork-a-string": (_with(_pod(), spec={"hostNetwork": "false"}), "spec.hostNetwork"),
    "ephemeralContainers-an-object": (_with(_pod(), spec={"ephemeralContainers": {}}), "spec.ephemeralContainers"),
    "grace-a-string": (
        _with(_pod(), spec={"terminationGracePeriodSeconds": "30"}),
        "spec.terminationGracePeriodSeconds",
    ),
    "deadline-beyond-a-duration": (_with(_pod(), spec={"activeDeadlineSeconds": 10**30}), "spec.activeDeadlineSeconds"),
    "pod-resources-a-list": (_with(_pod(), spec={"resources": ["cpu"]}), "spec.resources"),
    "envFrom-prefix-a-list": (
        _with(_pod(envFrom=[{"configMapRef": {"name": "cm"}, "prefix": []}]), entry=CM),
        "spec.containers[0].envFrom[0].prefix",
    ),
    "envFrom-ref-a-string": (_pod(envFrom=[{"secretRef": "s"}]), "spec.containers[0].envFrom[0].secretRef"),
    "fieldRef-a-string": (_pod(**_env({"fieldRef": "x"})), "spec.containers[0].env[0].valueFrom.fieldRef"),
    "label-value-an-int": (
        _with(_pod(**_field_env("metadata.labels['a']")), meta={"labels": {"a": 1}}),
        'metadata.labels["a"]',
    ),
    "pod-ip-annotation-an-int": (
        _with(_pod(**_field_env("status.podIP")), meta={"annotations": {"interlink.eu/pod-ip": 1}}),
        'metadata.annotations["interlink.eu/pod-ip"]',
    ),
    "name-a-list": (_with(_pod(), meta={"name": ["x"]}), "metadata.name"),
    "pre-exec-false": (
        _with(_pod(), meta={"annotations": {"slurm-job.vk.io/pre-exec": False}}),
        'metadata.annotations["slurm-job.vk.io/pre-exec"]',
    ),
    "configMap-data-value-an-int": (
        _with(
            _pod(**MOUNT),
            spec={"volumes": [{"name": "v", "configMap": {"name": "cm"}}]},
            entry={"configMaps": [{"metadata": {"name": "cm"}, "data": {"k": 1}}]},
        ),
        'container[0].configMaps[0].data["k"]',
    ),
    "configMap-binaryData-value-a-list": (
        _with(
            _pod(**MOUNT),
            spec={"volumes": [{"name": "v", "configMap": {"name": "cm"}}]},
            entry={"configMaps": [{"metadata": {"name": "cm"}, "binaryData": {"k": []}}]},
        ),
        'container[0].configMaps[0].binaryData["k"]',
    ),
    "configMap-key-not-a-path": (
        _with(
            _pod(**MOUNT),
            spec={"volumes": [{"name": "v", "configMap": {"name": "cm"}}]},
            entry={"configMaps": [{"metadata": {"name": "cm"}, "data": {"../k": "v"}}]},
        ),
        'container[0].configMaps[0].data["../k"]',
    ),
    "metadata-name-an-int": (
        _with(_pod(), entry={"projectedvolumemaps": [{"metadata": {"name": 3}}]}),
        "container[0].projectedvolumemaps[0].metadata.name",
    ),
    "entry-a-list": ({**_pod(), "container": [[]]}, "container[0]"),
    "quantity-huge-exponent": (
        _pod(resources={"limits": {"cpu": "1e-999999999"}}),
        'spec.containers[0].resources.limits["cpu"]',
    ),
    "quantity-beyond-int64": (
        _pod(resources={"limits": {"memory": "9Ei"}}),
        'spec.containers[0].resources.limits["memory"]',
    ),
}


@pytest.mark.parametrize(("data", "field"), list(WRONG_TYPES.values()), ids=list(WRONG_TYPES))
def test_wrong_types_are_rejected_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(PodRejected) as e:
        render_job(copy.deepcopy(data), pb.BuildConfig(runtime=RT.NONE))
    assert e.value.field == field, e.value
    assert field_is_in(data, e.value.field)


def test_gpu_rejection_names_where_the_gpu_is_asked() -> None:
    d = _pod(resources={"requests": {"nvidia.com/gpu": "1"}})
    with pytest.raises(PodRejected) as e:
        render_job(d, pb.BuildConfig(runtime=RT.APPTAINER))
    assert e.value.field == 'spec.containers[0].resources.requests["nvidia.com/gpu"]'


def test_null_is_absent() -> None:
    """Kubernetes JSON: null is the field's empty value, not a wrong type."""
    d = _with(
        _pod(env=None, args=None, workingDir=None, resources={"limits": None}, volumeMounts=None),
        spec={"volumes": None, "initContainers": None, "terminationGracePeriodSeconds": None},
        meta={"labels": None, "annotations": None},
        pod={"status": None},
        entry={"configMaps": None, "secrets": None},
    )
    render_job(d, pb.BuildConfig(runtime=RT.NONE))
