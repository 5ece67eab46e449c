"""The hot messages' codecs: betterproto2, the hand codecs of 793ea78, the generated codecs, and upb.

Ops (µs per op, the median of ``--repeat`` timings of ``--number`` calls each), on the messages a create and a
status change carry: a ``SubmitRequest`` with a 4 KB script decoded (the submitter) and encoded (the
gateway), a ``JobStatus`` of three containers and its ``JobEvent``
encoded (a poll), a ``SubmitResponse`` encoded (the submitter's reply), and the fields the gateway reads of a
``JobEvent`` (pod UID, revision, state, job id, the status's bytes as they came).

Columns: betterproto2 (the reference, its ratio 1.0); ``hand``: the five hand codecs as they were at 793ea78,
loaded from git (skipped when git or the commit is missing); ``generated``: ``gen/.../fastwire.py``; upb (the
``protobuf`` package with its C runtime, ``_pb2`` modules made from proto/ by grpcio-tools' protoc into a
temporary directory; skipped when either is missing), twice: with the message already built as upb objects
(what it costs if the project used ``_pb2`` classes everywhere), and with the conversion from and to the
betterproto2 objects the rest of the code holds. Ratios are against betterproto2 in the same run. The last line
is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import importlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import print_table
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire

ROOT = Path(__file__).resolve().parent.parent
BASE = "793ea78"
HAND_FILES = {
    "protowire": "kernel/protowire.py",
    "submit_wire": "services/gateway/submit_wire.py",
    "event_wire": "services/gateway/event_wire.py",
    "fastwire": "submitters/fastwire.py",  # paths at BASE, before the submitter's sub-packages
    "status": "submitters/status.py",
}
Op = Callable[[], object]


def samples() -> dict[str, Any]:
    t = dt.datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    pod = pb.PodRef(uid="6f1c2e9a-1111-2222-3333-444455556666", namespace="default", name="bench-pod")
    job = pb.JobScript(
        pod=pod,
        script="#!/bin/bash\n" + "echo 'a rendered line of the job script'\n" * 110,
        init_containers=["setup"],
        containers=["main", "sidecar"],
        resources=pb.ResourceRequest(cpu_millis=1500, memory_bytes=2 << 30),
        backend_flags=["--partition=short"],
    )
    containers = [
        pb.ContainerStatus(
            name=name,
            init=name == "setup",
            phase=pb.ContainerPhase.TERMINATED,
            exit_code=0,
            started_at=t,
            finished_at=t + dt.timedelta(seconds=3),
            reason="Completed",
        )
        for name in ("setup", "main", "sidecar")
    ]
    status = pb.JobStatus(
        pod=pod, pool="bench", job_id="1234567", state=pb.JobState.SUCCEEDED, containers=containers, updated_at=t
    )
    event = pb.JobEvent(status=status, revision=4, instance_id="submitter-0f3a")
    response = pb.SubmitResponse(job_id="1234567", created=True)
    return {"job": job, "status": status, "event": event, "response": response, "request": pb.SubmitRequest(job=job)}


def _temp_dir(prefix: str) -> Path:
    """A temp dir for modules imported from it: they are used until the run ends, which removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def load_hand(base: str) -> dict[str, ModuleType] | None:
    """The hand codecs of ``base``, as a package ``_hand`` in a temp dir (their imports pointed at it)."""
    target = _temp_dir("bench-wire-hand-") / "_hand"
    target.mkdir()
    (target / "__init__.py").write_text("")
    for name, path in HAND_FILES.items():
        try:
            text = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{base}:{path}"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        text = text.replace("from interlink_nats.kernel.protowire import", "from _hand.protowire import")
        text = text.replace("from interlink_nats.kernel import protowire", "from _hand import protowire")
        # the modules they imported then, where they live now
        text = text.replace("interlink_nats.submitters.status", "_hand.status")
        text = text.replace("interlink_nats.submitters.backends.base", "interlink_nats.submitters.core.backend")
        (target / f"{name}.py").write_text(text)
    sys.path.insert(0, str(target.parent))
    return {name: importlib.import_module(f"_hand.{name}") for name in HAND_FILES}


