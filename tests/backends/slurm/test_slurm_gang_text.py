"""A pod group's sbatch and launcher as pure text (``backends.slurm.gang``), and the launcher's logic run by bash
with fake ``srun``/``scontrol``/``scancel`` (no Slurm: the real one is in test_slurm_gangs.py)."""

from __future__ import annotations

import datetime as dt
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.backends.slurm.flags import FlagError, FlagPolicy, parse
from interlink_nats.submitters.backends.slurm.gang import agreed_flags, gang_resource_flags, launcher_script
from interlink_nats.submitters.backends.slurm.parse import sbatch_argv
from interlink_nats.submitters.core.backend import GangSpec, JobSpec, SubmitRejected
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from slurm_fakes import FAKE_SCANCEL, FAKE_SCONTROL, FAKE_SRUN

Policy = pb.GangFailurePolicy
HOSTILE = 'it\'s "$(touch pwned)" `touch pwned2` $HOME\nsecond line; exit 9'


def member(tmp: Path, i: int, body: str = "exit 0", flags: tuple[str, ...] = (), **kw: object) -> JobSpec:
    d = tmp / "jobs" / f"m{i}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.sh").write_text(f"#!/bin/bash\n{body}\n")
    return JobSpec(uid=f"uid-{i}", job_dir=d, script=d / "job.sh", backend_flags=flags, name=f"pod-{i}", **kw)  # type: ignore[arg-type]


def test_the_allocation_is_sized_so_every_member_fits_one_task() -> None:
    resources = [
        pb.ResourceRequest(cpu_millis=500, memory_bytes=2**30),
        pb.ResourceRequest(cpu_millis=2000, memory_bytes=512 * 2**20, wall_time=dt.timedelta(minutes=30)),
        None,
        pb.ResourceRequest(gpus=1, wall_time=dt.timedelta(seconds=90)),
    ]
    argv = sbatch_argv(
        "sbatch",
        uid="g1",
        job_dir="/s/gangs/g1",
        script="/s/gangs/g1/job.sh",
        pool_flags=parse(["--partition=p"], source="pool"),
        pod_flags=parse(["--nice=5"], source="pod"),
        sized=gang_resource_flags(resources),
        site=["--account=a"],
    )
    assert argv == [
        "sbatch",
        "--partition=p",
        "--nice=5",
        "--ntasks=4",
        "--cpus-per-task=2",  # the largest member's CPUs
        "--mem-per-cpu=512M",  # 2 CPUs x 512M covers the largest memory (1 GiB)
        "--gpus-per-task=1",
        "--time=0-00:30:00",  # the longest wall time
        "--account=a",
        "--job-name=g1",
        "--chdir=/s/gangs/g1",
        "--output=/s/gangs/g1/job.out",
        "--parsable",
        "/s/gangs/g1/job.sh",
    ]
    bare = sbatch_argv(
        "sbatch",
        uid="g",
        job_dir="/d",
        script="/d/job.sh",
        pool_flags=[],
        pod_flags=[],
        sized=gang_resource_flags([None] * 3),
    )
    assert bare[1:2] == ["--ntasks=3"] and not any(a.startswith(("--mem", "--cpus")) for a in bare)
    per_node = sbatch_argv(
        "sbatch",
        uid="g",
        job_dir="/d",
        script="/d/j",
        pool_flags=parse(["--mem=8G"], source="pool"),
        pod_flags=[],
        sized=gang_resource_flags(resources),
    )
    assert "--mem=8G" in per_node and not [a for a in per_node if a.startswith("--mem-per-cpu")]  # sbatch: exclusive
    with pytest.raises(FlagError, match="--output"):
        FlagPolicy().check(["--output=/x"], account_by_policy=False)


def test_members_whose_flags_differ_are_refused_naming_both(tmp_path: Path) -> None:
    same = (member(tmp_path, 0, flags=("--nice=5",)), member(tmp_path, 1, flags=("--nice=5",)))
    assert agreed_flags(same) == ("--nice=5",)
    odd = (*same, member(tmp_path, 2, flags=("--nice=7",)))
    with pytest.raises(FlagError) as err:
        agreed_flags(odd)
    assert "'pod-0' and 'pod-2'" in str(err.value) and "\n" not in str(err.value)


