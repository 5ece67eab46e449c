"""Pods for the renderer's property tests: a corpus that renders, field paths, and mutations to other JSON types.

The corpus is a valid pod with every feature the renderer reads (all volume kinds with and without interLink data,
env valueFrom/envFrom, downward API, annotations, resources, ...) and the golden cases; ``mutated`` replaces a few
random nested values with values of OTHER JSON types (null, bool, int, float, string, list, object).
Used by ``test_scripts_types*.py`` and ``test_scripts_parse.py``.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
from typing import Any

from golden_cases import BUILD, CASES
from hypothesis import event
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_job

RT = pb.ContainerRuntime
UID = "0b6c1f9e-aaaa-bbbb-cccc-1234567890ab"
# INTERLINK_NATS_FUZZ_SCALE=20 for a longer campaign (as for tests/test_gateway_fuzz_*.py).
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
        "team": "it's",
    }
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "rich",
                "namespace": "ns",
                "uid": UID,
                "labels": {"app": "x", "tier": "batch"},
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
