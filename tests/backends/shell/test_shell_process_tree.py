"""A deleted pod on a shell pool ends with its whole process tree, within the site's grace.

Real processes, read from ``/proc`` (not the submitter's state): a pod asking for a grace period of 10**12 seconds,
one container that ignores TERM, one that ``setsid``s a child, one whose child double-forks. Before the fix the
delete answered at once, the runner died at the first TERM, the KILL never came, the slot was freed and every one
of these processes ran on in a deleted directory. Also the site limits on a pod's times: each is a 422 naming the
field and the limit at ``/create``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.core.backend import GangSpec, JobHandle, JobSpec
from interlink_nats.submitters.jobdirs.files import prepare_job_dir
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import parse_build_config
from stack import Stack, create_body, gateway_only, new_pool, pod, submitter_settings

MAX_GRACE_S = 2
KILL_GRACE_S = 0.5
SLACK_S = 5.0
"""Beyond the bound, for a loaded machine (2 cores shared by the whole suite): /proc is polled, not slept on."""
DEADLINE_S = 60.0

IGNORE_TERM = "trap '' TERM; while :; do sleep 1; done"
CONTAINERS = {
    "trapper": ["sh", "-c", IGNORE_TERM],
    "setsider": ["sh", "-c", f'setsid sh -c "{IGNORE_TERM}" & while :; do sleep 1; done'],
    "forker": ["sh", "-c", f'(sh -c "{IGNORE_TERM}" &); while :; do sleep 1; done'],
}


def job_processes(marker: str) -> list[int]:
    """Live processes whose environment or command line holds ``marker`` (inherited by everything a pod starts)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            seen = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and marker.encode() in seen:
            found.append(int(entry.name))
    return found


async def until(check: Any, within: float, what: str) -> float:
    """Poll ``check()`` until true; the seconds it took."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within, f"timed out after {within}s waiting for {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


def hostile_pod(marker: str, grace: int = 10**12) -> dict[str, Any]:
    p = pod(containers=CONTAINERS, env={"TREE_MARKER": marker})
    p["spec"]["terminationGracePeriodSeconds"] = grace
    return p


@contextlib.asynccontextmanager
async def limited_stack(nats_url: str, state_dir: Path, **limits: int) -> AsyncIterator[Stack]:
    """Gateway + shell submitter (one slot) whose site sets ``limits`` (max grace 2 s unless given)."""
    pool = new_pool()
    build_config = {
        "runtime": "CONTAINER_RUNTIME_NONE",
        "limits": {"maxTerminationGraceSeconds": MAX_GRACE_S, **limits},
    }
    settings = submitter_settings(
        nats_url, pool, state_dir, build_config=build_config, kill_grace=KILL_GRACE_S, shell={"max_concurrent_jobs": 1}
    )
    async with Submitter(settings) as submitter, gateway_only(nats_url, default_pool=pool) as stack:
        stack.submitter = submitter
        yield stack


async def test_a_delete_kills_the_whole_tree_within_the_site_grace_and_frees_the_slot_only_then(
    nats_url: str, tmp_path: Path
) -> None:
    first, second = f"tree-{uuid.uuid4().hex}", f"tree-{uuid.uuid4().hex}"
    async with limited_stack(nats_url, tmp_path) as stack:
        p = hostile_pod(first)
        assert (await stack.post("/create", [create_body(p)])).status_code == 200
        # every container's process and both escapees (4 ignoring TERM, plus the shells that wait)
        await until(lambda: len(job_processes(first)) >= 7, DEADLINE_S, "the pod's processes")
        started = time.monotonic()
        deleted = await stack.post("/delete", p)
        assert deleted.status_code == 200, deleted.text
        # The only slot is the deleted pod's until its last process is gone: the next pod waits for it.
        nxt = pod(containers={"main": ["sh", "-c", "while :; do sleep 1; done"]}, env={"TREE_MARKER": second})
        assert (await stack.post("/create", [create_body(nxt)])).status_code == 200

        def first_gone() -> bool:
            alive = job_processes(first)
            assert not (alive and job_processes(second)), f"the next pod started while {alive} still ran"
            return not alive

        took = await until(first_gone, MAX_GRACE_S + KILL_GRACE_S + SLACK_S, "the deleted pod's processes to end")
        assert time.monotonic() - started <= MAX_GRACE_S + KILL_GRACE_S + SLACK_S
        print(f"deleted pod's tree gone {took:.2f}s after the delete (site max grace {MAX_GRACE_S}s)")
        await until(lambda: job_processes(second), DEADLINE_S, "the next pod to take the freed slot")
        assert (await stack.post("/delete", nxt)).status_code == 200
    assert job_processes(first) == job_processes(second) == [], "stopping the submitter left a deleted pod's process"


async def test_a_script_that_ignores_term_is_killed_with_its_tree_at_the_submitters_own_bound(tmp_path: Path) -> None:
    """A job.sh from any NATS client: no grace of the pod's is trusted, the submitter's maximum applies."""
    marker = f"tree-{uuid.uuid4().hex}"
    backend = ShellBackend(max_concurrent=1, kill_grace_s=KILL_GRACE_S)
    backend.configure(pb.BuildConfig(limits=pb.PodLimits(max_termination_grace_seconds=1)))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.sh").write_text(
        f"trap '' TERM\nexport M={marker}\n"
        f"setsid sh -c '{IGNORE_TERM}' &\n(sh -c '{IGNORE_TERM}' &)\nwhile :; do sleep 1; done\n"
    )
    await backend.start()
    try:
        await backend.submit(JobSpec("u1", job_dir, job_dir / "job.sh"))
        await until(lambda: len(job_processes(marker)) >= 3, DEADLINE_S, "the job's processes")
        started = time.monotonic()
        await backend.cancel(JobHandle("u1", job_dir, "u1"))
        assert time.monotonic() - started < KILL_GRACE_S + 1.0, "a cancel waits kill_grace_s at most; the rest runs on"
        assert backend._limit == 1 and len(backend._running) == 1, "the slot stays taken while the tree lives"
        took = await until(lambda: not job_processes(marker), 1 + KILL_GRACE_S + SLACK_S, "the tree to be killed")
        print(f"ignoring tree killed {took:.2f}s after the cancel (bound 1s + {KILL_GRACE_S}s)")
        await until(lambda: not backend._running, DEADLINE_S, "the slot to be freed")
    finally:
        await backend.close()
    assert job_processes(marker) == []


async def test_a_cancelled_pod_group_ends_with_every_members_tree_at_the_submitters_bound(tmp_path: Path) -> None:
    """A gang is one job: its launcher and every member's script are below the runner, escapees too."""
    marker = f"tree-{uuid.uuid4().hex}"
    backend = ShellBackend(max_concurrent=1, kill_grace_s=KILL_GRACE_S)
    backend.configure(pb.BuildConfig(limits=pb.PodLimits(max_termination_grace_seconds=1)))
    members = []
    for rank, name in enumerate(("setsider", "forker")):
        p = hostile_pod(marker)  # rendered without the site's limit: the script's own grace is 300 s
        p["spec"]["containers"] = [{**c, "name": "main"} for c in p["spec"]["containers"] if c["name"] == name]
        job_dir = tmp_path / "jobs" / p["metadata"]["uid"]
        prepare_job_dir(job_dir, render_job({"pod": p}, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)).script)
        members.append(JobSpec(p["metadata"]["uid"], job_dir, job_dir / "job.sh", namespace="default", name=f"m{rank}"))
    gang = GangSpec(f"g-{uuid.uuid4()}", "pg", tmp_path / "gangs" / "g", tuple(members))
    await backend.start()
    try:
        await backend.submit_gang(gang)
        await until(lambda: len(job_processes(marker)) >= 4, DEADLINE_S, "every member's processes")
        await backend.cancel(JobHandle(gang.uid, gang.job_dir, gang.uid))
        took = await until(lambda: not job_processes(marker), 1 + KILL_GRACE_S + SLACK_S, "the gang's tree to end")
        print(f"cancelled gang's tree gone {took:.2f}s after the cancel returned (bound 1s + {KILL_GRACE_S}s)")
        await until(lambda: not backend._running, DEADLINE_S, "the gang's slot to be freed")
    finally:
        await backend.close()
    assert job_processes(marker) == []


