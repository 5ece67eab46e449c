"""Slurm text handling from recorded output (no Slurm needed; not marked ``slurm``)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from command_failures import failure_rows
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.slurm import flags as sf
from interlink_nats.submitters.backends.slurm import parse as sp
from interlink_nats.submitters.core.backend import BackendState as B
from interlink_nats.submitters.core.backend import (
    BackendUnavailable,
    CommandFailed,
    SubmitRejected,
    error_for,
)

# Recorded from slurm-wlm 22.05.8: squeue -h --me --states=all -O "JobID:|,Name:|,State:|,Reason:|,exit_code:|,..."
SQUEUE = """\
3|uid-d|CANCELLED|None|0|2026-11-25T23:52:38|2026-11-25T23:52:38
1|uid-a|FAILED|NonZeroExitCode|768|2026-11-25T23:52:32|2026-11-25T23:52:35
4|0f3bd293-bef1-4af9-b11f-3af7d25b8f85|PENDING|Priority|0|N/A|N/A
5|uid-e|RUNNING|None|0|2026-11-25T23:53:00|2026-11-25T23:54:00
6|uid-f|FAILED|JobLaunchFailure|9|2026-11-25T23:53:00|2026-11-25T23:53:01
7|uid-g|TIMEOUT|TimeLimit|15|2026-11-25T23:53:00|2026-11-25T23:54:30
8|uid-h|COMPLETED|None|0|2026-11-25T23:53:00|2026-11-25T23:53:02
9|uid-i|OUT_OF_MEMORY|OutOfMemory|0|2026-11-25T23:53:00|2026-11-25T23:53:02
10|uid-j|COMPLETING|None|0|2026-11-25T23:53:00|2026-11-25T23:53:02
11|uid-k|WEIRD_NEW_STATE|None|0|N/A|N/A
garbage line
"""

# sacct -X -n -P -o JobID,JobName,State,ExitCode,Start,End (from slurm-local.md's slurmdbd run)
SACCT = """\
12|uid-l|COMPLETED|0:0|2026-11-25T23:53:00|2026-11-25T23:53:02
13|uid-m|FAILED|3:0|2026-11-25T23:53:00|2026-11-25T23:53:02
14|uid-n|CANCELLED by 0|0:15|2026-11-25T23:53:00|2026-11-25T23:53:02
15|uid-o|OUT_OF_MEMORY|0:125|2026-11-25T23:53:00|2026-11-25T23:53:02
16|uid-p|TIMEOUT|0:0|2026-11-25T23:53:00|Unknown
16.batch|batch|CANCELLED|0:15|2026-11-25T23:53:00|2026-11-25T23:53:02
"""


def test_squeue_lines_become_observations() -> None:
    jobs = sp.parse_squeue(SQUEUE)
    assert set(jobs) == {"1", "3", "4", "5", "6", "7", "8", "9", "10"}
    got = {i: (j.name, j.observation.state, j.observation.exit_code, j.observation.signal) for i, j in jobs.items()}
    assert got["1"] == ("uid-a", B.FAILED, 3, None)
    assert got["3"] == ("uid-d", B.CANCELLED, 0, None)
    assert got["4"] == ("0f3bd293-bef1-4af9-b11f-3af7d25b8f85", B.QUEUED, 0, None)
    assert got["5"][1] is B.RUNNING
    assert got["6"] == ("uid-f", B.FAILED, 0, 9), "squeue's exit_code is a raw wait status"
    assert got["7"][1] is B.TIMEOUT
    assert got["8"][1] is B.COMPLETED
    assert got["9"][1] is B.OUT_OF_MEMORY
    assert got["10"][1] is B.RUNNING
    assert jobs["4"].observation.reason == "Priority"
    assert jobs["5"].observation.reason == ""
    assert jobs["4"].observation.started_at is None
    start = jobs["1"].observation.started_at
    assert start == dt.datetime(2026, 11, 25, 23, 52, 32).timestamp()


def test_sacct_lines_become_observations() -> None:
    jobs = sp.parse_sacct(SACCT)
    assert set(jobs) == {"12", "13", "14", "15", "16"}, "job steps are ignored"
    got = {i: (j.observation.state, j.observation.exit_code, j.observation.signal) for i, j in jobs.items()}
    assert got == {
        "12": (B.COMPLETED, 0, None),
        "13": (B.FAILED, 3, None),
        "14": (B.CANCELLED, 0, 15),
        "15": (B.OUT_OF_MEMORY, 0, 125),
        "16": (B.TIMEOUT, 0, None),
    }
    assert jobs["16"].observation.finished_at is None


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("PENDING", B.QUEUED),
        ("CANCELLED by 1000", B.CANCELLED),
        ("NODE_FAIL", B.NODE_FAIL),
        ("BOOT_FAIL", B.NODE_FAIL),
        ("PREEMPTED", B.PREEMPTED),
        ("DEADLINE", B.DEADLINE),
        ("SUSPENDED", B.RUNNING),
        ("REQUEUED", B.QUEUED),
        ("completed", B.COMPLETED),
        ("NOPE", None),
    ],
)
def test_state_words(raw: str, state: B | None) -> None:
    assert sp.map_state(raw) is state


def test_sinfo_counts_each_node_once() -> None:
    text = "n1|64|256000|gpu:a100:4(S:0-1)|\nn1|64|256000|gpu:a100:4(S:0-1)|\nn2|32|128000|(null)|\nn3|8|1000+|gpu:2|\n"
    cap = sp.parse_sinfo(text)
    assert cap.cpu_millis == 104_000
    assert cap.memory_bytes == 385_000 * 2**20
    assert cap.gpus == 6
    assert cap.nodes == 3
    assert cap.quantities() == {"cpu": "104", "memory": "385000Mi", "nvidia.com/gpu": "6"}


def test_resources_become_sbatch_flags() -> None:
    req = pb.ResourceRequest(
        cpu_millis=1500, memory_bytes=100 * 2**20 + 1, gpus=2, wall_time=dt.timedelta(hours=25, seconds=1)
    )
    assert sp.resource_flags(req) == ["--cpus-per-task=2", "--mem=101M", "--gres=gpu:2", "--time=1-01:01:00"]
    assert sp.resource_flags(pb.ResourceRequest()) == []
    assert sp.resource_flags(None) == []


def test_sbatch_argv_orders_flags_by_precedence_and_controls_its_own() -> None:
    argv = sp.sbatch_argv(
        "sbatch",
        uid="u1",
        job_dir="/s/jobs/u1",
        script="/s/jobs/u1/job.sh",
        pool_flags=sf.parse(["-p", "batch", "--mem=1G"], source="pool"),
        pod_flags=sf.parse(["--qo", "high", "--mem=2G"], source="pod"),
        sized=sp.resource_flags(pb.ResourceRequest(memory_bytes=2**30 * 3)),
    )
    assert argv == [
        "sbatch",
        "--partition=batch",
        "--mem=1G",
        "--qos=high",
        "--mem=2G",
        "--mem=3072M",
        "--job-name=u1",
        "--chdir=/s/jobs/u1",
        "--output=/s/jobs/u1/job.out",
        "--parsable",
        "/s/jobs/u1/job.sh",
    ]


def test_sbatch_ids_and_transient_errors() -> None:
    assert sp.parse_sbatch_id("123\n") == "123"
    assert sp.parse_sbatch_id("123;cluster\n") == "123"
    with pytest.raises(ValueError, match="no job id"):
        sp.parse_sbatch_id("sbatch: something else")
    assert sp.names_to_ids(sp.parse_squeue(SQUEUE))["uid-a"] == "1"


FAILURES = """\
sbatch  | 1 | BackendUnavailable | sbatch: error: Batch job submission failed: Unable to contact slurm \
                                   controller (connect failure)
