"""Level 1 of the htcondor backend's tests: its pure text handling, checked by HTCondor's own bindings.

Every submit description the backend writes is parsed by the real ``htcondor2.Submit``; every
constraint and ``periodic_remove`` expression is evaluated by the real ``classad2``; the job ads the
parser reads are written by ``classad2``'s own JSON writer (what ``condor_q -json`` prints).
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from command_failures import failure_rows
from htcondor_bindings import classad2_fixture  # noqa: F401 (the fixture classad2)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.core.backend import BackendState
from interlink_nats.submitters.core.status import JobMeta, map_status

pytestmark = pytest.mark.htcondor

UID = "0b8f2c1e-5d7a-4a7e-9a51-3f0f7f0c2d11"


def test_constraints_select_exactly_the_pools_jobs(classad2: ModuleType) -> None:
    ads = [
        classad2.ClassAd({"ClusterId": 7, hp.POOL_ATTR: "grid", hp.POD_UID_ATTR: "a"}),
        classad2.ClassAd({"ClusterId": 8, hp.POOL_ATTR: "grid", hp.POD_UID_ATTR: "b"}),
        classad2.ClassAd({"ClusterId": 7, hp.POOL_ATTR: "other", hp.POD_UID_ATTR: "a"}),
        classad2.ClassAd({"ClusterId": 9}),
    ]

    def select(constraint: str) -> list[int]:
        expr = classad2.ExprTree(constraint)
        return [i for i, ad in enumerate(ads) if expr.eval(ad) is True]

    assert select(hp.pool_constraint("grid")) == [0, 1]
    assert [select(c) for c in hp.clusters_constraints("grid", ["7", "x", "9"])] == [[0]]
    assert [select(c) for c in hp.uids_constraints("grid", ["b", 'q"uote'])] == [[1]]


def test_twenty_thousand_ids_split_into_constraints_that_each_fit_one_argument(classad2: ModuleType) -> None:
    clusters = [str(10_000_000 + i) for i in range(20_000)]
    chunks = hp.clusters_constraints("grid", clusters)
    assert len(chunks) == 2
    assert all(len(c.encode()) <= hp.ARG_MAX_BYTES for c in chunks)
    members = [classad2.ExprTree(c.split("&& ", 1)[1][len("member(ClusterId, ") : -1]).eval() for c in chunks]
    assert [str(x) for m in members for x in m] == clusters, "every id once, in order"
    uids = [f"{i:08d}-5d7a-4a7e-9a51-3f0f7f0c2d11" for i in range(20_000)]
    assert all(len(c.encode()) <= hp.ARG_MAX_BYTES for c in hp.uids_constraints("grid", uids))
    batches = hp.id_batches([f"{c}.0" for c in clusters])
    assert len(batches) == 2 and sum(map(len, batches)) == 20_000
    assert all(sum(len(i) + 1 for i in b) <= hp.ARG_MAX_BYTES for b in batches)
    assert [len(b) for b in hp.id_batches([f"{c}.0" for c in clusters[:250]], max_jobs=100)] == [100, 100, 50]
    with pytest.raises(ValueError, match="longer than one command-line argument"):
        hp.pack(["x" * 10], budget=5)


def test_condor_rm_totals_tell_gone_from_permission_denied() -> None:
    line = "0 Succeeded, 0 Failed, 1 Not Found, 0 Bad Status, 0 Already Done, 0 Permission Denied\n"
    gone = hp.parse_remove_totals("Couldn't find/remove all jobs matching 42.0\n" + line)
    assert gone is not None and gone.not_found == 1
    assert hp.removal_problem(gone) is None
    denied = hp.parse_remove_totals(line.replace("1 Not Found", "0 Not Found").replace("0 Permission", "1 Permission"))
    assert denied is not None and "1 permission denied" in str(hp.removal_problem(denied))
    assert hp.parse_remove_totals("Failed to connect to <10.0.0.5:9618>") is None


def test_a_ces_walltime_removal_is_a_time_limit() -> None:
    reason = "CE job removed by SYSTEM_PERIODIC_REMOVE due to job exceeded allowed walltime: 120 minutes."
    ad = {"JobStatus": 3, "RemoveReason": reason, hp.TIME_LIMIT_ATTR: 61}
    obs = hp.observe(ad, now=0)
    assert obs is not None and obs.state is BackendState.TIMEOUT
    other = hp.observe({"JobStatus": 3, "RemoveReason": "via condor_rm (by user a)", hp.TIME_LIMIT_ATTR: 61}, now=0)
    assert other is not None and other.state is BackendState.CANCELLED


def test_empty_and_real_json_outputs_parse(classad2: ModuleType) -> None:
    assert hp.parse_ads("") == []
    assert hp.parse_ads("\n") == []
    assert hp.parse_ads("[]") == []
    ad = classad2.ClassAd(
        {"ClusterId": 12, "ProcId": 0, "JobStatus": 5, hp.POD_UID_ATTR: UID, hp.POOL_ATTR: "grid", "HoldReason": "x"}
    )
    ad["HoldReasonCode"] = 13
    text = "[\n" + ad.printJson() + "\n]\n"
    jobs = hp.parse_jobs(hp.parse_ads(text), pool="grid", now=0)
    assert list(jobs) == ["12.0"]
    assert jobs["12.0"].uid == UID
    assert jobs["12.0"].observation.reason == "held: x (HoldReasonCode 13)"
    assert hp.parse_jobs(hp.parse_ads(text), pool="another", now=0) == {}
    with pytest.raises(ValueError, match="not JSON"):
        hp.parse_ads("Failed to connect to schedd")


@pytest.mark.parametrize(
    ("ad", "state", "exit_code", "signal", "reason"),
    [
        ({"JobStatus": 1}, BackendState.QUEUED, None, None, "idle: waiting for a matching slot"),
        ({"JobStatus": 2}, BackendState.RUNNING, None, None, ""),
        ({"JobStatus": 6}, BackendState.RUNNING, None, None, ""),
        ({"JobStatus": 7}, BackendState.RUNNING, None, None, "suspended"),
        (
            {"JobStatus": 5, "HoldReason": "Error from slot1: no space", "HoldReasonCode": 13},
            BackendState.QUEUED,
            None,
            None,
            "held: Error from slot1: no space (HoldReasonCode 13)",
        ),
        (
            {"JobStatus": 5, "HoldReason": "The job exceeded allowed job duration of 60", "HoldReasonCode": 46},
            BackendState.TIMEOUT,
            None,
            None,
            "held: The job exceeded allowed job duration of 60 (HoldReasonCode 46)",
        ),
        (
            {"JobStatus": 3, "RemoveReason": "via condor_rm (by user grid)"},
            BackendState.CANCELLED,
            None,
            None,
            "via condor_rm (by user grid)",
        ),
        (
            {
                "JobStatus": 3,
                hp.TIME_LIMIT_ATTR: 90,
                "RemoveReason": "The job attribute PeriodicRemove expression '...' evaluated to TRUE",
            },
            BackendState.TIMEOUT,
            None,
            None,
            "time limit of 90s exceeded (activeDeadlineSeconds): The job attribute PeriodicRemove expression "
            "'...' evaluated to TRUE",
        ),
        ({"JobStatus": 4, "ExitBySignal": False, "ExitCode": 0}, BackendState.COMPLETED, 0, None, ""),
        ({"JobStatus": 4, "ExitBySignal": False, "ExitCode": 3}, BackendState.FAILED, 3, None, ""),
        ({"JobStatus": 4, "ExitBySignal": True, "ExitSignal": 9}, BackendState.FAILED, None, 9, ""),
    ],
)
def test_job_status_maps_to_a_state_with_its_reason(
    ad: dict[str, Any], state: BackendState, exit_code: int | None, signal: int | None, reason: str
) -> None:
    obs = hp.observe(ad, now=1000.0)
    assert obs is not None
    assert (obs.state, obs.exit_code, obs.signal, obs.reason) == (state, exit_code, signal, reason)


def test_a_job_held_too_long_fails_with_its_hold_reason() -> None:
    ad = {"JobStatus": 5, "HoldReason": "SciToken expired", "HoldReasonCode": 1, "EnteredCurrentStatus": 100}
    held = hp.observe(ad, now=150.0, hold_timeout=60)
    assert held is not None and held.state is BackendState.QUEUED
    failed = hp.observe(ad, now=200.0, hold_timeout=60)
    assert failed is not None and failed.state is BackendState.FAILED
    assert "SciToken expired" in failed.reason
    assert hp.observe({"JobStatus": 42}, now=0) is None


def test_a_held_jobs_reason_reaches_the_pod_status() -> None:
    obs = hp.observe({"JobStatus": 5, "HoldReason": "Failed to transfer files", "HoldReasonCode": 13}, now=0)
    assert obs is not None
    meta = JobMeta(UID, "ns", "p", "grid", "12.0", (), ("main",), "htcondor")
    status = map_status(meta, obs, {}, now=0)
    assert status.state == pb.JobState.PENDING
    assert "Failed to transfer files" in status.message
    assert "Failed to transfer files" in status.containers[0].message


def test_terse_submit_output_and_uid_lookup() -> None:
    assert hp.parse_submit_id("42.0 - 42.0\n") == "42.0"
    with pytest.raises(ValueError, match="no job id"):
        hp.parse_submit_id("ERROR: Failed to connect to local queue manager")
    jobs = hp.parse_jobs(
        [
            {"ClusterId": 3, "ProcId": 0, "JobStatus": 3, hp.POD_UID_ATTR: "a", hp.POOL_ATTR: "g"},
            {"ClusterId": 11, "ProcId": 0, "JobStatus": 1, hp.POD_UID_ATTR: "a", hp.POOL_ATTR: "g"},
        ],
        pool="g",
        now=0,
    )
    assert hp.uids_to_ids(jobs) == {"a": "11.0"}


def test_condor_status_totals_count_partitionable_slots_once() -> None:
    ads = json.loads(
        '[{"Machine":"a","TotalSlotCpus":8,"TotalSlotMemory":16000,"TotalSlotGPUs":1},'
        '{"Machine":"a","DynamicSlot":true,"Cpus":2,"Memory":2000},'
        '{"Machine":"b","TotalSlotCpus":4,"TotalSlotMemory":8000}]'
    )
    cap = hp.parse_status_totals(ads)
    assert (cap.cpu_millis, cap.memory_bytes, cap.gpus, cap.nodes) == (12000, 24000 * 2**20, 1, 2)


FAILURES = """\
condor_submit        | 1 | BackendUnavailable | ERROR: Failed to connect to local queue manager
condor_submit        | 1 | BackendUnavailable | SECMAN:2007:Failed to end classad message. \
                                                AUTHENTICATE:1003:Failed to authenticate with any method
