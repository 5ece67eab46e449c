"""A Kubernetes Job's pods coalesced into arrays, end to end over HTTP as interLink drives them: gateway (the array
policy holding them for its window) → one SubmitGroup of kind ARRAY → shell submitter → each member its own job.

What is counted: the arrays the submitter got (each array's member list in its state directory, written once per
submission, in task order), and what each pod's container really did.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from conftest import RedisServer
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.runtime import Submitter
from stack import Stack, create_body, eventually, full_stack, gateway_only, logs_body, new_pool, pod, submitter_settings
from stack import terminated as ended

UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def job_pod(job: str, job_uid: str, index: int, argv: list[str], *, pool: str | None = None) -> dict[str, Any]:
    """Pod ``index`` of Indexed Job ``job``, as the Job controller labels it (its own env: the index)."""
    p = pod(containers={"main": argv}, name=f"{job}-{index}-x{uuid.uuid4().hex[:4]}", pool=pool, env={"I": str(index)})
    p["metadata"]["labels"] = {UID_LABEL: job_uid, NAME_LABEL: job, INDEX_LABEL: str(index)}
    return p


def uid_of(p: dict[str, Any]) -> str:
    return str(p["metadata"]["uid"])


async def create(stack: Stack, p: dict[str, Any]) -> None:
    response = await stack.post("/create", create_body(p))
    assert response.status_code == 200, response.text
    assert response.json()["PodUID"] == uid_of(p) and response.json()["PodJID"]


def arrays(state: Path) -> list[list[str]]:
    """Every array the submitter was sent: its members' pod uids in task order."""
    return sorted(((d / "members").read_text().split() for d in (state / "arrays").glob("*")), key=len)


async def arrays_sent(state: Path, n: int) -> list[list[str]]:
    async def done() -> bool:
        return (state / "arrays").is_dir() and len(arrays(state)) >= n

    await eventually(done, within=60, what=f"{n} arrays sent")
    return arrays(state)


async def all_ended(stack: Stack, pods: list[dict[str, Any]], within: float = 120) -> None:
    async def check() -> bool:
        return all([ended(await stack.status_of(p)) for p in pods])

    await eventually(check, within=within, what="every pod terminated")


async def gauges(stack: Stack) -> dict[str, float]:
    """The gateway's unlabelled gauges, scraped from ``/metrics`` as Prometheus does."""
    response = await stack.http.get("/metrics")
    assert response.status_code == 200
    out = {}
    for line in response.text.splitlines():
        if line.startswith("interlink_gateway_") and "{" not in line:
            name, value = line.split()
            out[name] = float(value)
    return out


def exit_code(status: dict[str, Any]) -> int:
    [container] = status["containers"]
    return int(container["state"]["terminated"]["exitCode"])


async def test_an_indexed_job_of_20_pods_is_one_array_each_pod_its_own_logs_and_status(
    nats_url: str, tmp_path: Path
) -> None:
    job, job_uid = "scan", str(uuid.uuid4())
    argv = ["sh", "-c", 'echo "index $I"; [ "$I" != 7 ]']  # index 7 fails, alone
    pods = [job_pod(job, job_uid, i, argv) for i in range(20)]
    state = tmp_path / "state"
    async with full_stack(nats_url, state, array_window_s=60, array_max_wait_s=60, array_max_count=20) as stack:
        for p in reversed(pods):  # out of order: the tasks are in completion-index order all the same
            await create(stack, p)
        [sent] = await arrays_sent(state, 1)
        assert sent == [uid_of(p) for p in pods], "one array, its tasks in completion-index order"
        await all_ended(stack, pods)
        for i, p in enumerate(pods):
            status = await stack.status_of(p)
            assert exit_code(status) == (1 if i == 7 else 0), (i, status)
            log = await stack.get("/getLogs", logs_body(p, "main"))
            assert log.status_code == 200 and log.text == f"index {i}\n", log.text
        assert len(arrays(state)) == 1, "exactly one submission"


