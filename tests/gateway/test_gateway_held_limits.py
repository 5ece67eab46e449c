"""Held pod-group members are bounded: a member too large for NATS is a 413 as a standalone
pod is, the site's limits on group size and on what a namespace (and the gateway) holds answer 422/429 naming the
setting, and the group key cannot be shared by two groups. Real gateway, nats-server and redis; the pool is the
gang stand-in (tests/harness/gang_standin.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from conftest import RedisServer
from gang_standin import serving_standins
from hypothesis import given
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_label_value
from interlink_nats.services.gateway import pod_group as groups
from interlink_nats.services.gateway.group_store import REDIS_GROUPS_KEY, PodGroupStore
from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupMember
from interlink_nats.services.gateway.settings import GatewaySettings
from interlink_nats.services.scripts.pod_group import GROUP_NAME_LABEL, GROUP_TOTAL_ANNOTATION
from pydantic import ValidationError
from stack import Stack, create_body, eventually, gateway_only, new_pool, pod


def member(group: str, name: str, total: int = 2, *, namespace: str = "default", blob: int = 0) -> dict[str, Any]:
    """A member of ``group``; ``blob``: a ConfigMap file of that many bytes embedded in its job."""
    p = pod(name=name, containers={"main": ["true"]})
    p["metadata"]["namespace"] = namespace
    p["metadata"]["labels"] = {GROUP_NAME_LABEL: group}
    p["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: str(total)}
    if blob:
        p["spec"]["volumes"] = [{"name": "data", "configMap": {"name": "big"}}]
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return p


def body(p: dict[str, Any], blob: int = 0) -> dict[str, Any]:
    data = create_body(p)
    if blob:
        data["container"][0]["configMaps"] = [{"metadata": {"name": "big"}, "data": {"blob": "x" * blob}}]
    return data


def new_group() -> str:
    return f"g{uuid.uuid4().hex[:8]}"


async def create(stack: Stack, p: dict[str, Any], blob: int = 0) -> tuple[int, str]:
    response = await stack.post("/create", body(p, blob))
    return response.status_code, response.text


# --- too large, too many, too much ----------------------------------------------------------------------


async def test_a_held_member_too_large_for_nats_is_a_413_as_a_standalone_pod_is(nats_url: str) -> None:
    """Before: held (and mirrored to redis) at any size up to max_body_bytes; its group failed only when sent."""
    pool = new_pool()
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool) as stack:
        limit = stack.gateway.nc.max_payload
        p = member(new_group(), "w-0", blob=limit + 1)
        code, text = await create(stack, p, blob=limit + 1)
        assert code == 413, text
        assert "max_payload" in text and str(limit) in text
        assert stack.gateway.groups.held.groups == {} and stack.gateway.store.get(p["metadata"]["uid"]) is None


async def test_a_group_larger_than_the_sites_limit_is_a_422_naming_the_annotation_and_the_setting(
    nats_url: str,
) -> None:
    pool = new_pool()
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool, max_group_size=8) as stack:
        code, text = await create(stack, member(new_group(), "w-0", total=9))
        assert code == 422, text
        assert GROUP_TOTAL_ANNOTATION in text and "max_group_size" in text and "9" in text and "8" in text
        assert (await create(stack, member(new_group(), "w-0", total=8)))[0] == 200


async def test_a_namespace_past_its_held_members_gets_a_429_other_namespaces_do_not(nats_url: str) -> None:
    """Before: no cap. Now a namespace's waiting groups may declare so many members in all; a group's first member
    takes the whole group's seats, so its later members always fit, and the seats come back once it is sent."""
    pool = new_pool()
    limits = {"max_group_size": 2, "max_held_members_per_namespace": 3}
    async with (
        serving_standins(nats_url, pool) as [standin],
        gateway_only(nats_url, default_pool=pool, **limits) as stack,
    ):
        first, second = new_group(), new_group()
        assert (await create(stack, member(first, "a-0")))[0] == 200
        late = member(second, "b-0")
        code, text = await create(stack, late)
        assert code == 429, text
        assert "max_held_members_per_namespace" in text and "namespace default" in text and "b-0" in text
        assert (await create(stack, member(second, "b-0", namespace="other")))[0] == 200
        assert (await create(stack, member(first, "a-1")))[0] == 200  # completes its group: never refused
        await standin.next_request()

        async def sent() -> bool:
            return stack.gateway.groups.held.usage("default").members == 0

        await eventually(sent, what="the complete group sent and forgotten")
        assert (await create(stack, late))[0] == 200
        assert (await create(stack, late))[0] == 200, "a retried create of a held member is answered as before"