@pytest.mark.parametrize(
    ("field", "patch", "limit"),
    [
        ("spec.containers[0].readinessProbe.periodSeconds", {"readinessProbe": {"periodSeconds": 4}}, "at least 5"),
        ("spec.containers[0].livenessProbe.timeoutSeconds", {"livenessProbe": {"timeoutSeconds": 61}}, "at most 60"),
        (
            "spec.containers[0].startupProbe.initialDelaySeconds",
            {"startupProbe": {"initialDelaySeconds": 3601}},
            "at most 3600",
        ),
        (
            "spec.containers[0].lifecycle.preStop.sleep.seconds",
            {"lifecycle": {"preStop": {"sleep": {"seconds": 31}}}},
            "at most 30",
        ),
        (
            "spec.containers[0].lifecycle.postStart.sleep.seconds",
            {"lifecycle": {"postStart": {"sleep": {"seconds": 31}}}},
            "at most 30",
        ),
        ("spec.activeDeadlineSeconds", {"activeDeadlineSeconds": 86401}, "at most 86400"),
    ],
)
async def test_each_time_beyond_the_site_limit_is_a_422_naming_the_field_and_the_limit(
    nats_url: str, tmp_path: Path, field: str, patch: dict[str, Any], limit: str
) -> None:
    site = {
        "minProbePeriodSeconds": 5,
        "maxProbeTimeoutSeconds": 60,
        "maxProbeInitialDelaySeconds": 3600,
        "maxHookSleepSeconds": 30,
        "maxActiveDeadlineSeconds": 86400,
    }
    async with limited_stack(nats_url, tmp_path, **site) as stack:
        p = pod(containers={"main": ["true"]})
        if "activeDeadlineSeconds" in patch:
            p["spec"].update(patch)
        else:
            probe = {"exec": {"command": ["true"]}}
            for key, value in patch.items():
                p["spec"]["containers"][0][key] = value if key == "lifecycle" else {**probe, **value}
        refused = await stack.post("/create", [create_body(p)])
        assert refused.status_code == 422, refused.text
        assert field in refused.text and limit in refused.text, refused.text
        within = pod(containers={"main": ["true"]})
        within["spec"]["terminationGracePeriodSeconds"] = 10**12  # clamped, not refused
        assert (await stack.post("/create", [create_body(within)])).status_code == 200


def test_the_grace_period_is_clamped_to_the_site_maximum_or_its_default_when_the_site_sets_none() -> None:
    p = pod(containers={"main": ["true"]})
    p["spec"]["terminationGracePeriodSeconds"] = 10**12
    default = render_job(p, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)).script
    assert "( sleep 300;" in default and str(10**12) not in default
    site = parse_build_config({"runtime": "none", "limits": {"max_termination_grace_seconds": 7}})
    assert "( sleep 7;" in render_job(p, site).script
    p["spec"]["terminationGracePeriodSeconds"] = 3  # below the limit: the pod's own
    assert "( sleep 3;" in render_job(p, site).script