def gang_of(
    tmp: Path, *members: JobSpec, name: str = "grp", policy: pb.GangFailurePolicy = Policy.FAIL_GANG
) -> GangSpec:
    return GangSpec(uid="g-uid", name=name, job_dir=tmp / "gangs" / "g-uid", members=members, failure_policy=policy)


async def test_the_backend_refuses_a_gang_before_any_sbatch(tmp_path: Path) -> None:
    backend = SlurmBackend(SlurmConfig(sbatch=str(tmp_path / "no-sbatch")))
    flags = gang_of(tmp_path, member(tmp_path, 0), member(tmp_path, 1, flags=("--qos=x",)))
    with pytest.raises(SubmitRejected, match="'pod-0' and 'pod-1'"):
        await backend.submit_gang(flags)
    policy = AccountingPolicy.model_validate({"namespaces": {"a": {"group": "acct-a"}, "b": {"group": "acct-b"}}})
    backend = SlurmBackend(SlurmConfig(sbatch=str(tmp_path / "no-sbatch"), accounting=policy))
    accounts = gang_of(tmp_path, member(tmp_path, 0, namespace="a"), member(tmp_path, 1, namespace="b"))
    with pytest.raises(SubmitRejected, match="'pod-0' and 'pod-1' get different accounts"):
        await backend.submit_gang(accounts)
    assert backend.calls == 0