async def test_held_bytes_are_bounded_per_namespace_and_in_total_with_a_429(nats_url: str) -> None:
    """Before: 25 members of 8 MB were held (gateway 101 → 345 MB); now the bytes a namespace and all of them
    may hold are site settings."""
    pool = new_pool()
    limits = {"max_held_bytes_per_namespace": 300_000, "max_held_bytes": 500_000}
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool, **limits) as stack:
        blob = 200_000
        assert (await create(stack, member(new_group(), "a", blob=blob), blob=blob))[0] == 200
        held = stack.gateway.groups.held.bytes_total
        assert blob < held < 300_000
        assert f"interlink_gateway_pod_group_bytes_held {float(held)}" in (await stack.http.get("/metrics")).text
        code, text = await create(stack, member(new_group(), "b", blob=blob), blob=blob)
        assert code == 429, text
        assert "max_held_bytes_per_namespace" in text
        assert (await create(stack, member(new_group(), "c", namespace="ns-2", blob=blob), blob=blob))[0] == 200
        code, text = await create(stack, member(new_group(), "d", namespace="ns-3", blob=blob), blob=blob)
        assert code == 429, text
        assert "(setting max_held_bytes)" in text
        assert (await create(stack, member(new_group(), "e", namespace="ns-3")))[0] == 200  # a small one fits


def test_a_namespace_limit_below_the_group_size_is_a_settings_error() -> None:
    with pytest.raises(ValidationError, match="max_held_members_per_namespace"):
        GatewaySettings(max_group_size=64, max_held_members_per_namespace=10)


async def test_what_is_held_is_counted_per_namespace_as_members_come_and_go() -> None:
    held = PodGroupStore()

    def group(namespace: str, name: str, *sizes: int) -> PodGroup:
        g = PodGroup(namespace, name, "a", 9, 0, 0.0)
        for i, size in enumerate(sizes):
            g.members[f"{name}-{i}"] = PodGroupMember(f"{name}-{i}", f"p{i}", None, pb.JobScript(), b"x" * size)
        return g

    first = group("ns", "one", 10, 20)
    await held.put(first)
    await held.put(group("ns", "two", 5))
    await held.put(group("other", "three", 100))
    assert held.usage("ns") == groups.PodGroupUsage(18, 35, 135)  # two groups of 9 seats
    first.members["one-2"] = PodGroupMember(
        "one-2", "p2", None, pb.JobScript(), b"x" * 7
    )  # a new arrival changes it in place
    await held.put(first)
    assert held.usage("ns") == groups.PodGroupUsage(18, 42, 142)
    await held.release("one-0")
    assert held.usage("ns") == groups.PodGroupUsage(18, 32, 132)
    await held.drop(groups.group_key("other", "three"))
    await held.drop(groups.group_key("ns", "two"))
    await held.drop(groups.group_key("ns", "one"))
    assert held.usage("ns") == groups.PodGroupUsage(0, 0, 0) and held.bytes_total == 0