def load_upb() -> ModuleType | None:
    """``job_pb2``-style modules from proto/ (protoc of grpcio-tools), or None without protobuf or grpcio-tools."""
    try:
        from google.protobuf.internal import api_implementation
        from grpc_tools import protoc
    except ImportError:
        return None
    if api_implementation.Type() != "upb":
        return None
    out = _temp_dir("bench-wire-pb2-")
    # The files go under another folder: ``interlink_nats`` is this project's package, so ``_pb2`` modules
    # under that name could not be imported beside it.
    src = out / "src"
    for proto in (ROOT / "proto").rglob("*.proto"):
        target = src / "wirebench" / proto.relative_to(ROOT / "proto" / "interlink_nats")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(proto.read_text().replace('import "interlink_nats/', 'import "wirebench/'))
    include = Path(protoc.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(src)) for p in src.rglob("*.proto"))
    if protoc.main(["protoc", f"-I{src}", f"-I{include}", f"--python_out={out}", *protos]) != 0:
        return None
    sys.path.insert(0, str(out))
    merged = ModuleType("wirebench_pb2")  # one namespace for the messages of every file, like ``pb``
    for name in ("pod", "job", "submitter"):
        merged.__dict__.update(vars(importlib.import_module(f"wirebench.v1.{name}_pb2")))
    return merged


def upb_ops(s: dict[str, Any], p: ModuleType) -> dict[str, tuple[Op, Op]]:
    """Per op: (upb with the message already built, upb with the conversion from/to betterproto2)."""
    from google.protobuf.timestamp_pb2 import Timestamp

    def ts(value: dt.datetime | None) -> Timestamp | None:
        if value is None:
            return None
        out = Timestamp()
        out.FromDatetime(value)
        return out

    def pod(ref: pb.PodRef) -> Any:
        return p.PodRef(uid=ref.uid, namespace=ref.namespace, name=ref.name)

    def job(j: pb.JobScript) -> Any:
        r = j.resources
        assert j.pod is not None and r is not None
        resources = p.ResourceRequest(cpu_millis=r.cpu_millis, memory_bytes=r.memory_bytes, gpus=r.gpus)
        return p.JobScript(
            pod=pod(j.pod),
            script=j.script,
            init_containers=j.init_containers,
            containers=j.containers,
            resources=resources,
            backend_flags=j.backend_flags,
        )

    def status(st: pb.JobStatus) -> Any:
        assert st.pod is not None
        containers = [
            p.ContainerStatus(
                name=c.name,
                init=c.init,
                phase=int(c.phase),
                exit_code=c.exit_code,
                started_at=ts(c.started_at),
                finished_at=ts(c.finished_at),
                reason=c.reason,
                message=c.message,
            )
            for c in st.containers
        ]
        return p.JobStatus(
            pod=pod(st.pod),
            pool=st.pool,
            job_id=st.job_id,
            state=int(st.state),
            containers=containers,
            updated_at=ts(st.updated_at),
        )

    def from_upb_job(m: Any) -> pb.JobScript:
        r = m.resources
        return pb.JobScript(
            pod=pb.PodRef(uid=m.pod.uid, namespace=m.pod.namespace, name=m.pod.name),
            script=m.script,
            init_containers=list(m.init_containers),
            containers=list(m.containers),
            resources=pb.ResourceRequest(cpu_millis=r.cpu_millis, memory_bytes=r.memory_bytes, gpus=r.gpus),
            backend_flags=list(m.backend_flags),
        )

    def read_event(data: bytes) -> tuple[str, int, int, str, bytes]:
        e = p.JobEvent.FromString(data)
        st = e.status
        return st.pod.uid, e.revision, st.state, st.job_id, st.SerializeToString()

    request_bytes = bytes(s["request"])
    event_bytes = bytes(s["event"])
    built = {
        "request": p.SubmitRequest(job=job(s["job"])),
        "status": status(s["status"]),
        "event": p.JobEvent(status=status(s["status"]), revision=s["event"].revision, instance_id="submitter-0f3a"),
        "response": p.SubmitResponse(job_id=s["response"].job_id, created=True),
    }
    return {
        "SubmitRequest decode": (
            lambda: p.SubmitRequest.FromString(request_bytes),
            lambda: from_upb_job(p.SubmitRequest.FromString(request_bytes).job),
        ),
        "SubmitRequest encode": (
            built["request"].SerializeToString,
            lambda: p.SubmitRequest(job=job(s["job"])).SerializeToString(),
        ),
        "JobStatus encode": (
            built["status"].SerializeToString,
            lambda: status(s["status"]).SerializeToString(),
        ),
        "JobEvent encode": (
            built["event"].SerializeToString,
            lambda: p.JobEvent(status=status(s["status"]), revision=4, instance_id="x").SerializeToString(),
        ),
        "SubmitResponse encode": (
            built["response"].SerializeToString,
            lambda: p.SubmitResponse(job_id=s["response"].job_id, created=True).SerializeToString(),
        ),
        "JobEvent gateway read": (lambda: read_event(event_bytes), lambda: read_event(event_bytes)),
    }


