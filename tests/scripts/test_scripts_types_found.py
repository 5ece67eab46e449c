"""Values of the wrong JSON type the gateway fuzzer found (tests/test_gateway_fuzz_*.py), and their siblings.

Each is rejected naming the field (a GPU asked for in the wrong place names where it is asked); ``null`` is absent.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_job
from scripts_corpus import RT, UID, field_is_in

# --- the cases the gateway fuzzer found (tests/test_gateway_fuzz_*.py), and their siblings -------


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
