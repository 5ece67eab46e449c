"""Pod groups through a real gateway (real nats-server and redis-server): members held until the whole group has
arrived, then ONE SubmitGroup to the pool's stand-in submitter (tests/harness/gang_standin.py); restarts, timeouts,
refusals and malformed groups."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
from conftest import RedisServer, free_port
from gang_standin import UNAVAILABLE, serving_standins
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_pod_uid
from interlink_nats.services.scripts.pod_group import (
    COMPLETION_INDEX,
    FAILURE_POLICY_ANNOTATION,
    GROUP_NAME_LABEL,
    GROUP_TOTAL_ANNOTATION,
)
from processes import Proc, wait_healthy
from stack import Stack, create_body, eventually, gateway_only, logs_body, new_pool, pod


def member(
    group: str, name: str, total: int = 4, *, index: int | None = None, pool: str | None = None
) -> dict[str, Any]:
    p = pod(name=name, containers={"main": ["true"]}, pool=pool)
    p["metadata"]["labels"] = {GROUP_NAME_LABEL: group}
    p["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: str(total)}
    if index is not None:
        p["metadata"]["labels"][COMPLETION_INDEX] = str(index)
    return p


def new_group() -> str:
    return f"g{uuid.uuid4().hex[:8]}"


async def create(stack: Stack, p: dict[str, Any]) -> str:
    response = await stack.post("/create", create_body(p))
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["PodUID"] == p["metadata"]["uid"]
    return str(reply["PodJID"])


def waiting(status: dict[str, Any]) -> dict[str, Any]:
    [container] = status["containers"]
    return dict(container["state"]["waiting"])


async def statuses(stack: Stack, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod's status, in the pods' order (one /status call, as interLink makes it)."""
    response = await stack.get("/status", pods)
    assert response.status_code == 200, response.text
    by_uid = {s["UID"]: s for s in response.json()}
    return [by_uid[p["metadata"]["uid"]] for p in pods]


def uids(request: pb.SubmitGroupRequest) -> list[str]:
    return [m.pod.uid for m in request.members if m.pod]


async def test_members_out_of_order_and_twice_make_one_submit_group_ranked_by_completion_index(nats_url: str) -> None:
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", index=i) for i in range(4)]
    async with serving_standins(nats_url, pool) as [standin], gateway_only(nats_url, default_pool=pool) as stack:
        jid = await create(stack, pods[2])
        assert jid == f"held:default/{group}"
        await create(stack, pods[0])
        assert await create(stack, pods[0]) == jid  # interLink retried: still one member
        assert waiting(await stack.status_of(pods[0])) == {  # the arriving member's status: at once
            "reason": "PodGroupWaiting",
            "message": f"waiting for pod group default/{group}: 2 of 4 members have arrived",
        }

        async def counted() -> bool:  # the others': at the next sweep tick (an arrival writes one status)
            return waiting(await stack.status_of(pods[2])) == {
                "reason": "PodGroupWaiting",
                "message": f"waiting for pod group default/{group}: 2 of 4 members have arrived",
            }

        await eventually(counted, what="the first member's status to count the second")
        logs = await stack.get("/getLogs", logs_body(pods[0], "main"))
        assert logs.status_code == 409 and "2 of 4" in logs.text
        await create(stack, pods[3])
        await create(stack, pods[1])
        request = await standin.next_request()
        assert uids(request) == [p["metadata"]["uid"] for p in pods]  # ranked by completion index
        gangs = [m.gang for m in request.members]
        assert [g.rank for g in gangs if g] == [0, 1, 2, 3]
        assert gangs[0] is not None and is_pod_uid(gangs[0].group_uid)
        assert {(g.size, g.group_name, g.group_uid) for g in gangs if g} == {(4, group, gangs[0].group_uid)}
        assert all(g is not None and g.failure_policy == pb.GangFailurePolicy.FAIL_GANG for g in gangs)

        async def recorded() -> bool:
            return all(s["JID"] == "gang-1" for s in await statuses(stack, pods))

        await eventually(recorded, what="every member to carry the gang's job id")
        assert waiting(await stack.status_of(pods[0]))["reason"] == "Submitted"
        assert len(standin.requests) == 1
        assert stack.gateway.groups.held.groups == {}


