"""Unit tests of the pure renderer: resources, rejections (each names its field), images, runtimes, masking, CLI."""

from __future__ import annotations

import base64
import datetime
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import typer
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, expand, parse_quantity, pod_resources, render_job
from interlink_nats.services.scripts.cli import render
from typer.testing import CliRunner

RT = pb.ContainerRuntime
NONE = pb.BuildConfig(runtime=RT.NONE)
APPTAINER = pb.BuildConfig(runtime=RT.APPTAINER)


def ctr(name: str = "main", **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["true"], **kw}


def data(
    containers: list[dict[str, Any]] | None = None,
    *,
    volumes: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    entries: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "annotations": annotations or {}},
            "spec": {
                "containers": containers or [ctr()],
                "initContainers": init or [],
                "volumes": volumes or [],
                **spec,
            },
        },
        "container": entries or [],
    }


def rejected(d: dict[str, Any], bc: pb.BuildConfig = APPTAINER) -> PodRejected:
    with pytest.raises(PodRejected) as e:
        render_job(d, bc)
    assert e.value.field in str(e.value)
    assert isinstance(e.value, ValueError)
    return e.value


def test_runtime_none_ignores_the_image_but_rejects_one_that_is_not_a_string() -> None:
    """The image is echoed in the pod's status: a number there was a 500 in the gateway (found by the fuzz test)."""
    assert list(render_job(data([ctr(image="anything")]), NONE).containers) == ["main"]
    assert rejected(data([ctr(image=7)]), NONE).field == "spec.containers[0].image"


# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1Gi", Fraction(2**30)),
        ("1e3", Fraction(1000)),
        ("128M", Fraction(128_000_000)),
        ("0.5", Fraction(1, 2)),
        ("100k", Fraction(100_000)),
        ("1.5Ki", Fraction(1536)),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1GB", "abc", "-1", "1.2.3", "Gi"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_pod_resources_sum_main_max_init() -> None:
    pod = data(
        [
            ctr("a", resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}),
            ctr("b", resources={"limits": {"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "2"}}),
        ],
        init=[ctr("i1", resources={"limits": {"cpu": "3"}}), ctr("i2", resources={"requests": {"memory": "4Gi"}})],
        activeDeadlineSeconds=600,
    )["pod"]
    r = pod_resources(pod)
    assert r.cpu_millis == 3000  # max(sum main = 1250, max init = 3000)
    assert r.memory_bytes == 4 * 2**30  # max(1.5Gi, 4Gi)
    assert r.gpus == 2
    assert r.wall_time == datetime.timedelta(seconds=600)


def test_pod_resources_main_sum_wins() -> None:
    pod = data(
        [ctr("a", resources={"limits": {"cpu": "1"}}), ctr("b", resources={"requests": {"cpu": "1500m"}})],
        init=[ctr("i", resources={"limits": {"cpu": "2"}})],
    )["pod"]
    r = pod_resources(pod)
    assert r.cpu_millis == 2500
    assert r.wall_time is None


def test_render_carries_resources_and_backend_flags() -> None:
    d = data(
        [ctr(resources={"limits": {"cpu": "2", "memory": "1Gi"}})],
        annotations={"slurm-job.vk.io/flags": "--time=00:10:00 -p 'geant 4' --gres=gpu:1"},
    )
    job = render_job(d, NONE)
    assert job.resources.cpu_millis == 2000
    assert job.backend_flags == ["--time=00:10:00", "-p", "geant 4", "--gres=gpu:1"]
    assert job.pod == pb.PodRef(uid="uid-1", namespace="ns", name="p")
    assert job.containers == ["main"]


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"limits": {"cpu": "lots"}}, 'spec.containers[0].resources.limits["cpu"]'),
        ({"requests": {"amd.com/gpu": "1"}}, 'spec.containers[0].resources.requests["amd.com/gpu"]'),
        ({"limits": {"nvidia.com/gpu": "0.5"}}, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ],
)
def test_bad_resources_rejected(resources: dict[str, Any], field: str) -> None:
    assert rejected(data([ctr(resources=resources)])).field == field


