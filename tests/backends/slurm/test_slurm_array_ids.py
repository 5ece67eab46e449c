"""Slurm's array ids as squeue and sacct print them (``array_ids``), and the squeue parser reading them: lines
recorded from a real Slurm 22.05 (``squeue -O JobArrayID:|,...`` with arrays ``--array=0-7%3`` and
``--array=1,4-6,9``, after ``scancel 2_5``)."""

from __future__ import annotations

import pytest
from interlink_nats.submitters.backends.slurm import array_ids as ai
from interlink_nats.submitters.backends.slurm import parse as sp
from interlink_nats.submitters.core.backend import BackendState

RECORDED = """\
1_[2-7%3]|arrx|PENDING|JobArrayTaskLimit|0|N/A|N/A|
2_[1,4,6,9]|arry|PENDING|Priority|0|N/A|N/A|
3|single|RUNNING|None|0|2026-11-29T01:37:07|N/A|cpu=1,mem=256M,node=1,billing=1
1_0|arrx|RUNNING|None|0|2026-11-29T01:37:07|N/A|cpu=1,mem=256M,node=1,billing=1
1_1|arrx|COMPLETED|None|256|2026-11-29T01:37:07|2026-11-29T01:37:09|cpu=1,mem=256M,node=1,billing=1
"""


@pytest.mark.parametrize(
    ("job_id", "ids"),
    [
        ("1234", ["1234"]),
        ("1234_5", ["1234_5"]),
        ("1234_[3-5]", ["1234_3", "1234_4", "1234_5"]),
        ("1234_[1,4-6%2]", ["1234_1", "1234_4", "1234_5", "1234_6"]),
        ("1234_[0-6:3]", ["1234_0", "1234_3", "1234_6"]),
        ("1234_[7]", ["1234_7"]),
        ("1234+0", []),  # a het job's component: not ours
        ("1234_[5-3]", []),  # backwards
        ("1234_[1-3:0]", []),
        ("1234_[0-9999999]", []),  # more than any MaxArraySize
        ("1234_[a-b]", []),
        ("1234_[]", []),
        ("", []),
        ("12_34_5", []),
    ],
)
def test_an_id_stands_for_its_tasks(job_id: str, ids: list[str]) -> None:
    assert ai.expand(job_id) == ids


def test_what_is_a_job_id() -> None:
    assert all(map(ai.is_job_id, ["12", "12_3", "12_[3-5%2]"]))
    assert not any(map(ai.is_job_id, ["12+0", "JOBID", "", "12_", "12_[x]", " 12"]))


def test_indexes_follow_the_array_grammar() -> None:
    assert ai.task_indexes("0-31") == list(range(32))
    assert ai.task_indexes("1,3,5,7") == [1, 3, 5, 7]
    assert ai.task_indexes("1-7:2") == [1, 3, 5, 7]
    for bad in ("", "1,", "-1", "1-", "x", "1-3%2"):
        with pytest.raises(ValueError, match="not an array index list"):
            ai.task_indexes(bad)


def test_the_array_flag_and_the_members_ids() -> None:
    assert ai.array_flag(20) == "--array=0-19"
    assert ai.array_flag(1000, 50) == "--array=0-999%50"
    assert ai.array_flag(1, 0) == "--array=0-0"
    with pytest.raises(ValueError, match="at least one task"):
        ai.array_flag(0)
    assert ai.member_job_ids("77", 3) == ("77_0", "77_1", "77_2")
    assert ai.base_id("77_2") == ai.base_id("77") == "77"


def test_squeue_lists_every_task_pending_ranges_expanded() -> None:
    jobs = sp.parse_squeue(RECORDED)
    assert set(jobs) == {"3", "1_0", "1_1", *(f"1_{i}" for i in range(2, 8)), "2_1", "2_4", "2_6", "2_9"}
    assert jobs["1_5"].observation.state is BackendState.QUEUED
    assert jobs["1_5"].observation.reason == "JobArrayTaskLimit"
    assert jobs["1_0"].observation.state is BackendState.RUNNING
    assert (jobs["1_1"].observation.state, jobs["1_1"].observation.exit_code) == (BackendState.COMPLETED, 1)
    assert "2_5" not in jobs  # cancelled while pending: Slurm drops it from the range
    assert sp.names_to_ids(jobs) == {"arrx": "1", "arry": "2", "single": "3"}


def test_squeue_changes_names_every_task_of_a_range_that_moved() -> None:
    first, changed = sp.squeue_changes(RECORDED, sp.EMPTY_SQUEUE)
    assert "1_7" in changed and first.by_id == sp.parse_squeue(RECORDED)
    # task 2 starts: the range shrinks to 3-7, and a line for 1_2 appears
    later = RECORDED.replace("1_[2-7%3]", "1_[3-7%3]") + "1_2|arrx|RUNNING|None|0|2026-11-29T01:37:10|N/A|\n"
    second, changed = sp.squeue_changes(later, first)
    assert changed == {f"1_{i}" for i in range(2, 8)}
    assert second.by_id == sp.parse_squeue(later)
    assert second.by_id["1_2"].observation.state is BackendState.RUNNING
    assert second.by_id["1_3"].observation.state is BackendState.QUEUED


def test_sacct_lists_array_tasks_by_their_own_ids() -> None:
    text = "5_0|arr|COMPLETED|0:0|2026-11-29T01:37:07|2026-11-29T01:37:09\n5_1|arr|FAILED|3:0|N/A|N/A\n"
    text += "5_[2-3]|arr|PENDING|0:0|Unknown|Unknown\n"
    jobs = sp.parse_sacct(text)
    assert set(jobs) == {"5_0", "5_1", "5_2", "5_3"}
    assert (jobs["5_1"].observation.state, jobs["5_1"].observation.exit_code) == (BackendState.FAILED, 3)