sbatch  | 1 | BackendUnavailable | sbatch: error: Socket timed out on send/recv operation
sbatch  | 1 | BackendUnavailable | sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying
sbatch  | 1 | BackendUnavailable | sbatch: error: Batch job submission failed: Job submit/allocate failed: \
                                   Slurm backup controller in standby mode
sbatch  | - | BackendUnavailable |
sbatch  | 1 | SubmitRejected     | sbatch: error: Invalid generic resource (gres) specification
sbatch  | 1 | SubmitRejected     | sbatch: error: Batch job submission failed: Invalid account or \
                                   account/partition combination specified
sbatch  | 1 | SubmitRejected     | sbatch: error: invalid partition specified: gpu
sbatch  | 1 | SubmitRejected     |
squeue  | 1 | BackendUnavailable | slurm_load_jobs error: Unable to contact slurm controller (connect failure)
squeue  | 1 | BackendUnavailable | squeue: error: Invalid user: nobody
sacct   | 1 | CommandUnusable    | sacct: error: Slurm accounting storage is disabled
sacct   | 1 | BackendUnavailable | sacct: error: Problem talking to the database: Connection refused
sacct   | 1 | BackendUnavailable | sacct: error: slurm_persist_conn_open_without_init: failed to open \
                                   persistent connection to host:localhost:6819: Connection refused