def test_ephemeral_storage_is_ignored() -> None:
    render_job(data([ctr(resources={"requests": {"ephemeral-storage": "1Gi"}})]), NONE)


# --- rejections ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("volume", "field"),
    [
        ({"persistentVolumeClaim": {"claimName": "c"}}, "spec.volumes[0].persistentVolumeClaim"),
        ({"nfs": {"server": "s", "path": "/"}}, "spec.volumes[0].nfs"),
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
        (ctr(lifecycle={"preStop": {}}), "spec.containers[0].lifecycle"),
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


# --- semantics -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("$(A)", "a"),
        ("$$(A)", "$(A)"),
        ("$(B)", "$(B)"),
        ("x$(A)y$(A)", "xaya"),
        ("$", "$"),
        ("$$", "$"),
        ("$(A", "$(A"),
        ("$x", "$x"),
        ("$$$(A)", "$a"),
        ("a$", "a$"),
        ("$()", "$()"),
    ],
)
def test_kubernetes_expansion(text: str, out: str) -> None:
    assert expand(text, {"A": "a"}) == out


def test_apptainer_exec_vs_run() -> None:
    with_cmd = render_job(data([ctr(command=["echo"], args=["hi"])]), APPTAINER).script
    assert "apptainer exec docker://busybox echo hi" in with_cmd
    no_cmd = render_job(data([{"name": "main", "image": "busybox", "args": ["hi"]}]), APPTAINER).script
    assert "apptainer run docker://busybox hi" in no_cmd
    sing = render_job(data([ctr(env=[{"name": "A", "value": "1"}])]), pb.BuildConfig(runtime=RT.SINGULARITY)).script
    assert "env -- SINGULARITYENV_A=1 singularity exec docker://busybox true" in sing


def test_podman_entrypoint_semantics() -> None:
    s = render_job(data([ctr(command=["sh", "-c"], args=["echo hi"])]), pb.BuildConfig(runtime=RT.PODMAN)).script
    # The pod's labels come between `run --rm` and the entrypoint (test_podman_labels_and_resources).
    assert """podman run --rm --label""" in s
    assert """ --entrypoint '["sh", "-c"]' busybox 'echo hi'""" in s
    s = render_job(
        data([{"name": "main", "image": "busybox", "args": ["a"]}]), pb.BuildConfig(runtime=RT.PODMAN)
    ).script
    assert """--label "interlink-nats.job-dir=$__job_dir" busybox a""" in s
    assert "--entrypoint" not in s


@pytest.mark.parametrize(
    ("image", "bc", "annotations", "expected"),
    [
        ("busybox", pb.BuildConfig(), {}, "__img=docker://busybox"),
        ("busybox", pb.BuildConfig(image_prefix="oras://reg/"), {}, "__img=oras://reg/busybox"),
        (
            "busybox",
            pb.BuildConfig(image_prefix="oras://reg/"),
            {"slurm-job.vk.io/image-root": "docker://mirror/"},
            "__img=docker://mirror/busybox",
        ),
        ("docker://busybox:1", pb.BuildConfig(image_prefix="x/"), {}, "__img=docker://busybox:1"),
        ("/cvmfs/img.sif", pb.BuildConfig(image_prefix="x/"), {}, " /cvmfs/img.sif true"),
        (
            "ghcr.io/a/b:1",
            pb.BuildConfig(image_dir="/images"),
            {},
            "if [ -e /images/ghcr.io_a_b_1 ]; then __img=/images/ghcr.io_a_b_1; else __img=docker://ghcr.io/a/b:1; fi",
        ),
    ],
)
def test_image_resolution(image: str, bc: pb.BuildConfig, annotations: dict[str, str], expected: str) -> None:
    bc.runtime = RT.APPTAINER
    s = render_job(data([ctr(image=image)], annotations=annotations), bc).script
    if bc.image_dir:
        assert expected in s
    elif expected.startswith("__img="):
        assert f"exec apptainer exec {expected.removeprefix('__img=')} true" in s
    else:
        assert expected in s


