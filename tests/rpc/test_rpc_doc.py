"""docs/rpc.md's wire examples, replayed byte for byte against a real submitter with a plain NATS client.

The page is the contract for clients in other languages: each ``wire`` box is parsed here and sent as
raw NATS messages (no project code on the client side); every reply must match the box exactly (subject,
headers, body bytes) and nothing else may arrive. ``{control}`` binds to the open message's control subject.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.api
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for, wait_for
from jobs import pod_job
from typer.testing import CliRunner

DOC = Path(__file__).resolve().parents[2] / "docs" / "rpc.md"
FIRST = "00000000-0000-4000-8000-000000000001"
SECOND = "00000000-0000-4000-8000-000000000002"


@dataclass
class Step:
    outgoing: bool
    subject: str
    reply: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    json_subset: dict[str, Any] | None = None
    json_absent: list[str] = field(default_factory=list)


def examples(text: str) -> list[list[Step]]:
    """Every ```wire box of the page, as steps."""
    boxes = re.findall(r"```wire\n(.*?)```", text, flags=re.S)
    parsed = []
    for box in boxes:
        steps: list[Step] = []
        for line in box.splitlines():
            if line.startswith(("→ ", "← ")):
                subject, _, reply = line[2:].partition(" reply=")
                steps.append(Step(line.startswith("→"), subject.strip(), reply.strip() or None))
            elif line.startswith("  body:"):
                steps[-1].body = bytes.fromhex(line.removeprefix("  body:").replace(" ", ""))
            elif line.startswith("  json ⊇ "):
                steps[-1].json_subset = json.loads(line.removeprefix("  json ⊇ "))
            elif line.startswith("  json has no "):
                steps[-1].json_absent.append(line.removeprefix("  json has no ").strip())
            elif line.startswith("  ") and ": " in line:
                name, _, value = line.strip().partition(": ")
                steps[-1].headers[name] = value
            elif line.strip():
                raise AssertionError(f"unreadable line in a wire example: {line!r}")
        parsed.append(steps)
    return parsed


def contains(whole: Any, part: Any) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and contains(whole[k], v) for k, v in part.items())
    if isinstance(part, list):
        return isinstance(whole, list) and len(whole) == len(part) and all(map(contains, whole, part))
    return bool(whole == part)


@pytest.fixture
async def pool(tmp_path: Path, nats_url: str) -> AsyncIterator[str]:
    """A submitter whose pool knows two finished jobs; the first logged ``hello``."""
    name = f"d{uuid.uuid4().hex[:10]}"
    async with Submitter(settings_for(tmp_path / "state", nats_url, pool=name)) as submitter:
        assert submitter.nc is not None
        client = submitter_client(submitter.nc, name)
        await client.submit(pb.SubmitRequest(job=pod_job(FIRST, {"main": "echo hello"})))
        await client.submit(pb.SubmitRequest(job=pod_job(SECOND, {"main": "true"})))

        async def both_finished() -> bool | None:
            reply = await client.get_status(pb.GetStatusRequest(pod_uids=[FIRST, SECOND]))
            return all(s.state == pb.JobState.SUCCEEDED for s in reply.statuses) or None

        await wait_for(both_finished, timeout=30, what="both jobs to finish")
        yield name


def test_the_page_has_the_examples_it_promises() -> None:
    boxes = examples(DOC.read_text())
    assert len(boxes) >= 9
    kinds = {s.subject.split(".")[3] for box in boxes for s in box if s.outgoing and s.reply}
    assert {"Cancel", "GetLogs", "ListJobs", "Describe"} <= kinds


@pytest.mark.parametrize("index", range(len(examples(DOC.read_text()))))
async def test_each_wire_example_of_the_doc_is_what_the_submitter_does(pool: str, nats_url: str, index: int) -> None:
    steps = examples(DOC.read_text())[index]
    nc = await nats.connect(nats_url)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.flush()
        names = {"pool": pool, "inbox": inbox, "nobody": f"nobody{uuid.uuid4().hex[:8]}"}

        def fill(text: str) -> str:
            return re.sub(r"\{(\w+)\}", lambda m: names[m.group(1)], text)

        for step in steps:
            if step.outgoing:
                headers = {k: fill(v) for k, v in step.headers.items()} or None
                reply = fill(step.reply) if step.reply else ""
                await nc.publish(fill(step.subject), step.body, reply=reply, headers=headers)
                continue
            msg = await sub.next_msg(timeout=10)
            assert msg.subject == fill(step.subject)
            # nats-py reads nats-server's status line into a "Description" pseudo-header; it is no header on the wire.
            got = {k: v for k, v in (msg.headers or {}).items() if k != nats.js.api.Header.DESCRIPTION}
            if "Rpc-Control" in step.headers and step.headers["Rpc-Control"] == "{control}":
                names["control"] = got.get("Rpc-Control", "<missing>")
            assert got == {k: fill(v) for k, v in step.headers.items()}, f"headers of step {steps.index(step)}"
            if step.json_subset is None and not step.json_absent:
                assert msg.data == step.body, f"body of step {steps.index(step)}"
                continue
            reply_json = pb.ListJobsResponse.parse(msg.data).to_dict()
            assert step.json_subset is None or contains(reply_json, step.json_subset), reply_json
            for key in step.json_absent:
                assert key not in reply_json
        with pytest.raises(nats.errors.TimeoutError):  # and nothing else arrives
            await sub.next_msg(timeout=0.5)
    finally:
        await nc.close()


def test_render_prints_the_submit_request_as_proto3_json(tmp_path: Path) -> None:
    """`interlink-nats render --submit-request`: what another language sends to Submit, no Python needed."""
    from interlink_nats.cli import app

    pod = {
        "metadata": {"uid": FIRST, "name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["echo", "hello"]}]},
    }
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(pod))
    result = CliRunner().invoke(app, ["render", str(pod_file), "--runtime", "none", "--submit-request"])
    assert result.exit_code == 0, result.output
    request = pb.SubmitRequest.from_json(result.output)
    assert request.job is not None and request.job.pod is not None
    assert request.job.pod.uid == FIRST and list(request.job.containers) == ["main"]
    assert "echo hello" in request.job.script
    assert json.loads(result.output)["job"]["pod"]["uid"] == FIRST, "proto3 JSON field names"
