"""Pod groups in the renderer: which pods are members (labels and annotations, 422s naming them), and a member's
script passing the gang's INTERLINK_GROUP_* variables into every container, run for real by bash."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import PodRejected, render_job, render_pod
from interlink_nats.services.scripts.pod_group import (
    COMPLETION_INDEX,
    FAILURE_POLICY_ANNOTATION,
    GROUP_NAME_LABEL,
    GROUP_TOTAL_ANNOTATION,
)
from script_runs import BASH, DUMP, NONE, dump, exit_code, log, pod, py
from script_runs import job_dir as job_dir

RT = pb.ContainerRuntime
GROUP = {layout.GROUP_NAME_ENV: "train", layout.GROUP_SIZE_ENV: "2", layout.GROUP_RANK_ENV: "1"}
GROUP |= {layout.GROUP_HOSTS_ENV: "node-a,node b", layout.GROUP_LEADER_ENV: "node-a"}


def member(data: dict[str, Any], *, labels: dict[str, Any] | None = None, **annotations: Any) -> dict[str, Any]:
    meta = data["pod"]["metadata"]
    meta["labels"] = {**meta.get("labels", {}), GROUP_NAME_LABEL: "train", **(labels or {})}
    meta["annotations"] = {GROUP_TOTAL_ANNOTATION: "2", **annotations}
    return data


def test_a_pod_in_no_group_is_no_member_and_a_member_reads_its_group() -> None:
    assert render_pod(pod([py("main", "")]), NONE).group is None
    group = render_pod(member(pod([py("main", "")])), NONE).group
    assert group is not None
    assert (group.name, group.total, group.index) == ("train", 2, None)
    assert group.failure_policy == pb.GangFailurePolicy.FAIL_GANG


@pytest.mark.parametrize(
    ("labels", "annotations", "index"),
    [
        ({COMPLETION_INDEX: "3"}, {}, 3),
        ({}, {COMPLETION_INDEX: "0"}, 0),
        ({COMPLETION_INDEX: "2"}, {COMPLETION_INDEX: "7"}, 2),  # the label first
    ],
)
def test_the_completion_index_is_read_from_the_label_then_the_annotation(
    labels: dict[str, str], annotations: dict[str, str], index: int
) -> None:
    group = render_pod(member(pod([py("main", "")]), labels=labels, **annotations), NONE).group
    assert group is not None and group.index == index


def test_the_failure_policy_annotation() -> None:
    group = render_pod(member(pod([py("main", "")]), **{FAILURE_POLICY_ANNOTATION: "Continue"}), NONE).group
    assert group is not None and group.failure_policy == pb.GangFailurePolicy.CONTINUE


@pytest.mark.parametrize(
    ("labels", "annotations", "field", "words"),
    [
        ({}, {GROUP_TOTAL_ANNOTATION: "0"}, GROUP_TOTAL_ANNOTATION, "at least 1"),
        ({}, {GROUP_TOTAL_ANNOTATION: "two"}, GROUP_TOTAL_ANNOTATION, "'two'"),
        ({}, {GROUP_TOTAL_ANNOTATION: "-1"}, GROUP_TOTAL_ANNOTATION, "integer"),
        ({}, {GROUP_TOTAL_ANNOTATION: "99999"}, GROUP_TOTAL_ANNOTATION, "at most"),
        ({}, {GROUP_TOTAL_ANNOTATION: 4}, GROUP_TOTAL_ANNOTATION, "string"),
        ({}, {FAILURE_POLICY_ANNOTATION: "failgang"}, FAILURE_POLICY_ANNOTATION, "FailGang or Continue"),
        ({COMPLETION_INDEX: "x"}, {}, COMPLETION_INDEX, "integer"),
        ({GROUP_NAME_LABEL: ""}, {}, GROUP_NAME_LABEL, "empty"),
    ],
)
def test_a_malformed_group_is_rejected_naming_the_label_or_annotation(
    labels: dict[str, Any], annotations: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(PodRejected) as rejected:
        render_pod(member(pod([py("main", "")]), labels=labels, **annotations), NONE)
    assert field in rejected.value.field and words in rejected.value.message


def test_a_name_without_a_count_and_a_count_without_a_name_are_rejected_naming_the_missing_one() -> None:
    no_count = pod([py("main", "")])
    no_count["pod"]["metadata"]["labels"][GROUP_NAME_LABEL] = "train"
    with pytest.raises(PodRejected) as rejected:
        render_pod(no_count, NONE)
    assert GROUP_TOTAL_ANNOTATION in rejected.value.field
    no_name = pod([py("main", "")])
    no_name["pod"]["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: "2"}
    with pytest.raises(PodRejected) as rejected:
        render_pod(no_name, NONE)
    assert GROUP_NAME_LABEL in rejected.value.field


@pytest.mark.parametrize("runtime", [RT.NONE, RT.APPTAINER, RT.SINGULARITY, RT.PODMAN])
def test_every_runtime_passes_the_group_variables_and_the_pods_own_entry_wins(runtime: pb.ContainerRuntime) -> None:
    own = {"name": layout.GROUP_RANK_ENV, "value": "mine"}
    data = member(pod([py("main", "", env=[own]), py("side", "")], init=[py("setup", "")]))
    script = render_job(data, pb.BuildConfig(runtime=runtime)).script
    alone = render_job(pod([py("main", "", env=[own]), py("side", "")], init=[py("setup", "")]), NONE).script
    assert "INTERLINK_GROUP" not in alone.replace(layout.GROUP_RANK_ENV + "=mine", "")
    for name in layout.GROUP_ENV:
        if runtime == RT.PODMAN:
            expected = f"--env {name} "
        else:
            prefix = {RT.APPTAINER: "APPTAINERENV_", RT.SINGULARITY: "SINGULARITYENV_"}.get(runtime, "")
            expected = f'${{{name}+"{prefix}{name}=${name}"}}'
        # every container (init and main) but where the pod sets the name itself
        assert script.count(expected) == (2 if name == layout.GROUP_RANK_ENV else 3), (name, script)


def _run(job_dir: Path, script: str, extra: dict[str, str]) -> int:
    (job_dir / layout.SCRIPT_NAME).write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLINK_GROUP_")}
    env |= {layout.JOB_DIR_ENV: str(job_dir), **extra}
    proc = subprocess.run([BASH, layout.SCRIPT_NAME], cwd=job_dir, env=env, timeout=60, capture_output=True, text=True)
    return proc.returncode


def test_a_member_run_by_bash_gives_its_containers_the_group_variables(job_dir: Path) -> None:
    own = {"name": layout.GROUP_LEADER_ENV, "value": "mine"}
    data = member(pod([py("main", DUMP, env=[own])], init=[py("setup", DUMP)]))
    assert _run(job_dir, render_job(data, NONE).script, GROUP) == 0
    init, main = dump(job_dir, "setup")["env"], dump(job_dir, "main")["env"]
    assert {k: init[k] for k in layout.GROUP_ENV} == GROUP
    assert {k: main[k] for k in layout.GROUP_ENV} == GROUP | {layout.GROUP_LEADER_ENV: "mine"}


def test_a_member_run_without_the_variables_still_runs_and_sets_none(job_dir: Path) -> None:
    data = member(pod([py("main", DUMP)]))
    assert _run(job_dir, render_job(data, NONE).script, {}) == 0
    assert exit_code(job_dir, "main") == 0
    assert not [k for k in dump(job_dir, "main")["env"] if k.startswith("INTERLINK_GROUP_")]


def test_apptainer_gets_the_group_variables_through_its_env_prefix(job_dir: Path, tmp_path: Path) -> None:
    """A stand-in ``apptainer`` that prints its environment: what the real one would turn into the container's."""
    fake = tmp_path / "apptainer"
    fake.write_text("#!/bin/sh\nenv\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    data = member(pod([{"name": "main", "image": "busybox", "command": ["true"]}]))
    script = render_job(data, pb.BuildConfig(runtime=RT.APPTAINER, executable=str(fake))).script
    assert _run(job_dir, script, {layout.GROUP_RANK_ENV: "1"}) == 0
    seen = dict(line.split("=", 1) for line in log(job_dir, "main").splitlines() if "=" in line)
    assert seen["APPTAINERENV_" + layout.GROUP_RANK_ENV] == "1"
    assert "APPTAINERENV_" + layout.GROUP_HOSTS_ENV not in seen  # unset in the script: not passed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["1", "0", "4", "FailGang"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)
group_keys = st.sampled_from([GROUP_NAME_LABEL, GROUP_TOTAL_ANNOTATION, FAILURE_POLICY_ANNOTATION, COMPLETION_INDEX])


@given(
    labels=st.dictionaries(group_keys, json_values, max_size=4), annotations=st.dictionaries(group_keys, json_values)
)
@settings(max_examples=300, deadline=None)
def test_any_group_labels_and_annotations_render_or_are_rejected_naming_a_field(
    labels: dict[str, Any], annotations: dict[str, Any]
) -> None:
    data = pod([py("main", "")])
    data["pod"]["metadata"]["labels"] = labels
    data["pod"]["metadata"]["annotations"] = annotations
    field = ""
    try:
        render_pod(data, NONE)
    except PodRejected as rejected:
        field = rejected.field or "?"
    assert field in ("",) or field.startswith("metadata."), field