def test_singularity_annotations_are_quoted_words() -> None:
    ann = {
        "slurm-job.vk.io/singularity-options": "--env 'A=1; rm -rf /'",
        "slurm-job.vk.io/singularity-mounts": "--bind '/a b:/c'",
        "slurm-job.vk.io/singularity-commands": "--debug",
    }
    s = render_job(data(annotations=ann), APPTAINER).script
    assert "apptainer --debug exec --env 'A=1; rm -rf /' --bind '/a b:/c' docker://busybox true" in s


def test_mpi_flags_true_is_ignored_and_init_not_prefixed() -> None:
    s = render_job(data(annotations={"slurm-job.vk.io/mpi-flags": "true"}), NONE).script
    assert "exec env --" in s
    s = render_job(data(init=[ctr("i")], annotations={"slurm-job.vk.io/mpi-flags": "srun -n 2"}), NONE).script
    assert s.count("exec srun -n 2 env --") == 1


def test_envfrom_resolved_from_interlink_data() -> None:
    entries = [
        {
            "name": "main",
            "configMaps": [{"metadata": {"name": "cm"}, "data": {"A": "1", "B": "2"}}],
            "secrets": [{"metadata": {"name": "s"}, "data": {"PW": base64.b64encode(b"hunter2").decode()}}],
        }
    ]
    c = ctr(
        envFrom=[
            {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
            {"secretRef": {"name": "s"}},
            {"configMapRef": {"name": "gone", "optional": True}},
        ],
        env=[{"name": "CM_A", "value": "override"}, {"name": "REF", "value": "$(PW)"}],
    )
    s = render_job(data([c], entries=entries), NONE).script
    assert "CM_A=1 CM_B=2 PW=hunter2 CM_A=override REF=hunter2" in s
    masked = render_job(data([c], entries=entries), NONE, mask_secrets=True).script
    assert "hunter2" not in masked
    assert "PW='***'" in masked


def test_value_from_field_ref_resolved_from_pod() -> None:
    c = ctr(
        env=[
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ]
    )
    assert "NAME=p NS=ns" in render_job(data([c]), NONE).script


def test_mask_secrets_hides_secret_files_and_projected() -> None:
    entries = [
        {
            "name": "main",
            "secrets": [{"metadata": {"name": "s"}, "data": {"pw": base64.b64encode(b"hunter2").decode()}}],
            "projectedvolumemaps": [{"metadata": {"name": "tok"}, "data": {"token": "eyJsecret"}}],
            "configMaps": [{"metadata": {"name": "cm"}, "data": {"c": "visible"}}],
        }
    ]
    vols = [
        {"name": "s", "secret": {"secretName": "s"}},
        {"name": "tok", "projected": {"sources": []}},
        {"name": "cm", "configMap": {"name": "cm"}},
    ]
    mounts = [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in vols]
    d = data([ctr(volumeMounts=mounts)], volumes=vols, entries=entries)
    assert "hunter2" in render_job(d, NONE).script
    masked = render_job(d, NONE, mask_secrets=True).script
    assert "hunter2" not in masked
    assert "eyJsecret" not in masked
    assert "visible" in masked


def test_unmounted_volumes_are_not_materialised() -> None:
    entries = [
        {
            "name": "main",
            "secrets": [{"metadata": {"name": "s"}, "data": {"pw": base64.b64encode(b"hunter2").decode()}}],
        }
    ]
    d = data(volumes=[{"name": "s", "secret": {"secretName": "s"}}], entries=entries)
    assert "hunter2" not in render_job(d, NONE).script


def test_projected_without_data_is_best_effort() -> None:
    """The auto-injected kube-api-access volume without interLink data: token and CA left out, rest resolved."""
    vol = {
        "name": "kube-api-access-x",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        },
    }
    d = data([ctr(volumeMounts=[{"name": "kube-api-access-x", "mountPath": "/sa"}])], volumes=[vol])
    s = render_job(d, NONE).script
    assert "__t volumes/kube-api-access-x/namespace ns" in s
    assert "token" not in s.split("# --- volumes ---")[1].split("umask 022")[0]