# --- group names and keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["y/z", "g\nid > /tmp/x #", "g\x00", "a" * 64, "x" * 5000, "-g", "g.", "g h", "lab-$(id)", "ünï"],
)
async def test_a_group_name_kubernetes_would_refuse_as_a_label_value_is_a_422_naming_the_label(
    nats_url: str, name: str
) -> None:
    pool = new_pool()
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool) as stack:
        code, text = await create(stack, member(name, "w-0"))
        assert code == 422, text
        assert f'metadata.labels["{GROUP_NAME_LABEL}"]' in text and "label value" in text
        assert "\n" not in text.strip()
        assert stack.gateway.groups.held.groups == {}
        assert (await create(stack, member("a" * 63, "w-1")))[0] == 200  # the longest a label value may be


async def test_groups_whose_namespace_and_name_join_alike_are_two_groups(nats_url: str) -> None:
    """Before: ``x`` + ``y/z`` and ``x/y`` + ``z`` were both ``x/y/z`` and ran as one gang. Both are refused at the
    door now (a group name and a namespace hold no '/'); the key is one-to-one even without that check (below)."""
    pool = new_pool()
    async with serving_standins(nats_url, pool), gateway_only(nats_url, default_pool=pool) as stack:
        code, text = await create(stack, member("y/z", "a", namespace="x"))
        assert code == 422 and "pod-group-name" in text, text
        code, text = await create(stack, member("z", "b", namespace="x/y"))
        assert code == 422 and "metadata.namespace" in text, text
        assert (await create(stack, member("y-z", "c", namespace="x")))[0] == 200
        assert (await create(stack, member("y-z", "d", namespace="x-y")))[0] == 200
        assert len(stack.gateway.groups.held.groups) == 2


@given(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6), st.text(max_size=6))
def test_the_group_key_is_one_to_one(ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
    same_key = groups.group_key(ns_a, name_a) == groups.group_key(ns_b, name_b)
    assert same_key == ((ns_a, name_a) == (ns_b, name_b))


def test_a_valid_group_keeps_the_key_and_jid_it_always_had() -> None:
    assert groups.group_key("team-a", "train.v2_x") == "team-a/train.v2_x"
    assert groups.held_jid(groups.group_key("team-a", "train")) == "held:team-a/train"
    assert groups.group_key("x", "y/z") != groups.group_key("x/y", "z")


@given(st.text(max_size=70))
def test_is_label_value_is_kubernetes_rule(value: str) -> None:
    """apimachinery IsValidLabelValue: ≤ 63, ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``, ASCII only."""
    alnum = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    expected = value == "" or (
        len(value) <= 63 and value[0] in alnum and value[-1] in alnum and set(value) <= alnum | set("-_.")
    )
    assert is_label_value(value) == expected
    assert not is_label_value(value + "\n") or value + "\n" == ""


async def test_a_group_stored_under_an_old_ambiguous_key_is_read_and_moved_to_its_own(
    redis_server: RedisServer,
) -> None:
    """Groups an older gateway wrote under ``<namespace>/<name>`` unescaped load, and are rewritten under their
    key once (a valid name's key is the same, so it stays where it is)."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_server.url)
    key = f"{REDIS_GROUPS_KEY}:{uuid.uuid4().hex[:8]}"
    try:
        job = bytes(pb.JobScript(script="true"))
        odd, plain = PodGroup("x/y", "z", "a", 2, 0, 1.0), PodGroup("ns", "train", "a", 2, 0, 1.0)
        for g in (odd, plain):
            g.members["u-" + g.name] = PodGroupMember("u-" + g.name, "w-0", None, pb.JobScript.parse(job), job)
            await client.hset(key, f"{g.namespace}/{g.name}", g.to_json())
        held = PodGroupStore(client, key=key)
        assert await held.load() == 2
        assert set(held.groups) == {"x%2Fy/z", "ns/train"}
        stored = await client.hgetall(key)
        assert set(stored) == {b"x%2Fy/z", b"ns/train"}
        assert json.loads(stored[b"x%2Fy/z"])["namespace"] == "x/y"
        await held.drop("x%2Fy/z")
        assert set(await client.hgetall(key)) == {b"ns/train"}
    finally:
        await client.delete(key)
        await client.aclose()