def generated_read_event(data: bytes) -> tuple[str, int, int, str, bytes] | None:
    view = fastwire.read_job_event(data)
    if view is None or view.status is None or view.status.pod is None:
        return None
    st = view.status
    return st.pod.uid, view.revision, st.state, st.job_id, st.encoded


def ops(s: dict[str, Any], hand: dict[str, ModuleType] | None) -> dict[str, dict[str, Op]]:
    request_bytes, event_bytes = bytes(s["request"]), bytes(s["event"])
    job, status, event, response, request = s["job"], s["status"], s["event"], s["response"], s["request"]
    table: dict[str, dict[str, Op]] = {
        "SubmitRequest decode": {
            "betterproto2": lambda: pb.SubmitRequest.parse(request_bytes),
            "generated": lambda: fastwire.decode_submit_request(request_bytes),
        },
        "SubmitRequest encode": {
            "betterproto2": lambda: bytes(request),
            "generated": lambda: fastwire.encode_submit_request(request),
        },
        "JobStatus encode": {
            "betterproto2": lambda: bytes(status),
            "generated": lambda: fastwire.encode_job_status(status),
        },
        "JobEvent encode": {
            "betterproto2": lambda: bytes(event),
            "generated": lambda: fastwire.encode_job_event(event),
        },
        "SubmitResponse encode": {
            "betterproto2": lambda: bytes(response),
            "generated": lambda: fastwire.encode_submit_response(response),
        },
        "JobEvent gateway read": {
            "betterproto2": lambda: pb.JobEvent.parse(event_bytes),
            "generated": lambda: generated_read_event(event_bytes),
        },
    }
    if hand is not None:
        status_mod, fast = hand["status"], hand["fastwire"]
        table["SubmitRequest decode"]["hand"] = lambda: fast.submit_request(request_bytes)
        table["SubmitRequest encode"]["hand"] = lambda: hand["submit_wire"].encode_submit_request(job)
        table["JobStatus encode"]["hand"] = lambda: status_mod.encode_status(status)
        table["JobEvent encode"]["hand"] = lambda: status_mod.event_bytes(
            status_mod.encode_status(event.status), event.revision, event.instance_id
        )
        table["SubmitResponse encode"]["hand"] = lambda: fast.submit_response(response)
        table["JobEvent gateway read"]["hand"] = lambda: hand["event_wire"].read_event(event_bytes)
    return table


def check(s: dict[str, Any]) -> None:
    """The generated codecs give betterproto2's bytes and objects on these samples (a bench of wrong code is moot)."""
    assert fastwire.encode_submit_request(s["request"]) == bytes(s["request"])
    assert fastwire.encode_job_status(s["status"]) == bytes(s["status"])
    assert fastwire.encode_job_event(s["event"]) == bytes(s["event"])
    assert fastwire.encode_submit_response(s["response"]) == bytes(s["response"])
    assert fastwire.decode_submit_request(bytes(s["request"])) == s["request"]
    assert generated_read_event(bytes(s["event"])) == (
        s["status"].pod.uid,
        4,
        int(s["status"].state),
        s["status"].job_id,
        bytes(s["status"]),
    )


def time_us(op: Op, number: int, repeat: int) -> float:
    return statistics.median(timeit.repeat(op, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=2000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7, help="timings per op (the median is reported)")
    parser.add_argument("--base", default=BASE, help="the commit whose hand codecs are measured")
    args = parser.parse_args()
    s = samples()
    check(s)
    hand = load_hand(args.base)
    upb = load_upb()
    table = ops(s, hand)
    upb_table = upb_ops(s, upb) if upb is not None else {}
    columns = ["betterproto2", "hand", "generated", "upb built", "upb converted"]
    figures: dict[str, dict[str, float]] = {}
    rows = []
    for name, impls in table.items():
        if name in upb_table:
            impls = {**impls, "upb built": upb_table[name][0], "upb converted": upb_table[name][1]}
        us = {column: time_us(op, args.number, args.repeat) for column, op in impls.items()}
        reference = us["betterproto2"]
        figures[name] = {**{f"{c}_us": round(v, 2) for c, v in us.items()}}
        figures[name].update({f"{c}_ratio": round(v / reference, 3) for c, v in us.items() if c != "betterproto2"})
        rows.append([name, *(f"{us[c]:.2f} ({us[c] / reference:.2f})" if c in us else "-" for c in columns)])
    print_table("µs per op, median (ratio to betterproto2 in this run)", ["op", *columns], rows)
    print(json.dumps({"bench": "wire", "number": args.number, "repeat": args.repeat, "ops": figures}))


if __name__ == "__main__":
    main()