def test_accepts_list_body_and_bare_pod() -> None:
    d = data()
    assert render_job([d], NONE).script == render_job(d, NONE).script
    assert render_job(d["pod"], NONE).containers == ["main"]


def test_default_runtime_is_apptainer() -> None:
    assert "(runtime apptainer)" in render_job(data()).script


# --- CLI -----------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(render)
    return app


def test_cli_render_masks_secrets(tmp_path: Path) -> None:
    entries = [
        {
            "name": "main",
            "secrets": [{"metadata": {"name": "s"}, "data": {"pw": base64.b64encode(b"hunter2").decode()}}],
        }
    ]
    d = data(
        [ctr(volumeMounts=[{"name": "s", "mountPath": "/s"}])],
        volumes=[{"name": "s", "secret": {"secretName": "s"}}],
        entries=entries,
    )
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(d))
    bc_file = tmp_path / "bc.yaml"
    bc_file.write_text("runtime: CONTAINER_RUNTIME_PODMAN\nruntimeFlags: ['--network=host']\n")
    result = CliRunner().invoke(_app(), [str(pod_file), "--build-config", str(bc_file)])
    assert result.exit_code == 0, result.output
    assert "podman run --rm --network=host" in result.output
    assert "hunter2" not in result.output
    assert "masked secret" in result.output
    result = CliRunner().invoke(_app(), [str(pod_file), "--build-config", str(bc_file), "--runtime", "none"])
    assert "exec env --" in result.output


def test_cli_reports_rejection(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(data(hostNetwork=True)["pod"]))
    result = CliRunner().invoke(_app(), [str(pod_file)])
    assert result.exit_code == 2
    assert "spec.hostNetwork" in result.output


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
    ("limits", "flags"),
    [
        ({"cpu": "1500m", "memory": "64Mi"}, "--memory 67108864 --cpus 1.5"),
        ({"cpu": "250m"}, "--cpus 0.25"),
        ({"cpu": "2"}, "--cpus 2"),
        ({"cpu": "1m"}, "--cpus 0.001"),
        ({"memory": "1G"}, "--memory 1000000000"),
    ],
)
def test_podman_gets_each_containers_limits(limits: dict[str, str], flags: str) -> None:
    s = render_job(data([ctr(resources={"limits": limits})]), pb.BuildConfig(runtime=RT.PODMAN)).script
    assert f'"interlink-nats.job-dir=$__job_dir" {flags} --entrypoint' in s


def test_podman_without_resources_gets_no_limits() -> None:
    s = render_job(data([ctr()]), pb.BuildConfig(runtime=RT.PODMAN)).script
    assert "--memory" not in s and "--cpus" not in s


@pytest.mark.parametrize(
    ("pod_data", "field", "says"),
    [
        (lambda: data([ctr(comand=["true"])]), "spec.containers[0].comand", "unknown field"),
        (lambda: data([ctr(lifecycle={"preStop": {}})]), "spec.containers[0].lifecycle", "not supported off-cluster"),
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
        (lambda: data(volumes=[{"name": "v", "nfs": {}}]), "spec.volumes[0].nfs", "not supported off-cluster"),
    ],
)
def test_a_typo_is_an_unknown_field_and_a_real_field_is_not_supported(pod_data: Any, field: str, says: str) -> None:
    """``comand`` is a typo Kubernetes would refuse too; ``lifecycle`` is real but cannot be honoured on a site."""
    err = rejected(pod_data())
    assert err.field == field
    assert says in err.message
    assert ("unknown" in err.message) != ("not supported" in err.message)