# --- the launcher, run by bash with fakes ---------------------------------------------------------------------


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    fake = tmp_path / "fake"
    fake.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("scancel", FAKE_SCANCEL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    return fake


def launch(
    fakes: Path,
    gang: GangSpec,
    *,
    nodes: str,
    tasks_per_node: str,
    extra: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    text = launcher_script(
        group_name=gang.name,
        members=gang.members,
        failure_policy=gang.failure_policy,
        srun=str(fakes / "srun"),
        scontrol=str(fakes / "scontrol"),
        scancel=str(fakes / "scancel"),
    )
    script = fakes / "launcher.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        "FAKE": str(fakes),
        "FAKE_NODES": nodes,
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_CPUS_PER_TASK": "2",
        "SLURM_MEM_PER_CPU": "100",
        **(extra or {}),
    }
    return subprocess.run(["bash", str(script)], env=env, cwd=fakes, capture_output=True, text=True, timeout=timeout)


def env_of(fakes: Path, uid: str) -> dict[str, str]:
    lines = (fakes / f"{uid}.env").read_text().splitlines()
    return dict(
        line.split("=", 1)
        for line in lines
        if line.startswith(
            (
                "INTERLINK_GROUP_RANK",
                "INTERLINK_GROUP_H",
                "INTERLINK_GROUP_L",
                "INTERLINK_GROUP_S",
                "INTERLINK_JOB_DIR",
                "NAME",
            )
        )
    )


def test_ranks_fill_the_nodes_in_order_and_hostile_values_stay_words(tmp_path: Path, fakes: Path) -> None:
    odd = tmp_path / "it's a $dir"
    members = tuple(member(odd, i) for i in range(5))
    done = launch(fakes, gang_of(tmp_path, *members, name=HOSTILE), nodes="n1 n2 n3", tasks_per_node="2(x2),1")
    assert done.returncode == 0, done.stderr
    hosts = ["n1", "n1", "n2", "n2", "n3"]
    for rank, m in enumerate(members):
        env = env_of(fakes, m.uid)
        assert env["INTERLINK_GROUP_RANK"] == str(rank)
        assert env["INTERLINK_GROUP_SIZE"] == "5"
        assert env["INTERLINK_GROUP_HOSTS"] == ",".join(hosts)
        assert env["INTERLINK_GROUP_LEADER"] == "n1"
        assert env["INTERLINK_JOB_DIR"] == str(m.job_dir)
        name = subprocess.run(["bash", "-c", f"printf %s {env['NAME']}"], capture_output=True, text=True).stdout
        assert name == HOSTILE
        argv = (fakes / f"{m.uid}.argv").read_text().splitlines()
        assert argv[:5] == ["--ntasks=1", "--nodes=1", f"--nodelist={hosts[rank]}", "--exact", "--cpus-per-task=2"]
        assert f"--output={m.job_dir}/job.out" in argv and argv[-2:] == ["bash", str(m.script)]
    assert not list(tmp_path.rglob("pwned*")) and not list(fakes.glob("pwned*"))
    assert not (fakes / "scancel.log").exists()


def test_memory_per_node_is_split_among_the_nodes_tasks(tmp_path: Path, fakes: Path) -> None:
    members = tuple(member(tmp_path, i) for i in range(3))
    extra = {"SLURM_MEM_PER_CPU": "", "SLURM_MEM_PER_NODE": "1000"}
    done = launch(fakes, gang_of(tmp_path, *members), nodes="n1 n2", tasks_per_node="2,1", extra=extra)
    assert done.returncode == 0, done.stderr
    mems = [[a for a in (fakes / f"{m.uid}.argv").read_text().splitlines() if a.startswith("--mem")] for m in members]
    assert mems == [["--mem=500M"], ["--mem=500M"], ["--mem=1000M"]]


def test_an_allocation_with_too_few_tasks_fails_the_launcher(tmp_path: Path, fakes: Path) -> None:
    members = tuple(member(tmp_path, i) for i in range(3))
    done = launch(fakes, gang_of(tmp_path, *members), nodes="n1", tasks_per_node="2")
    assert done.returncode == 125
    assert "no task for rank 2 of 3" in done.stderr


def q(path: Path) -> str:
    return shlex.quote(str(path))


@pytest.mark.parametrize("policy", [Policy.FAIL_GANG, Policy.UNSPECIFIED, Policy.CONTINUE])
def test_the_failure_policy(tmp_path: Path, fakes: Path, policy: pb.GangFailurePolicy) -> None:
    """Member 1 fails once both others run. Under FAIL_GANG the others would run forever: only the TERM the
    launcher has sent to the steps ends them (143); under CONTINUE they end 0 once member 1 has failed."""
    failed = tmp_path / "failed"
    until = failed if policy == Policy.CONTINUE else tmp_path / "never"
    ups = [tmp_path / f"up.{i}" for i in (0, 2)]

    def other(i: int, up: Path) -> JobSpec:
        rc = q(tmp_path / f"rc.{i}")
        body = f"trap 'echo 143 > {rc}; exit 143' TERM\ntouch {q(up)}\n"
        body += f"until [ -e {q(until)} ]; do sleep 0.05; done\necho 0 > {rc}"
        return member(tmp_path, i, body)

    ready = " && ".join(f"[ -e {q(p)} ]" for p in ups)
    failing = member(tmp_path, 1, f"until {ready}; do sleep 0.05; done; touch {q(failed)}; exit 3")
    gang = gang_of(tmp_path, other(0, ups[0]), failing, other(2, ups[1]), policy=policy)
    done = launch(fakes, gang, nodes="n1", tasks_per_node="3")
    assert done.returncode == 3, done.stderr
    codes = [(tmp_path / f"rc.{i}").read_text().strip() for i in (0, 2)]
    if policy == Policy.CONTINUE:
        assert codes == ["0", "0"]
        assert not (fakes / "scancel.log").exists()
    else:
        assert codes == ["143", "143"]
        assert (fakes / "scancel.log").read_text() == "--signal=TERM 77\n"  # the steps only, not the launcher


def test_term_to_the_launcher_ends_it_at_once(tmp_path: Path, fakes: Path) -> None:
    up = tmp_path / "up"
    members = (member(tmp_path, 0, f"touch {shlex.quote(str(up))}; exec sleep 300"),)
    script = fakes / "launcher.sh"
    script.write_text(
        launcher_script(
            group_name="g",
            members=members,
            failure_policy=Policy.FAIL_GANG,
            srun=str(fakes / "srun"),
            scontrol=str(fakes / "scontrol"),
            scancel=str(fakes / "scancel"),
        )
    )
    env = {
        **os.environ,
        "FAKE": str(fakes),
        "FAKE_NODES": "n1",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_TASKS_PER_NODE": "1",
    }
    proc = subprocess.Popen(["bash", str(script)], env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not up.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the member did not start"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
