"""Unit tests of the pure renderer's rejections: what it cannot honour it rejects, each naming its field."""

from __future__ import annotations

from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_job
from render_cases import NONE, RT, ctr, data, rejected

# --- rejections ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("volume", "field"),
    [
        ({"persistentVolumeClaim": {"claimName": "c"}}, "spec.volumes[0].persistentVolumeClaim.claimName"),
        ({"nfs": {"server": "s", "path": "/"}}, "spec.volumes[0].nfs.server"),
        ({"iscsi": {"targetPortal": "t"}}, "spec.volumes[0].iscsi"),
        ({"csi": {"driver": "d"}}, "spec.volumes[0].csi"),
        ({"ephemeral": {}}, "spec.volumes[0].ephemeral"),
        ({"hostPath": {"path": "relative"}}, "spec.volumes[0].hostPath.path"),
        ({"hostPath": {"path": "/x", "type": "Weird"}}, "spec.volumes[0].hostPath.type"),
        ({"configMap": {"name": "missing"}}, "spec.volumes[0].configMap.name"),
        ({"secret": {"secretName": "missing"}}, "spec.volumes[0].secret.secretName"),
    ],
)
def test_unsupported_volumes_rejected(volume: dict[str, Any], field: str) -> None:
    d = data([ctr(volumeMounts=[{"name": "v", "mountPath": "/v"}])], volumes=[{"name": "v", **volume}])
    assert rejected(d).field == field


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"hostNetwork": True}, "spec.hostNetwork"),
        ({"hostPID": True}, "spec.hostPID"),
        ({"ephemeralContainers": [{"name": "dbg"}]}, "spec.ephemeralContainers"),
        ({"someFutureField": 1}, "spec.someFutureField"),
        ({"activeDeadlineSeconds": -1}, "spec.activeDeadlineSeconds"),
    ],
)
def test_unsupported_pod_fields_rejected(spec: dict[str, Any], field: str) -> None:
    assert rejected(data(**spec)).field == field


def test_ignored_fields_accepted() -> None:
    c = ctr(
        ports=[{"containerPort": 80}],
        livenessProbe={"exec": {"command": ["true"]}},
        imagePullPolicy="Always",
        securityContext={"runAsUser": 1000},
        terminationMessagePath="/dev/termination-log",
    )
    render_job(
        data(
            [c],
            hostNetwork=False,
            tolerations=[{"key": "k"}],
            nodeSelector={"a": "b"},
            serviceAccountName="default",
            restartPolicy="Never",
            dnsPolicy="ClusterFirst",
        ),
        NONE,
    )


