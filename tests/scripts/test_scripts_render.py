"""Unit tests of the pure renderer's semantics: expansion, runtimes, images, env and volumes, masking, CLI."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import typer
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import expand, render_job
from interlink_nats.services.scripts.cli import render
from render_cases import APPTAINER, NONE, RT, ctr, data, rejected
from typer.testing import CliRunner


def test_runtime_none_ignores_the_image_but_rejects_one_that_is_not_a_string() -> None:
    """The image is echoed in the pod's status: a number there was a 500 in the gateway (found by the fuzz test)."""
    assert list(render_job(data([ctr(image="anything")]), NONE).containers) == ["main"]
    assert rejected(data([ctr(image=7)]), NONE).field == "spec.containers[0].image"


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
    assert "\n  exec true\n" in s  # no prefix: the script's own export, then exec
    s = render_job(data(init=[ctr("i")], annotations={"slurm-job.vk.io/mpi-flags": "srun -n 2"}), NONE).script
    assert s.count("exec srun -n 2 env --") == 1


@pytest.mark.parametrize(
    ("name", "through_env"),
    [
        ("PLAIN_NAME", False),
        ("dotted.name", True),
        ("with-dash", True),
        ("SHLVL", True),
        ("BASH_ENV", True),
        ("UID", True),
        ("_", True),
        ("COMP_LINE", True),
        ("BASHFUL", True),
        ("HOME", False),
        ("LC_ALL", True),
        ("LANG", True),
    ],
)
def test_runtime_none_exports_plain_names_and_passes_bash_s_own_through_env(name: str, through_env: bool) -> None:
    """`export` then `exec` saves an exec per container, but bash keeps some names for itself (readonly, dynamic,
    SHLVL decremented by exec) and refuses others: those go through env(1), which passes any name as it is."""
    s = render_job(data([ctr(env=[{"name": name, "value": "v"}])]), NONE).script
    assert ("exec env -- " in s) is through_env
    assert (f"export {name}=v " in s) is not through_env


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
    assert "\n  exec true\n" in result.output and "podman" not in result.output


def test_cli_reports_rejection(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(data(hostNetwork=True)["pod"]))
    result = CliRunner().invoke(_app(), [str(pod_file)])
    assert result.exit_code == 2
    assert "spec.hostNetwork" in result.output


def test_only_a_whole_identifier_is_exported_by_bash() -> None:
    """``match()`` with ``$`` once took ``"A\\n"`` for an identifier (the door refuses such a name now too)."""
    from interlink_nats.services.scripts.runtimes import bash_can_export

    assert bash_can_export("MY_VAR") and not bash_can_export("A\n") and not bash_can_export("my.var")
