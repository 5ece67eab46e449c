"""The text of a Slurm job array (``backends.slurm.array``): the one sbatch, and the task script run as a real bash
with hostile paths (quotes, ``$``, newlines, ``#SBATCH`` text): each task runs its own member, nothing of a member
reaches sbatch's header."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.slurm import array as sa
from interlink_nats.submitters.backends.slurm import flags as sf
from interlink_nats.submitters.core.backend import JobSpec

HOSTILE = ["plain", "it's $(touch pwned)", "line\n#SBATCH --uid=0", '`id` ; \\ "q"']


def members(root: Path) -> list[JobSpec]:
    out = []
    for i, name in enumerate(HOSTILE):
        job_dir = root / name
        job_dir.mkdir(parents=True)
        script = job_dir / "job.sh"
        script.write_text(f'#!/bin/bash\nprintf "%s|%s\\n" {i} "$INTERLINK_JOB_DIR" > "$PWD/ran"\nexit {i}\n')
        out.append(JobSpec(f"uid-{i}", job_dir, script))
    return out


def test_each_task_runs_its_own_member_in_its_own_directory(tmp_path: Path) -> None:
    specs = members(tmp_path / "pods")
    text = sa.task_script(specs)
    sf.check_script_header(text.splitlines(keepends=True), what="array task script")  # sbatch reads no directive
    assert text.split("\n")[2] == "set -u"  # the header ends before any value
    wrapper = tmp_path / "array.sh"
    wrapper.write_text(text)
    for i, spec in enumerate(specs):
        env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": str(i)}
        done = subprocess.run(["bash", str(wrapper)], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == i, done.stderr
        assert (spec.job_dir / "ran").read_text() == f"{i}|{spec.job_dir}\n"
    assert not (tmp_path / "pwned").exists()
    for bad in ("4", "", "x", "-1"):
        done = subprocess.run(
            ["bash", str(wrapper)], env={"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": bad}, capture_output=True
        )
        assert done.returncode == 125, bad


def test_a_nul_in_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(sf.FlagError, match="NUL"):
        sa.task_script([JobSpec("u", tmp_path, Path("/a\x00b"))])


def test_one_sbatch_for_the_array_named_by_its_uid_each_task_sized_alone() -> None:
    small = pb.ResourceRequest(cpu_millis=500, memory_bytes=64 * 2**20, wall_time=dt.timedelta(minutes=5))
    big = pb.ResourceRequest(cpu_millis=2000, memory_bytes=32 * 2**20)
    argv = sa.array_sbatch_argv(
        "sbatch",
        array_uid="arr-1",
        array_dir="/s/arrays/arr-1",
        script="/s/arrays/arr-1/job.sh",
        count=20,
        throttle=sa.throttle_for(0, 5),
        pool_flags=sf.site_flags(["--partition=debug"], source="pool"),
        pod_flags=[],
        resources=[small, big, None],
        site=["--account=physics"],
    )
    assert argv == [
        "sbatch",
        "--partition=debug",
        "--cpus-per-task=2",
        "--mem=64M",
        "--time=0-00:05:00",
        "--array=0-19%5",
        "--account=physics",
        "--job-name=arr-1",
        "--chdir=/s/arrays/arr-1",
        "--output=/s/arrays/arr-1/tasks/%a/job.out",
        "--parsable",
        "/s/arrays/arr-1/job.sh",
    ]
    assert sa.throttle_for(3, 5) == 3 and sa.throttle_for(0, 0) == 0
    assert sa.per_task_resources([None, None]) is None