async def test_without_a_completion_index_members_rank_by_pod_name_and_the_policy_travels(nats_url: str) -> None:
    pool, group = new_group(), new_group()
    pods = [member(group, name, total=3) for name in ("c", "a", "b")]
    for p in pods:
        p["metadata"]["annotations"][FAILURE_POLICY_ANNOTATION] = "Continue"
    async with serving_standins(nats_url, pool) as [standin], gateway_only(nats_url, default_pool=pool) as stack:
        for p in pods:
            await create(stack, p)
        request = await standin.next_request()
        assert [m.pod.name for m in request.members if m.pod] == ["a", "b", "c"]
        assert all(m.gang and m.gang.failure_policy == pb.GangFailurePolicy.CONTINUE for m in request.members)


async def test_held_members_survive_a_gateway_restart(nats_url: str, redis_server: RedisServer) -> None:
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", index=i) for i in range(4)]
    durable = f"gw-{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = {"default_pool": pool, "redis_url": redis_server.url, "durable": durable}
    async with serving_standins(nats_url, pool) as [standin]:
        async with gateway_only(nats_url, **settings) as stack:
            await create(stack, pods[3])
            await create(stack, pods[1])
        async with gateway_only(nats_url, **settings) as stack:
            message = waiting(await stack.status_of(pods[1]))["message"]
            assert message.endswith("2 of 4 members have arrived")
            await create(stack, pods[0])
            await create(stack, pods[2])
            request = await standin.next_request()
            assert uids(request) == [p["metadata"]["uid"] for p in pods]
            assert len(standin.requests) == 1


async def test_a_complete_group_not_yet_sent_is_sent_after_a_restart(nats_url: str, redis_server: RedisServer) -> None:
    """The pool was down when the last member came: the group stays held (in redis) and the next gateway sends it."""
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", total=2) for i in range(2)]
    settings: dict[str, Any] = {"default_pool": pool, "redis_url": redis_server.url}
    settings["durable"] = f"gw-{uuid.uuid4().hex[:8]}"
    async with serving_standins(nats_url, pool) as [standin]:
        standin.refuse = UNAVAILABLE
        async with gateway_only(nats_url, **settings) as stack:
            for p in pods:
                await create(stack, p)
            await standin.next_request()  # tried, and failed: retried with back-off while this gateway runs
        standin.refuse = None
        before = len(standin.requests)
        async with gateway_only(nats_url, **settings) as stack:
            request = await standin.next_request(after=before)
            assert uids(request) == [p["metadata"]["uid"] for p in pods]

            async def recorded() -> bool:
                return all(s["JID"].startswith("gang-") for s in await statuses(stack, pods))

            await eventually(recorded, what="the members to carry the gang's job id")


async def test_a_group_that_never_completes_fails_its_members(nats_url: str) -> None:
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", total=3) for i in range(2)]
    async with (
        serving_standins(nats_url, pool) as [standin],
        gateway_only(nats_url, default_pool=pool, group_wait_s=1.0) as stack,
    ):
        for p in pods:
            await create(stack, p)

        async def failed() -> bool:
            return all("terminated" in s["containers"][0]["state"] for s in await statuses(stack, pods))

        await eventually(failed, what="the waiting members to fail")
        for p in pods:
            terminated = (await stack.status_of(p))["containers"][0]["state"]["terminated"]
            assert terminated["reason"] == "PodGroupIncomplete"
            assert terminated["message"] == f"pod group default/{group}: only 2 of 3 members arrived within 1 s"
            assert terminated["exitCode"] != 0
        assert standin.requests == []
        assert (await stack.post("/delete", pods[0])).status_code == 200
        assert standin.cancels == []  # never submitted: nothing to cancel at the pool


async def test_a_pool_refusing_the_group_fails_every_member_with_its_message(nats_url: str) -> None:
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", total=2) for i in range(2)]
    async with serving_standins(nats_url, pool) as [standin], gateway_only(nats_url, default_pool=pool) as stack:
        standin.refuse = GRPCError(Status.FAILED_PRECONDITION, "backend htcondor does not run pod groups")
        for p in pods:
            await create(stack, p)

        async def failed() -> bool:
            return all("terminated" in s["containers"][0]["state"] for s in await statuses(stack, pods))

        await eventually(failed, what="the members to fail")
        for p in pods:
            terminated = (await stack.status_of(p))["containers"][0]["state"]["terminated"]
            assert terminated["reason"] == "PodGroupRejected"
            assert "backend htcondor does not run pod groups" in terminated["message"] and pool in terminated["message"]
        assert len(standin.requests) == 1  # a refusal is not retried


