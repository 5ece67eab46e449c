"""Pod groups' pure parts: the plans (``core.gangs``) and the shell launcher's text, run by real bash."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.shell.gang_script import MemberRun, render_gang_launcher
from interlink_nats.submitters.core.backend import BackendState, Observation
from interlink_nats.submitters.core.gangs import (
    GroupPlan,
    MemberRow,
    member_observation,
    plan_gang_recovery,
    plan_group,
    refusal,
    validate_group,
)
from interlink_nats.submitters.core.lifecycle import Phase

S, A, D = Phase.SUBMITTING, Phase.ACTIVE, Phase.DONE


def rows(*spec: tuple[Phase, str]) -> list[MemberRow]:
    return [MemberRow(f"u{i}", phase, job_id, "g") for i, (phase, job_id) in enumerate(spec)]


def test_plan_group_submits_new_gangs_answers_submitted_ones_and_finds_interrupted_ones() -> None:
    assert plan_group(rows((S, ""), (S, "")), [True, True]) is GroupPlan.SUBMIT
    assert plan_group(rows((A, "7"), (D, "7")), [False, False]) is GroupPlan.ANSWER
    assert plan_group(rows((A, "7"), (S, "")), [False, False]) is GroupPlan.RECORD
    assert plan_group(rows((S, ""), (S, "")), [False, True]) is GroupPlan.FIND_THEN_SUBMIT


def test_recovery_submits_only_a_complete_stored_gang_and_otherwise_waits() -> None:
    complete = rows((S, ""), (S, ""))
    assert plan_gang_recovery(complete, size=2, scripts_stored=True).may_submit
    assert not plan_gang_recovery(complete, size=3, scripts_stored=True).may_submit, "a member is missing"
    assert not plan_gang_recovery(complete, size=2, scripts_stored=False).may_submit
    known = plan_gang_recovery(rows((A, "7"), (S, "")), size=2, scripts_stored=True)
    assert (known.job_id, known.find, known.may_submit) == ("7", False, False)


def member(rank: int, size: int, group: str = "g-1") -> pb.JobScript:
    return pb.JobScript(
        pod=pb.PodRef(uid=f"u{rank}"),
        gang=pb.GangMember(group_uid=group, group_name="n", rank=rank, size=size),
    )


@pytest.mark.parametrize(
    ("members", "field"),
    [
        ([], "members"),
        ([member(0, 2)], "members[0].gang.size"),
        ([member(0, 2), member(0, 2)], "members[1].gang.rank"),
        ([member(0, 2), member(1, 2, "g-2")], "members[1].gang.group_uid"),
        ([member(0, 1, "bad/uid")], "members[0].gang.group_uid"),
        ([member(0, 1, "u0")], "members[0].pod.uid"),
    ],
)
def test_validate_group_names_the_field(members: list[pb.JobScript], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        validate_group(members)


def test_refusal_names_the_backend_and_why() -> None:
    assert refusal("htcondor").startswith("the htcondor backend does not run pod groups (SubmitGroup): no CE route")


def test_a_member_reads_its_own_exit_once_the_gang_ended() -> None:
    running = Observation(BackendState.RUNNING)
    assert member_observation(running, 0, False, "g") is running
    failed = Observation(BackendState.FAILED, 3, finished_at=5.0)
    assert member_observation(failed, 0, False, "g").state is BackendState.COMPLETED
    stopped = member_observation(failed, 143, True, "g")
    assert (stopped.state, stopped.signal, stopped.gang_stopped) == (BackendState.FAILED, 15, True)
    cancelled = Observation(BackendState.CANCELLED)
    assert member_observation(cancelled, 143, False, "g") is cancelled, "a cancel reads as the gang's"


def launcher_run(tmp_path: Path, scripts: list[str], policy: pb.GangFailurePolicy) -> tuple[int, list[Path]]:
    """Each member directory gets ``job.sh`` = ``scripts[rank]``; the launcher runs to its end."""
    dirs = []
    for rank, body in enumerate(scripts):
        d = tmp_path / f"member '{rank}' $x"  # quoting: a space, a quote and a dollar in the path
        d.mkdir()
        (d / "job.sh").write_text(body)
        dirs.append(d)
    text = render_gang_launcher([MemberRun(str(d)) for d in dirs], group_name="it's; a group", host="h1", policy=policy)
    (tmp_path / "launcher.sh").write_text(text)
    rc = subprocess.run(["bash", str(tmp_path / "launcher.sh")], timeout=60, check=False).returncode
    return rc, dirs


ENV_ECHO = (
    f'echo "${layout.GROUP_NAME_ENV}|${layout.GROUP_SIZE_ENV}|${layout.GROUP_RANK_ENV}|'
    f'${layout.GROUP_HOSTS_ENV}|${layout.GROUP_LEADER_ENV}|${layout.JOB_DIR_ENV}|$PWD"\n'
)


def test_the_launcher_exports_the_group_env_and_records_each_exit(tmp_path: Path) -> None:
    rc, dirs = launcher_run(tmp_path, [ENV_ECHO, ENV_ECHO + "exit 4\n"], pb.GangFailurePolicy.CONTINUE)
    assert rc == 4
    for rank, d in enumerate(dirs):
        out = (d / layout.JOB_STDOUT).read_text().strip()
        assert out == f"it's; a group|2|{rank}|h1,h1|h1|{d}|{d}"
    assert [(d / layout.GANG_MEMBER_EXIT).read_text().strip() for d in dirs] == ["0", "4"]
    assert not any((d / layout.GANG_MEMBER_STOPPED).exists() for d in dirs)


def test_fail_gang_stops_the_others_with_term_and_exits_with_the_failure(tmp_path: Path) -> None:
    # The survivor traps TERM as a job script does (it stops its containers, then exits 143).
    survivor = "trap 'echo stopped; exit 143' TERM\nsleep 60 & wait\n"
    rc, dirs = launcher_run(tmp_path, [survivor, "sleep 0.3; exit 5\n"], pb.GangFailurePolicy.FAIL_GANG)
    assert rc == 5
    assert [(d / layout.GANG_MEMBER_EXIT).read_text().strip() for d in dirs] == ["143", "5"]
    assert (dirs[0] / layout.GANG_MEMBER_STOPPED).exists()
    assert "stopped" in (dirs[0] / layout.JOB_STDOUT).read_text()


def test_term_to_the_launcher_reaches_every_member_and_waits_for_them(tmp_path: Path) -> None:
    dirs = []
    for rank in range(2):
        d = tmp_path / f"m{rank}"
        d.mkdir()
        (d / "job.sh").write_text("trap 'echo got-term; exit 143' TERM\necho up > up\nsleep 60 & wait\n")
        dirs.append(d)
    text = render_gang_launcher(
        [MemberRun(str(d)) for d in dirs], group_name="g", host="h", policy=pb.GangFailurePolicy.FAIL_GANG
    )
    proc = subprocess.Popen(["bash", "-c", text])
    try:
        import time

        deadline = time.monotonic() + 20
        while not all((d / "up").exists() for d in dirs):
            assert time.monotonic() < deadline, "members did not start"
            time.sleep(0.05)
        proc.terminate()
        assert proc.wait(timeout=20) == 143
    finally:
        proc.kill()
    for d in dirs:
        assert "got-term" in (d / layout.JOB_STDOUT).read_text()
        assert (d / layout.GANG_MEMBER_EXIT).read_text().strip() == "143"


def test_every_path_is_shell_quoted() -> None:
    text = render_gang_launcher(
        [MemberRun("/s/jobs/a'b $(rm -rf x)")],
        group_name="$(touch pwned)",
        host="h",
        policy=pb.GangFailurePolicy.FAIL_GANG,
    )
    assert shlex.quote("/s/jobs/a'b $(rm -rf x)") in text
    assert shlex.quote(f"{layout.GROUP_NAME_ENV}=$(touch pwned)") in text


def test_a_group_name_never_reaches_a_comment_and_a_newline_in_it_runs_nothing(tmp_path: Path) -> None:
    """the quoted name sat in the header comment, where a newline ended the comment."""
    marker = "zzgroup$(id)"
    text = render_gang_launcher(
        [MemberRun("/s/jobs/zzdir")], group_name=marker, host="h", policy=pb.GangFailurePolicy.CONTINUE
    )
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert not any("zz" in line for line in comments), comments
    injected = tmp_path / "x"
    name = f"g\nid > {injected} #"
    d = tmp_path / "m0"
    d.mkdir()
    (d / "job.sh").write_text(f'printf %s "${layout.GROUP_NAME_ENV}" > name\n')
    text = render_gang_launcher([MemberRun(str(d))], group_name=name, host="h", policy=pb.GangFailurePolicy.CONTINUE)
    (tmp_path / "launcher.sh").write_text(text)
    assert subprocess.run(["bash", str(tmp_path / "launcher.sh")], timeout=60, check=False).returncode == 0
    assert not injected.exists(), "the line after the newline ran"
    assert (d / "name").read_text() == name, "the member still sees its group's name, whole"