@pytest.mark.parametrize(
    ("container", "field"),
    [
        (ctr(lifecycle={"preStop": {}}), "spec.containers[0].lifecycle.preStop"),
        (ctr(volumeDevices=[{}]), "spec.containers[0].volumeDevices"),
        (
            ctr(env=[{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]),
            "spec.containers[0].env[0].valueFrom.resourceFieldRef",
        ),
        (
            ctr(env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            "spec.containers[0].env[0].valueFrom.secretKeyRef",
        ),
        (ctr(env=[{"name": "A=B", "value": "x"}]), "spec.containers[0].env[0].name"),
        (ctr(envFrom=[{"configMapRef": {"name": "nope"}}]), "spec.containers[0].envFrom[0].configMapRef"),
        (ctr(name="Bad_Name"), "spec.containers[0].name"),
        (ctr(volumeMounts=[{"name": "nope", "mountPath": "/x"}]), "spec.containers[0].volumeMounts[0].name"),
        (ctr(command=["echo", "a\x00b"]), "spec.containers[0].command[1]"),
        (ctr(image=""), "spec.containers[0].image"),
    ],
)
def test_unsupported_container_fields_rejected(container: dict[str, Any], field: str) -> None:
    err = rejected(data([container]))
    assert err.field.startswith(field) if "\x00" in str(container) else err.field == field


def test_nul_rejected() -> None:
    assert rejected(data([ctr(args=["a\x00b"])])).message == "contains a NUL character"


def test_none_needs_a_command() -> None:
    c = {"name": "main", "image": "busybox", "args": ["x"]}
    assert rejected(data([c]), NONE).field == "spec.containers[0].command"


def test_gpu_needs_pool_support() -> None:
    d = data([ctr(resources={"limits": {"nvidia.com/gpu": "1"}})])
    assert rejected(d).field == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert "--nv" in render_job(d, pb.BuildConfig(runtime=RT.APPTAINER, gpu_support=True)).script
    podman = render_job(d, pb.BuildConfig(runtime=RT.PODMAN, gpu_support=True)).script
    assert "--device nvidia.com/gpu=all" in podman


def test_unparsable_flags_annotation_rejected() -> None:
    err = rejected(data(annotations={"slurm-job.vk.io/flags": "--comment='unterminated"}))
    assert err.field == 'metadata.annotations["slurm-job.vk.io/flags"]'


def test_apptainer_env_names_must_be_identifiers() -> None:
    d = data([ctr(env=[{"name": "my-var", "value": "x"}])])
    assert rejected(d).field == "spec.containers[0].env[0].name"
    render_job(d, NONE)
    render_job(d, pb.BuildConfig(runtime=RT.PODMAN))


def test_bind_unsafe_mount_path_rejected() -> None:
    d = data([ctr(volumeMounts=[{"name": "v", "mountPath": "/a,b"}])], volumes=[{"name": "v", "emptyDir": {}}])
    assert rejected(d).field == "spec.containers[0].volumeMounts[0].mountPath"
    render_job(d, NONE)


def test_missing_uid_rejected() -> None:
    d = data()
    del d["pod"]["metadata"]["uid"]
    assert rejected(d).field == "metadata.uid"


def test_sidecar_init_containers_rejected() -> None:
    d = data(init=[ctr("side", restartPolicy="Always")])
    assert rejected(d).field == "spec.initContainers[0].restartPolicy"


def test_bind_unsafe_host_path_rejected() -> None:
    d = data(
        [ctr(volumeMounts=[{"name": "h", "mountPath": "/h"}])],
        volumes=[{"name": "h", "hostPath": {"path": "/a:b"}}],
    )
    assert rejected(d).field == "spec.containers[0].volumeMounts[0].name"
    render_job(d, NONE)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"resources": {"claims": [{"name": "gpu"}]}}, "spec.containers[0].resources.claims"),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/v", "recursiveReadOnly": "Enabled"}]},
            "spec.containers[0].volumeMounts[0].recursiveReadOnly",
        ),
    ],
)
def test_fields_that_cannot_be_honoured_are_rejected_not_dropped(patch: dict[str, object], field: str) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u-1"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["true"], **patch}],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
    }
    with pytest.raises(PodRejected) as caught:
        render_job({"pod": pod}, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("pod_data", "field", "says"),
    [
        (lambda: data([ctr(comand=["true"])]), "spec.containers[0].comand", "unknown field"),
        (lambda: data([ctr(volumeDevices=[{}])]), "spec.containers[0].volumeDevices", "not supported off-cluster"),
        (lambda: data(someFutureField=1), "spec.someFutureField", "unknown field"),
        (lambda: data(hostnameOverride="h"), "spec.hostnameOverride", "not supported off-cluster"),
        (
            lambda: data(
                [ctr(volumeMounts=[{"name": "v", "mountPth": "/x"}])], volumes=[{"name": "v", "emptyDir": {}}]
            ),
            "spec.containers[0].volumeMounts[0].mountPth",
            "unknown field",
        ),
        (lambda: data(volumes=[{"name": "v", "emptyDri": {}}]), "spec.volumes[0].emptyDri", "unknown volume type"),
        (lambda: data(volumes=[{"name": "v", "iscsi": {}}]), "spec.volumes[0].iscsi", "not supported off-cluster"),
    ],
)
def test_a_typo_is_an_unknown_field_and_a_real_field_is_not_supported(pod_data: Any, field: str, says: str) -> None:
    """``comand`` is a typo Kubernetes would refuse too; ``volumeDevices`` is real but cannot be honoured on a site."""
    err = rejected(pod_data())
    assert err.field == field
    assert says in err.message
    assert ("unknown" in err.message) != ("not supported" in err.message)


# --- what a job's exec can take ------------------------------------------------------------------


def big_env(kib: int) -> list[dict[str, str]]:
    return [{"name": f"V{i}", "value": "x" * 1000} for i in range(kib)]


def test_an_environment_no_exec_can_take_is_rejected_naming_the_container() -> None:
    """200 KiB of env was accepted, then the job died with "Argument list too long" at run time."""
    d = data([ctr("small"), ctr("big", env=big_env(200))])
    error = rejected(d, NONE)
    assert error.field == "spec.containers[1].env"
    assert "'big'" in str(error) and "KiB" in str(error)
    render_job(data([ctr("small"), ctr("big", env=big_env(64))]), NONE)  # well inside the limit


def test_the_exec_limit_counts_the_resolved_environment_and_bytes_not_characters() -> None:
    """envFrom and $(VAR) expansions reach the exec too; a 4-byte character is 4 bytes of it."""
    config = {"metadata": {"name": "big"}, "data": {f"K{i}": "y" * 1000 for i in range(130)}}
    from_config = ctr(envFrom=[{"configMapRef": {"name": "big"}}], env=[{"name": "A", "value": "x" * 1000}])
    doubled = ctr("echo", env=[*big_env(40), {"name": "ALL", "value": "$(V0)" * 100}])
    wide = ctr("wide", env=[{"name": "W", "value": "\U0001f600" * 32_000}])  # 32,000 chars, 128,000 bytes
    entries = [{"name": "main", "configMaps": [config]}]
    assert rejected(data([from_config], entries=entries), NONE).field == "spec.containers[0].env"
    assert rejected(data([doubled]), NONE).field == "spec.containers[0].env"
    render_job(data([ctr("wide", env=[{"name": "W", "value": "\U0001f600" * 25_000}])]), NONE)  # 100,000 bytes
    assert rejected(data([wide]), NONE).field == "spec.containers[0].env"


def test_the_exec_limit_holds_for_init_containers_too() -> None:
    d = data([ctr()], init=[ctr("setup", env=big_env(200))])
    assert rejected(d, NONE).field == "spec.initContainers[0].env"