async def test_a_reply_without_a_job_id_is_not_taken_for_a_submission(nats_url: str) -> None:
    """A pool answering SubmitGroup with no job id breaks the contract: the group is sent again until its wait
    ends, then its members fail as unavailable, never left recorded as sent with no job to follow."""
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", total=2) for i in range(2)]
    async with (
        serving_standins(nats_url, pool) as [standin],
        gateway_only(nats_url, default_pool=pool, group_wait_s=1.5) as stack,
    ):
        standin.without_job_id = True
        for p in pods:
            await create(stack, p)

        async def failed() -> bool:
            return all("terminated" in s["containers"][0]["state"] for s in await statuses(stack, pods))

        await eventually(failed, what="the members to fail")
        for p in pods:
            terminated = (await stack.status_of(p))["containers"][0]["state"]["terminated"]
            assert terminated["reason"] == "PodGroupUnavailable", terminated
            assert "without a job_id" in terminated["message"]
        assert len(standin.requests) >= 2, "retried as transient"


async def test_members_of_one_group_in_two_pools_are_refused_naming_both(nats_url: str) -> None:
    first, second, group = new_pool(), new_pool(), new_group()
    async with serving_standins(nats_url, first, second), gateway_only(nats_url, default_pool=None) as stack:
        await create(stack, member(group, "w-0", pool=first))
        response = await stack.post("/create", create_body(member(group, "w-1", pool=second)))
        assert response.status_code == 422
        assert all(word in response.text for word in (first, second, "w-0", "w-1"))
        other_count = await stack.post("/create", create_body(member(group, "w-2", total=5, pool=first)))
        assert other_count.status_code == 422 and GROUP_TOTAL_ANNOTATION in other_count.text


async def test_malformed_group_labels_and_annotations_are_a_422_naming_them(nats_url: str) -> None:
    pool, group = new_pool(), new_group()
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool) as stack:
        bad_count = member(group, "a")
        bad_count["metadata"]["annotations"][GROUP_TOTAL_ANNOTATION] = "four"
        bad_policy = member(group, "b")
        bad_policy["metadata"]["annotations"][FAILURE_POLICY_ANNOTATION] = "Sometimes"
        no_count = member(group, "c")
        del no_count["metadata"]["annotations"][GROUP_TOTAL_ANNOTATION]
        for p, words in (
            (bad_count, [GROUP_TOTAL_ANNOTATION, "four"]),
            (bad_policy, [FAILURE_POLICY_ANNOTATION, "FailGang or Continue"]),
            (no_count, [GROUP_TOTAL_ANNOTATION, "required"]),
        ):
            response = await stack.post("/create", create_body(p))
            assert response.status_code == 422, response.text
            assert all(word in response.text for word in words), response.text
        assert stack.gateway.groups.held.groups == {}


async def test_a_deleted_held_member_leaves_the_group_which_waits_for_a_replacement(nats_url: str) -> None:
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", total=2) for i in range(3)]
    async with serving_standins(nats_url, pool) as [standin], gateway_only(nats_url, default_pool=pool) as stack:
        await create(stack, pods[0])
        assert (await stack.post("/delete", pods[0])).status_code == 200
        assert await stack.get("/status", [pods[0]]) and (await stack.get("/status", [pods[0]])).json() == []
        await create(stack, pods[1])
        assert waiting(await stack.status_of(pods[1]))["message"].endswith("1 of 2 members have arrived")
        await create(stack, pods[2])
        request = await standin.next_request()
        assert uids(request) == [pods[1]["metadata"]["uid"], pods[2]["metadata"]["uid"]]


async def test_held_members_survive_a_kill_9_of_the_gateway(
    nats_url: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The gateway process killed with two of four members held: the next one still holds them and sends all four."""
    pool, group = new_pool(), new_group()
    pods = [member(group, f"w-{i}", index=i) for i in range(4)]
    port = free_port()
    args = ["gateway", "--nats-url", nats_url, "--port", str(port), "--redis-url", redis_server.url]
    args += ["--default-pool", pool]
    gateway = Proc(args, {"INTERLINK_GATEWAY_EVENTS_DURABLE": f"gw-{uuid.uuid4().hex[:8]}"}, tmp_path / "gw.log")
    async with (
        serving_standins(nats_url, pool) as [standin],
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):
        try:
            gateway.start()
            await wait_healthy(http)
            for p in (pods[1], pods[2]):
                assert (await http.post("/create", json=create_body(p))).status_code == 200
            gateway.kill()
            gateway.start()
            await wait_healthy(http)
            [held] = (await http.request("GET", "/status", json=[pods[2]])).json()
            assert held["containers"][0]["state"]["waiting"]["message"].endswith("2 of 4 members have arrived")
            for p in (pods[3], pods[0]):
                assert (await http.post("/create", json=create_body(p))).status_code == 200
            request = await standin.next_request()
            assert uids(request) == [p["metadata"]["uid"] for p in pods]
        finally:
            gateway.stop()
