"""Pod groups end to end over HTTP, as interLink drives them: gateway (holding the members) → one SubmitGroup →
shell submitter → one launcher → every member's job script → bash."""

from __future__ import annotations

import os
import shlex
import uuid
from pathlib import Path
from typing import Any

from stack import Stack, create_body, eventually, full_stack, logs_body, pod, terminated

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def member(group: str, size: int, index: int, argv: list[str], **annotations: str) -> dict[str, Any]:
    """Member ``index`` of a Kueue plain pod group (named so that name order and index order differ)."""
    p = pod(containers={"main": argv}, name=f"{group}-{'zyxwvu'[index]}")
    p["metadata"]["labels"] = {GROUP_LABEL: group, INDEX_LABEL: str(index)}
    p["metadata"]["annotations"] = {COUNT_ANNOTATION: str(size), **annotations}
    return p


def barrier_then(barrier: Path, size: int, then: str) -> list[str]:
    """A container command that runs only once every member has started: each marks the barrier with its rank
    and waits for all ``size`` marks, so a gang whose members did not all run at once never gets past it."""
    wait = (
        f"touch {shlex.quote(str(barrier))}/$INTERLINK_GROUP_RANK; "
        f'until [ "$(ls {shlex.quote(str(barrier))} | wc -l)" -ge {size} ]; do sleep 0.05; done; '
    )
    return ["sh", "-c", wait + then]


async def create_all(stack: Stack, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        response = await stack.post("/create", create_body(p))
        assert response.status_code == 200, response.text
        assert response.json()["PodUID"] == p["metadata"]["uid"]


def exit_code(status: dict[str, Any]) -> int:
    [container] = status["containers"]
    return int(container["state"]["terminated"]["exitCode"])


async def test_a_group_runs_as_one_gang_with_ranks_peers_and_size(nats_url: str, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    group = f"g{uuid.uuid4().hex[:8]}"
    names = ("RANK", "SIZE", "NAME", "LEADER", "HOSTS")
    report = "echo " + " ".join(f"$INTERLINK_GROUP_{n}" for n in names)
    pods = [member(group, 3, i, barrier_then(barrier, 3, report)) for i in range(3)]
    async with full_stack(nats_url, tmp_path / "state") as stack:
        await create_all(stack, [pods[2], pods[0]])  # out of order; the group is not complete yet
        held = await stack.status_of(pods[0])
        assert "2 of 3" in str(held), held
        assert not any(barrier.iterdir()), "no member may start before the whole group has arrived"
        await create_all(stack, [pods[0], pods[1]])  # a retried create, then the last member

        async def all_done() -> bool:
            return all([terminated(await stack.status_of(p)) for p in pods])

        await eventually(all_done, within=60, what="every member terminated")
        host = os.uname().nodename
        for rank, p in enumerate(pods):
            assert exit_code(await stack.status_of(p)) == 0
            log = await stack.get("/getLogs", logs_body(p, "main"))
            assert log.status_code == 200, log.text
            assert log.text.split() == [str(rank), "3", group, host, ",".join([host] * 3)], log.text
        gangs = list((tmp_path / "state").rglob("gangs/*"))
        assert len(gangs) == 1, f"one job for the whole group, found {gangs}"


async def test_one_member_failing_stops_the_gang(nats_url: str, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    group = f"g{uuid.uuid4().hex[:8]}"
    pods = [member(group, 3, i, barrier_then(barrier, 3, "exit 3" if i == 1 else "exec sleep 300")) for i in range(3)]
    async with full_stack(nats_url, tmp_path / "state") as stack:
        await create_all(stack, pods)

        async def all_done() -> bool:
            return all([terminated(await stack.status_of(p)) for p in pods])

        await eventually(all_done, within=90, what="the whole gang ended after one member failed")
        codes = [exit_code(await stack.status_of(p)) for p in pods]
        assert codes == [143, 3, 143], codes


async def test_deleting_one_running_member_ends_the_gang(nats_url: str, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    group = f"g{uuid.uuid4().hex[:8]}"
    pods = [member(group, 2, i, barrier_then(barrier, 2, "exec sleep 300")) for i in range(2)]
    async with full_stack(nats_url, tmp_path / "state") as stack:
        await create_all(stack, pods)

        async def both_marked() -> bool:
            return len(list(barrier.iterdir())) == 2

        await eventually(both_marked, within=60, what="both members running")
        assert (await stack.post("/delete", pods[0])).status_code == 200

        async def other_ended() -> bool:
            return terminated(await stack.status_of(pods[1]))

        await eventually(other_ended, within=60, what="the other member ended with its gang")
        assert (await stack.post("/delete", pods[1])).status_code == 200
        mark = f"INTERLINK_GROUP_NAME={group}".encode()

        async def none_left() -> bool:
            return not [pid for pid in os.listdir("/proc") if pid.isdigit() and mark in _environ(pid)]

        await eventually(none_left, within=60, what="no process of the gang left")


def _environ(pid: str) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []
