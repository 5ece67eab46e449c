"""No pod string becomes code in what the backends generate from a rendered pod: the gang launchers (shell and
Slurm, run by bash), sbatch's argv and the directives it would read from a job script, HTCondor's submit
description (parsed back by the real ``htcondor2`` bindings), and the container engines' command lines (the job
script run by bash with stand-in ``apptainer``/``podman`` executables that record what they were given).

Per string: refused (a 4xx at the door, PodRejected, or the backend's refusal naming the value), or it arrives
exactly and the canary never fires. The pod-level strings that reach these artifacts are the pod group's name
(label), the pod's name and namespace, and its backend flags (annotation); the container-level ones reach the
engines' command lines.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hostile_strings import CANARY_DIR, CORPUS, MARKER, canary_fired
from htcondor_bindings import htcondor2_fixture  # noqa: F401 (the fixture)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_pod
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.shell.gang_script import MemberRun, render_gang_launcher
from interlink_nats.submitters.backends.slurm import parse as sp
from interlink_nats.submitters.backends.slurm.flags import FlagError, FlagPolicy
from interlink_nats.submitters.backends.slurm.gang import launcher_script
from interlink_nats.submitters.core.backend import BackendError, JobSpec
from pod_placements import Placement, Site
from pod_string_runs import merge, render_alone, run_pods, sbatch_directives
from slurm_fakes import FAKE_SCANCEL, FAKE_SCONTROL, FAKE_SRUN
from test_pod_strings import PLACEMENTS

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
FLAGS = "slurm-job.vk.io/flags"
REFUSED = (PodRejected, BackendError, ValueError)


@pytest.fixture(autouse=True)
def canary_dir() -> None:
    """An empty canary directory for each test (a test that fails may leave it fired)."""
    shutil.rmtree(CANARY_DIR, ignore_errors=True)
    CANARY_DIR.mkdir()


def group_pod(name: str) -> dict[str, Any]:
    """A pod-group member whose group name is ``name``, as the gateway parses it."""
    labels = {GROUP_LABEL: name}
    annotations = {"kueue.x-k8s.io/pod-group-total-count": "1"}
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]},
        }
    }


def group_names() -> list[str]:
    """The corpus strings a pod group may be named by: the pod's own label (what the renderer accepts) and, as
    any NATS client may send a SubmitGroup, every string of the corpus."""
    for s in CORPUS:
        _, refused = render_or_refusal(group_pod(s))
        assert refused is None or refused.field == f'metadata.labels["{GROUP_LABEL}"]', refused
    return list(CORPUS)


def render_or_refusal(data: dict[str, Any]) -> tuple[pb.JobScript | None, PodRejected | None]:
    try:
        return render_pod(data).job, None
    except PodRejected as e:
        return None, e


MEMBER = 'printf "%s" "$INTERLINK_GROUP_NAME" > "$INTERLINK_JOB_DIR/name.out"\n'


def _members(tmp: Path, n: int) -> list[Path]:
    dirs = []
    for k in range(n):
        d = tmp / f"m{k}"
        d.mkdir(parents=True)
        (d / "job.sh").write_text(MEMBER)
        dirs.append(d)
    return dirs


def _assert_name_arrived(d: Path, name: str, output: str) -> None:
    assert not canary_fired(), f"the group name ran as code: {name!r}"
    assert MARKER not in output
    assert (d / "name.out").read_bytes().decode("utf-8", "surrogateescape") == name, name


def test_the_shell_gang_launcher_runs_no_group_name(tmp_path: Path) -> None:
    for k, name in enumerate(group_names()):
        (d,) = _members(tmp_path / f"g{k}", 1)
        try:
            text = render_gang_launcher(
                [MemberRun(str(d))], group_name=name, host="h", policy=pb.GangFailurePolicy.FAIL_GANG
            )
        except REFUSED:
            continue
        (d.parent / "launcher.sh").write_text(text)
        proc = subprocess.run(["bash", "launcher.sh"], cwd=d.parent, capture_output=True, text=True, timeout=60)
        _assert_name_arrived(d, name, proc.stdout + proc.stderr)


def test_the_slurm_gang_launcher_runs_no_group_name(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    for tool, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("scancel", FAKE_SCANCEL)):
        (fake / tool).write_text(text)
        (fake / tool).chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        **{"FAKE": str(fake), "FAKE_NODES": "n1", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"},
        **{"SLURM_TASKS_PER_NODE": "1", "SLURM_CPUS_PER_TASK": "1"},
    }
    for k, name in enumerate(group_names()):
        (d,) = _members(tmp_path / f"g{k}", 1)
        spec = JobSpec(uid=f"u{k}", job_dir=d, script=d / "job.sh")
        try:
            text = launcher_script(
                group_name=name,
                members=[spec],
                failure_policy=pb.GangFailurePolicy.FAIL_GANG,
                srun=str(fake / "srun"),
                scontrol=str(fake / "scontrol"),
                scancel=str(fake / "scancel"),
            )
        except REFUSED:
            continue
        (d.parent / "launcher.sh").write_text(text)
        proc = subprocess.run(
            ["bash", "launcher.sh"], cwd=d.parent, env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        _assert_name_arrived(d, name, proc.stdout + proc.stderr)
        assert not sbatch_directives(text)


# --- sbatch ----------------------------------------------------------------------------------------------------


def flags_pod(value: str) -> dict[str, Any]:
    data = group_pod("g")
    data["pod"]["metadata"]["labels"] = {}
    data["pod"]["metadata"]["annotations"] = {FLAGS: value}
    return data


def test_pod_flags_reach_sbatch_as_the_words_they_are_and_no_script_line_is_a_directive() -> None:
    for raw, comment in (*((s, None) for s in CORPUS), *((f"--comment={shlex.quote(s)}", s) for s in CORPUS)):
        job, refused = render_or_refusal(flags_pod(raw))
        if job is None:
            assert refused is not None and refused.field == f'metadata.annotations["{FLAGS}"]', refused
            continue
        assert not sbatch_directives(job.script)
        words = list(job.backend_flags)
        assert words == shlex.split(raw)
        try:  # as the Slurm backend reads them: sbatch's grammar, then the default allowlist
            flags = FlagPolicy().check(words, account_by_policy=False)
        except FlagError:
            continue
        argv = sp.sbatch_argv(
            "sbatch",
            uid="u-1",
            job_dir="/s/jobs/u-1",
            script="/s/jobs/u-1/job.sh",
            pool_flags=[],
            pod_flags=flags,
            sized=[],
        )
        assert argv[1 : 1 + len(flags)] == [f.argv() for f in flags]  # each flag one argument: sbatch runs no shell
        if comment is not None:
            assert [(f.name, f.value) for f in flags] == [("comment", comment)]  # the value arrives as written
        assert argv[1 + len(flags) :] == [
            "--job-name=u-1",
            "--chdir=/s/jobs/u-1",
            "--output=/s/jobs/u-1/job.out",
            "--parsable",
            "/s/jobs/u-1/job.sh",
        ]


# --- HTCondor --------------------------------------------------------------------------------------------------


def _submit(htcondor2: ModuleType, spec: JobSpec) -> dict[str, str] | None:
    """The description's commands as condor_submit reads them (parsed and macro-expanded by the real bindings),
    or None when the backend refuses it."""
    try:
        text = hs.submit_description(spec, hs.SubmitSite(pool="grid"))
    except hs.SubmitCommandError:
        return None
    sub = htcondor2.Submit(text)
    assert len(list(sub.keys())) == text.count("\n") - 2, "a line was joined to another or lost"  # not # and queue
    return {k: _expand(sub, k) for k in sub}


def _expand(sub: Any, key: str) -> str:
    try:
        return str(sub.expand(key))
    except KeyError:  # a command with an empty value: listed, but nothing to expand
        return ""


def test_pod_names_and_flags_reach_the_htcondor_submit_description_literally(htcondor2: ModuleType) -> None:
    base = {"uid": "u-1", "job_dir": Path("/s/jobs/u-1"), "script": Path("/s/jobs/u-1/job.sh")}
    for s in CORPUS:
        for spec, attr, expected in (
            (JobSpec(**base, namespace=s, name="p"), "MY.JobBatchName", f"{s}/p"),
            (JobSpec(**base, namespace="ns", name=s), "MY.JobBatchName", f"ns/{s}" if s else "u-1"),
            (JobSpec(**base, backend_flags=(f"requirements={s}",)), "requirements", s.strip()),
        ):
            cmds = _submit(htcondor2, spec)
            if cmds is None:
                continue
            assert not canary_fired()
            value = cmds.get(attr, "")  # an empty value is no command
            assert value == (hp.quote(expected) if attr.startswith("MY.") else expected), (s, attr)


# --- container engines -----------------------------------------------------------------------------------------

FAKE_ENGINE = "#!/bin/bash\nprintf '%s\\0' \"$@\"\nprintf '\\1\\0'\nexec env -0\n"
"""Records its argv, then its environment, NUL-separated (a \\1 between them)."""
ENGINE_PLACEMENTS = [
    p
    for p in PLACEMENTS
    if p.containers == "containers" and not p.slot and p.name.startswith(("env", "container.", "mount.mountPath"))
]


@pytest.mark.parametrize(
    "runtime", [pb.ContainerRuntime.APPTAINER, pb.ContainerRuntime.PODMAN], ids=["apptainer", "podman"]
)
@pytest.mark.parametrize("placement", ENGINE_PLACEMENTS, ids=lambda p: p.label)
def test_no_pod_string_becomes_code_on_a_container_engines_command_line(
    placement: Placement, runtime: pb.ContainerRuntime, tmp_path: Path
) -> None:
    engine = tmp_path / "engine"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    bc = pb.BuildConfig(runtime=runtime, executable=str(engine))
    site = Site(tmp=str(tmp_path))
    outcomes = render_alone(placement, (*CORPUS, placement.benign or ""), site, bc)
    accepted = [o.part for o in outcomes if o.rejected is None]
    (ran,) = run_pods([(merge(accepted, site)[0], tmp_path / "job")], bc=bc)
    assert not canary_fired(), "pod text ran as code"
    assert MARKER.encode() not in ran.output
    for part in accepted:
        (name,) = [c["name"] for c in [part.container]]
        words = ran.job_dir.joinpath("containers", f"{name}.log").read_bytes().decode("utf-8", "surrogateescape")
        argv, env = words.split("\x01\x00")
        seen = {"argv": argv.split("\0")[:-1], "env": dict(w.split("=", 1) for w in env.split("\0")[:-1])}
        for check in part.checks:
            _engine_check(runtime, seen, check.kind, check.key, check.expected)


def _engine_check(runtime: pb.ContainerRuntime, seen: dict[str, Any], kind: str, key: str, expected: Any) -> None:
    argv: list[str] = seen["argv"]
    if kind == "env" and runtime == pb.ContainerRuntime.PODMAN:
        assert f"{key}={expected}" in [argv[k + 1] for k, a in enumerate(argv[:-1]) if a == "--env"], key
    elif kind == "env":
        assert seen["env"].get("APPTAINERENV_" + key) == expected, key
    elif kind == "argv":
        words = argv
        if runtime == pb.ContainerRuntime.PODMAN:
            words = json.loads(argv[argv.index("--entrypoint") + 1]) + argv[argv.index("--entrypoint") + 3 :]
        assert words[-len(expected) :] == expected