condor_submit        | - | BackendUnavailable |
condor_submit        | 1 | SubmitRejected     | ERROR: on Line 7 of submit file: Submit:0:Unrecognized \
                                                attribute request_gpuz
condor_submit        | 1 | SubmitRejected     | ERROR: Invalid log file: "/nope/job.log" (No such file or directory)
condor_q             | 1 | BackendUnavailable | -- Failed to fetch ads from: <10.0.0.5:9618> : ce.example.org
condor_q             | 1 | BackendUnavailable | Error: Collector has no record of schedd/submitter
condor_history       | 1 | BackendUnavailable | Error: Can't open history file
condor_rm            | 1 | BackendUnavailable | Couldn't find/remove all jobs in cluster 42
condor_rm            | 1 | JobAlreadyEnded    | Job 42.0 not found
condor_rm            | 1 | JobAlreadyEnded    | Job 42.0 already marked for removal
condor_rm            | 1 | JobAlreadyEnded    | There are no jobs matched by constraint
condor_rm            | 1 | BackendUnavailable | Failed to connect to <10.0.0.5:9618>: couldn't find the schedd
condor_rm            | 1 | BackendUnavailable | Permission denied
condor_transfer_data | 1 | BackendUnavailable | Job 42.0 is not in the spool
condor_status        | 1 | BackendUnavailable | Error: communication error
"""


@pytest.mark.parametrize(("command", "returncode", "error", "stderr"), failure_rows(FAILURES))
def test_every_condor_command_failure_is_classified(
    command: str, returncode: int | None, error: str, stderr: str
) -> None:
    assert hp.classify_failure(hp.Command(command), returncode, stderr).__name__ == error
