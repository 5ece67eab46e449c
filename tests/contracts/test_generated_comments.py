"""No pod string in a comment or header of any generated file.

A comment ends at a newline, so a pod string written into one becomes code once it holds a newline; and
sbatch reads ``#SBATCH`` lines from a script's leading comments. Every generator is fed pod strings that carry
a marker (as Kubernetes allows them, so each generator accepts them), and no comment line of what it writes
may hold the marker: the job script for every runtime (podman's arguments among them), the shell and Slurm
gang launchers, the HTCondor submit description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.shell.gang_script import MemberRun, render_gang_launcher
from interlink_nats.submitters.backends.slurm.gang import launcher_script
from interlink_nats.submitters.core.backend import JobSpec
from jobs import pod_dict

MARK = "zzpod"


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def assert_no_pod_string_in_comments(text: str) -> None:
    assert MARK in text, "the generator was given the pod's strings"
    marked = [line for line in comments(text) if MARK in line]
    assert marked == [], marked


def marked_pod() -> dict[str, Any]:
    pod = pod_dict(
        f"{MARK}-uid",
        {f"{MARK}-c": f"echo {MARK}-command"},
        init={f"{MARK}-i": "true"},
        name=f"{MARK}-pod.a",
        namespace=f"{MARK}-ns",
        annotations={f"example.com/{MARK}": f"{MARK}-annotation"},
    )
    pod["metadata"]["labels"] = {f"{MARK}-label": f"{MARK}-value"}
    for c in pod["spec"]["containers"]:
        c["image"] = f"docker.io/library/{MARK}:1"
        c["args"] = [f"{MARK}-arg"]
        c["env"] = [{"name": f"{MARK.upper()}_ENV", "value": f"{MARK}-env"}]
        c["workingDir"] = f"/{MARK}-wd"
    return pod


@pytest.mark.parametrize(
    "runtime",
    [
        pb.ContainerRuntime.NONE,
        pb.ContainerRuntime.PODMAN,
        pb.ContainerRuntime.APPTAINER,
        pb.ContainerRuntime.SINGULARITY,
    ],
)
def test_the_job_script_keeps_pod_strings_out_of_its_comments(runtime: pb.ContainerRuntime) -> None:
    job = render_job(marked_pod(), pb.BuildConfig(runtime=runtime))
    assert_no_pod_string_in_comments(job.script)
    header = job.script.split("\nset -u\n", 1)[0]
    assert MARK not in header, "sbatch reads #SBATCH lines from the leading comments"


def spec(tmp_path: Path, rank: int) -> JobSpec:
    job_dir = tmp_path / "jobs" / f"{MARK}-uid-{rank}"
    return JobSpec(
        uid=f"{MARK}-uid-{rank}",
        job_dir=job_dir,
        script=job_dir / "job.sh",
        namespace=f"{MARK}-ns",
        name=f"{MARK}-pod-{rank}",
        backend_flags=(f"--comment={MARK}",),
    )


def test_the_gang_launchers_keep_the_group_name_out_of_their_comments(tmp_path: Path) -> None:
    members = [spec(tmp_path, r) for r in range(2)]
    shell = render_gang_launcher(
        [MemberRun(str(m.job_dir)) for m in members],
        group_name=f"{MARK}-group",
        host=f"{MARK}-host",
        policy=pb.GangFailurePolicy.FAIL_GANG,
    )
    slurm = launcher_script(group_name=f"{MARK}-group", members=members, failure_policy=pb.GangFailurePolicy.CONTINUE)
    for text in (shell, slurm):
        assert_no_pod_string_in_comments(text)


def test_the_htcondor_submit_description_keeps_pod_strings_out_of_its_comments(tmp_path: Path) -> None:
    job = spec(tmp_path, 0)
    text = hs.submit_description(
        JobSpec(
            uid=job.uid,
            job_dir=job.job_dir,
            script=job.script,
            namespace=job.namespace,
            name=job.name,
            backend_flags=(f'requirements=(Machine == "{MARK}")',),
        ),
        hs.SubmitSite(pool="grid"),
    )
    assert_no_pod_string_in_comments(text)
