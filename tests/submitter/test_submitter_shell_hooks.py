"""Lifecycle hooks through the shell submitter (real nats-server, RPC, bash): what /status and a delete see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import wait_for
from jobs import pod_dict
from shell_submitter import final_status, uid
from shell_submitter import nc as nc
from shell_submitter import pool as pool
from shell_submitter import submitter as submitter


def job(u: str, command: str, lifecycle: dict[str, Any], **spec: Any) -> pb.JobScript:
    pod = pod_dict(u, {"main": command})
    pod["spec"]["containers"][0]["lifecycle"] = lifecycle
    pod["spec"].update(spec)
    return render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))


async def test_a_failed_post_start_reaches_status_as_the_containers_reason(
    submitter: Submitter, nc: nats.NATS, pool: str
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "exit 4"]}}}
    await client.submit(pb.SubmitRequest(job=job(u, "trap 'exit 143' TERM; while :; do sleep 0.1; done", hook)))
    st = await final_status(client, u, within=60)
    [main] = st.containers
    assert (main.reason, main.exit_code) == ("FailedPostStartHook", 143)
    assert main.message == "PostStartHookError: the postStart hook failed with exit code 4"
    assert st.state == pb.JobState.FAILED


async def test_a_delete_runs_pre_stop_before_the_term(
    submitter: Submitter, nc: nats.NATS, pool: str, tmp_path: Path
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    marks = tmp_path / "marks"
    marks.mkdir()
    noter = (
        f"trap 'if [ -e {marks}/prestop ]; then echo after > {marks}/termed; fi; exit 0' TERM; "
        f": > {marks}/up; while :; do sleep 0.1; done"
    )
    hook = {"preStop": {"exec": {"command": ["sh", "-c", f": > {marks}/prestop"]}}}
    await client.submit(pb.SubmitRequest(job=job(u, noter, hook, terminationGracePeriodSeconds=20)))

    async def up() -> bool:
        return (marks / "up").exists()

    await wait_for(up, what="the container to start")
    assert (await client.cancel(pb.CancelRequest(pod_uid=u))).found

    async def termed() -> bool:
        return (marks / "termed").exists()

    await wait_for(termed, what="the TERM after the preStop hook")
    assert (marks / "termed").read_text() == "after\n"


async def test_readiness_reaches_get_status_as_the_containers_ready(
    submitter: Submitter, nc: nats.NATS, pool: str, tmp_path: Path
) -> None:
    client = submitter_client(nc, pool)
    u = uid()
    gate = tmp_path / "ready"
    pod = pod_dict(u, {"main": "trap 'exit 0' TERM; while :; do sleep 0.1; done"})
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["test", "-e", str(gate)]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    await client.submit(pb.SubmitRequest(job=render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))))

    async def main_with(ready: bool) -> pb.ContainerStatus | None:
        st = (await client.get_status(pb.GetStatusRequest(pod_uids=[u]))).statuses[0]
        [main] = st.containers
        return main if main.phase == pb.ContainerPhase.RUNNING and main.ready is ready else None

    await wait_for(lambda: main_with(False), what="running, not ready")
    gate.touch()
    await wait_for(lambda: main_with(True), timeout=30, what="ready once the probe passes")
    gate.unlink()
    await wait_for(lambda: main_with(False), timeout=30, what="not ready again after a failure")
    await client.cancel(pb.CancelRequest(pod_uid=u))