async def test_deleting_one_pod_of_an_array_cancels_only_it(nats_url: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    started.mkdir()
    job_uid = str(uuid.uuid4())
    pods = [job_pod("sleepy", job_uid, i, ["sh", "-c", f"touch {started}/$I; exec sleep 300"]) for i in range(2)]
    state = tmp_path / "state"
    async with full_stack(nats_url, state, array_window_s=60, array_max_wait_s=60, array_max_count=2) as stack:
        for p in pods:
            await create(stack, p)

        async def both_running() -> bool:
            return len(list(started.iterdir())) == 2

        await eventually(both_running, within=60, what="both tasks running")
        assert (await stack.post("/delete", pods[0])).status_code == 200

        async def first_gone() -> bool:
            return not (state / "jobs" / uid_of(pods[0])).exists()

        await eventually(first_gone, within=60, what="the deleted pod's job stopped and removed")

        async def other_running() -> bool:
            return "running" in (await stack.status_of(pods[1]))["containers"][0]["state"]

        await eventually(other_running, within=60, what="the other pod still running")
        assert (started / "1").exists() and not ended(await stack.status_of(pods[1]))
        assert (await stack.post("/delete", pods[1])).status_code == 200


async def test_the_window_bounds_an_array_in_time_and_count_and_later_pods_form_the_next(
    nats_url: str, tmp_path: Path
) -> None:
    job_uid = str(uuid.uuid4())
    pods = [job_pod("win", job_uid, i, ["true"]) for i in range(7)]
    state = tmp_path / "state"
    async with full_stack(nats_url, state, array_window_s=1.0, array_max_count=3) as stack:
        for p in pods[:4]:  # the third fills the first array (sent at once); the fourth opens the next
            await create(stack, p)
        first = await arrays_sent(state, 2)  # the second is sent when its window closes, alone
        assert sorted(first, key=lambda a: a[0] != uid_of(pods[0])) == [
            [uid_of(p) for p in pods[:3]],
            [uid_of(pods[3])],
        ]
        for p in pods[4:]:  # after the window: the next array
            await create(stack, p)
        every = await arrays_sent(state, 3)
        assert [uid_of(p) for p in pods[4:]] in every
        await all_ended(stack, pods)


async def test_pods_of_two_jobs_interleaved_form_one_array_each(nats_url: str, tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    pods_a = [job_pod("ja", a, i, ["true"]) for i in range(3)]
    pods_b = [job_pod("jb", b, i, ["true"]) for i in range(3)]
    state = tmp_path / "state"
    async with full_stack(nats_url, state, array_window_s=60, array_max_wait_s=60, array_max_count=3) as stack:
        for pa, pb_ in zip(pods_a[:2], pods_b[:2], strict=True):
            await create(stack, pa)
            await create(stack, pb_)
        forming = await gauges(stack)
        assert (forming["interlink_gateway_arrays_forming"], forming["interlink_gateway_array_members_held"]) == (2, 4)
        assert forming["interlink_gateway_array_bytes_held"] > 0
        assert forming["interlink_gateway_pod_groups_held"] == 0, "arrays are not counted as pod groups"
        await create(stack, pods_a[2])
        await create(stack, pods_b[2])
        sent = await arrays_sent(state, 2)

        async def none_forming() -> bool:
            return (await gauges(stack))["interlink_gateway_array_members_held"] == 0

        await eventually(none_forming, within=30, what="the held gauges back to 0 once both arrays were sent")
        assert sorted(sent) == sorted([[uid_of(p) for p in pods_a], [uid_of(p) for p in pods_b]])
        await all_ended(stack, pods_a + pods_b)


async def test_one_jobs_pods_for_two_pools_form_one_array_per_pool(nats_url: str, tmp_path: Path) -> None:
    job_uid = str(uuid.uuid4())
    other = new_pool()
    async with (
        full_stack(nats_url, tmp_path / "one", array_window_s=60, array_max_wait_s=60, array_max_count=2) as stack,
        Submitter(submitter_settings(nats_url, other, tmp_path / "two")),
    ):
        pods = [job_pod("split", job_uid, i, ["true"], pool=other if i % 2 else None) for i in range(4)]
        for p in pods:
            await create(stack, p)
        [here] = await arrays_sent(tmp_path / "one", 1)
        [there] = await arrays_sent(tmp_path / "two", 1)
        assert here == [uid_of(pods[0]), uid_of(pods[2])] and there == [uid_of(pods[1]), uid_of(pods[3])]
        await all_ended(stack, pods)


async def test_a_gateway_restart_while_an_array_forms_loses_nothing_and_sends_it_once(
    nats_url: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    pool = new_pool()
    job_uid = str(uuid.uuid4())
    pods = [job_pod("again", job_uid, i, ["sh", "-c", "echo $I"]) for i in range(3)]
    state = tmp_path / "state"
    settings: dict[str, Any] = {
        "default_pool": pool,
        "redis_url": redis_server.url,
        "durable": f"gw-{uuid.uuid4().hex[:8]}",
        "array_window_s": 60,
        "array_max_wait_s": 60,
        "array_max_count": 3,
    }
    async with Submitter(submitter_settings(nats_url, pool, state)):
        async with gateway_only(nats_url, **settings) as stack:
            await create(stack, pods[0])
            await create(stack, pods[1])
            assert not (state / "arrays").exists(), "still forming: nothing sent"
        async with gateway_only(nats_url, **settings) as stack:
            held = await stack.status_of(pods[1])
            assert "array" in str(held), held
            await create(stack, pods[2])
            [sent] = await arrays_sent(state, 1)
            assert sent == [uid_of(p) for p in pods]
            await all_ended(stack, pods)
            for i, p in enumerate(pods):
                log = await stack.get("/getLogs", logs_body(p, "main"))
                assert log.text == f"{i}\n"
        assert len(arrays(state)) == 1, "sent once"


async def test_a_pool_whose_backend_takes_no_arrays_gets_each_pod_at_once(nats_url: str, tmp_path: Path) -> None:
    class NoArrays(ShellBackend):
        """The shell backend as a backend without ``RunsArrays`` looks (its BuildConfig says no arrays)."""

        submit_array = None  # type: ignore[assignment]

    pool = new_pool()
    state = tmp_path / "state"
    pods = [job_pod("plain", str(uuid.uuid4()), i, ["true"]) for i in range(3)]
    async with (
        Submitter(submitter_settings(nats_url, pool, state), backend=NoArrays(kill_grace_s=3.0)),
        gateway_only(nats_url, default_pool=pool, array_window_s=60, array_max_wait_s=60) as stack,
    ):
        for p in pods:
            await create(stack, p)
            assert (await stack.post("/create", create_body(p))).json()["PodJID"] == uid_of(p), "submitted alone"
        await all_ended(stack, pods)  # long before the 60 s window would have closed
        assert not (state / "arrays").exists()