sacct   | 1 | BackendUnavailable | sacct: error: Unknown arguments: -X
sacct   | - | BackendUnavailable |
scancel | 1 | JobAlreadyEnded    | scancel: error: Kill job error on job id 1234: Invalid job id specified
scancel | 1 | JobAlreadyEnded    | scancel: error: Kill job error on job id 1234: Job/step already completing \
                                   or completed
scancel | 1 | BackendUnavailable | scancel: error: Kill job error on job id 1234: Access/permission denied
scancel | 1 | BackendUnavailable | scancel: error: Kill job error on job id 1234: Unable to contact slurm controller
sinfo   | 1 | BackendUnavailable | slurm_load_partitions: Unable to contact slurm controller (connect failure)
sinfo   | 1 | BackendUnavailable | sinfo: error: Invalid partition name specified
"""


@pytest.mark.parametrize(("command", "returncode", "error", "stderr"), failure_rows(FAILURES))
def test_every_slurm_command_failure_is_classified(
    command: str, returncode: int | None, error: str, stderr: str
) -> None:
    assert sp.classify_failure(sp.Command(command), returncode, stderr).__name__ == error


def test_a_refusal_carries_slurms_words_and_other_failures_the_whole_command() -> None:
    failed = CommandFailed(["/opt/slurm/bin/sbatch", "job.sh"], 1, "sbatch: error: invalid partition specified: gpu\n")
    refused = error_for(sp.classify_failure(sp.Command.SBATCH, failed.returncode, failed.stderr), failed)
    assert isinstance(refused, SubmitRejected) and str(refused) == "sbatch: error: invalid partition specified: gpu"
    down = error_for(BackendUnavailable, CommandFailed(["squeue"], None, ""))
    assert isinstance(down, BackendUnavailable) and str(down) == "squeue timed out: (no stderr)"


def test_parse_squeue_since_parses_only_changed_lines_and_keeps_unchanged_jobs() -> None:
    first = sp.parse_squeue_since(SQUEUE, sp.EMPTY_SQUEUE)
    assert first.by_id == sp.parse_squeue(SQUEUE)
    assert sp.parse_squeue_since(SQUEUE, first) is first, "the same output: the same snapshot"
    lines = SQUEUE.splitlines()
    changed = lines[0].replace("|", "|x", 1)  # job 3 gets another name: a changed line
    text = "\n".join([changed, *lines[2:]])  # ...and job 1 left the queue
    second = sp.parse_squeue_since(text, first)
    assert second.by_id == sp.parse_squeue(text)
    for job_id, job in second.by_id.items():
        if job_id != "3":
            assert job is first.by_id[job_id], "an unchanged line keeps its object"
    assert second.by_id["3"].name == "xuid-d" and "1" not in second.by_id


def test_squeue_changes_names_every_job_whose_line_changed_appeared_or_left() -> None:
    first, changed = sp.squeue_changes(SQUEUE, sp.EMPTY_SQUEUE)
    assert first.by_id == sp.parse_squeue(SQUEUE)
    assert changed >= set(first.by_id) | {"11"}, "a line that does not parse still names its job"
    assert sp.squeue_changes(SQUEUE, first) == (first, set()), "the same output: nothing changed"
    lines = SQUEUE.splitlines()
    reordered = "\n".join(reversed(lines))
    assert sp.squeue_changes(reordered, first) == (first, set()), "the same lines in another order"
    text = "\n".join([lines[0].replace("CANCELLED", "COMPLETED"), *lines[2:], "99|uid-z|PENDING|None|0|N/A|N/A"])
    second, changed = sp.squeue_changes(text, first)
    assert changed == {"3", "1", "99"}, "changed, left, appeared"
    assert second.by_id == sp.parse_squeue(text)
    assert sp.parse_squeue_since(text, first).by_id == second.by_id


def test_squeue_changes_updates_the_snapshot_it_is_handed_but_never_the_empty_one() -> None:
    first, _ = sp.squeue_changes(SQUEUE, sp.EMPTY_SQUEUE)
    assert first is not sp.EMPTY_SQUEUE
    assert (sp.EMPTY_SQUEUE.lines, sp.EMPTY_SQUEUE.by_id, sp.EMPTY_SQUEUE.text) == ({}, {}, "")
    text = "\n".join(SQUEUE.splitlines()[1:])
    second, changed = sp.squeue_changes(text, first)
    assert second is first and changed == {SQUEUE.splitlines()[0].split("|")[0].strip()}
    assert second.text == text and second.by_id == sp.parse_squeue(text)
    assert sp.squeue_changes(text, second) == (second, set())


def test_squeue_changes_is_a_diff_of_the_line_sets_whatever_moved() -> None:
    """Lines compared place by place must still give what comparing the sets of lines gives: lines that
    changed in place, moved, were inserted or removed (everything after shifts), repeated, or do not parse."""
    rng = random.Random(7)
    states = ("RUNNING", "COMPLETED", "NO_SUCH_STATE")

    def job(i: int) -> str:
        return f"{100 + i}|uid-{i}|{rng.choice(states)}|None|0|N/A|N/A"

    snapshot, before = sp.EMPTY_SQUEUE, list[str]()
    for _ in range(300):
        rows = list(before)
        for _ in range(rng.randrange(4)):
            edit, at = rng.randrange(6), rng.randrange(len(rows) + 1)
            if edit == 0 and at < len(rows) and rows[at][:1].isdigit():  # a job's line changed in place
                was, now = rows[at], job(int(rows[at].split("|")[0]) - 100)
                rows = [now if line == was else line for line in rows]
            elif edit == 1:  # a new job, or a line that is not one; the rest shifts down
                listed = {line.split("|")[0] for line in rows}
                i = rng.randrange(80)
                rows.insert(at, job(i) if str(100 + i) not in listed else rng.choice(["", "not a job line"]))
            elif edit == 2 and at < len(rows):
                del rows[at]  # the rest shifts up
            elif edit == 3:
                rng.shuffle(rows)
            elif edit == 4 and rows:
                rows.insert(at, rng.choice(rows))  # a line twice
        text = "\n".join(rows)
        rows = text.splitlines()  # (a last empty line is no line)
        snapshot, changed = sp.squeue_changes(text, snapshot)
        assert changed == {line.split("|", 1)[0].strip() for line in set(before) ^ set(rows)}
        assert snapshot.by_id == sp.parse_squeue(text)
        assert set(snapshot.lines) == set(rows)
        assert (sp.EMPTY_SQUEUE.lines, sp.EMPTY_SQUEUE.by_id, sp.EMPTY_SQUEUE.text) == ({}, {}, "")
        before = rows
