"""End to end over HTTP, as interLink drives it: gateway → NATS RPC → shell submitter → bash."""

from __future__ import annotations

from pathlib import Path

import pytest
from stack import create_body, eventually, full_stack, logs_body, pod, terminated


async def test_a_pod_runs_init_then_containers_and_reports_each_exit_code_and_log(
    nats_url: str, tmp_path: Path
) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(
            init={"prep": ["sh", "-c", "echo prepared > ../prep-was-here"]},
            containers={
                "one": ["sh", "-c", "echo from-one; test -f ../prep-was-here"],
                "two": ["sh", "-c", "echo from-two >&2"],
            },
        )
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 200, response.text
        created = response.json()
        assert created["PodUID"] == p["metadata"]["uid"] and created["PodJID"]

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="every container terminated")
        status = await stack.status_of(p)
        assert status["JID"] == created["PodJID"]
        assert [(c["name"], c["state"]["terminated"]["exitCode"]) for c in status["initContainers"]] == [("prep", 0)]
        assert [(c["name"], c["state"]["terminated"]["exitCode"]) for c in status["containers"]] == [
            ("one", 0),
            ("two", 0),
        ]
        one = await stack.get("/getLogs", logs_body(p, "one"))
        two = await stack.get("/getLogs", logs_body(p, "two"))
        assert one.status_code == 200 and one.text == "from-one\n"
        assert two.status_code == 200 and two.text == "from-two\n"

        deleted = await stack.post("/delete", p)
        assert deleted.status_code == 200
        after = await stack.get("/status", [p])
        assert after.status_code == 200
        assert after.json() == [], "a deleted pod is no longer reported"
        again = await stack.post("/delete", p)
        assert again.status_code == 200, "delete must be idempotent"


async def test_a_failing_container_reports_its_real_exit_code(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"ok": ["true"], "bad": ["sh", "-c", "exit 7"]})
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="containers terminated")
        codes = {c["name"]: c["state"]["terminated"]["exitCode"] for c in (await stack.status_of(p))["containers"]}
        assert codes == {"ok": 0, "bad": 7}


async def test_a_failing_init_container_stops_the_pod_and_every_container_is_terminated(
    nats_url: str, tmp_path: Path
) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        marker = tmp_path / "main-ran"
        p = pod(
            init={"prep": ["sh", "-c", "exit 3"], "never": ["touch", str(marker)]},
            containers={"main": ["touch", str(marker)]},
        )
        assert (await stack.post("/create", create_body(p))).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(p))

        await eventually(done, what="every container terminated after the init failure")
        status = await stack.status_of(p)
        init = {c["name"]: c["state"]["terminated"]["exitCode"] for c in status["initContainers"]}
        assert init["prep"] == 3
        assert init["never"] != 0
        [main] = status["containers"]
        assert main["state"]["terminated"]["exitCode"] != 0, "the VK needs a non-zero code to mark the pod Failed"
        assert not marker.exists(), "nothing after the failed init container may run"


async def test_create_accepts_the_interlink_0_4_array_and_is_idempotent(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        p = pod(containers={"main": ["true"]})
        first = await stack.post("/create", [create_body(p)])
        second = await stack.post("/create", create_body(p))
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()


async def test_ping_answers_with_the_live_pools_capacity(nats_url: str, tmp_path: Path) -> None:
    async with full_stack(nats_url, tmp_path) as stack:

        async def reported() -> bool:
            body = (await stack.get("/status", [])).json()
            return isinstance(body, dict) and "cpu" in body.get("resources", {})

        await eventually(reported, what="a PingResponse with resources")
        body = (await stack.get("/status", [])).json()
        assert body["status"] == "ok"
        assert float(body["resources"]["cpu"].rstrip("m")) > 0


@pytest.mark.parametrize("endpoint", ["/create", "/delete"])
async def test_bad_bodies_get_4xx_naming_the_field(nats_url: str, tmp_path: Path, endpoint: str) -> None:
    async with full_stack(nats_url, tmp_path) as stack:
        response = await stack.http.post(endpoint, content=b'{"pod": {"metadata": {}}}')
        assert response.status_code in (400, 422)
        assert "metadata" in response.text
