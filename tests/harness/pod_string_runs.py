"""Running the placements of ``pod_placements`` for real: parts merged into pods, rendered, executed by bash
(runtime ``none``), and every check read back from what the job left (container logs, trace files, the requests
the test's HTTP server received)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import socket
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostile_strings import MARKER, canary_fired
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import PodRejected, render_pod
from pod_placements import UID, Check, Part, Placement, Site
from storage_sites import STRINGS_SITE

NONE = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, storage=STRINGS_SITE)
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")


def merge(parts: list[Part], site: Site) -> tuple[dict[str, Any], list[list[str]]]:
    """One RetrievedPodData holding every part, and each part's string's JSON path in it."""
    containers: list[dict[str, Any]] = []
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    data: dict[str, list[dict[str, Any]]] = {
        **{"configMaps": [], "secrets": [], "projectedvolumemaps": []},
        **{"persistentVolumeClaims": [], "persistentVolumes": []},
    }
    pod: dict[str, dict[str, Any]] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": UID, "labels": {}, "annotations": {}},
        "spec": {},
        "status": {},
    }
    wheres: list[list[str]] = []
    for part in parts:
        target = init if site.containers == "initContainers" else containers
        places = {"{c}": f"spec.{site.containers}[{len(target)}]", "{v}": f"spec.volumes[{len(volumes)}]"}
        target.append(part.container)
        target += part.after
        if part.volume is not None:
            volumes.append(part.volume)
        for kind, objects in part.data.items():
            places["{d}"] = str(len(data[kind]))
            data[kind] += objects
        where = [part.where, *part.also]
        for name, value in places.items():
            where = [w.replace(name, value) for w in where]
        pod["metadata"]["labels"].update(part.labels)
        pod["metadata"]["annotations"].update(part.annotations)
        for section, members in part.pod.items():
            pod[section].update(members)
        wheres.append(where)
    if not containers:
        containers.append({"name": "main", "image": "unused", "command": ["/bin/true"]})
    pod["spec"].update(containers=containers, initContainers=init, volumes=volumes)
    return {"pod": pod, "container": [{"name": "c", **data}]}, wheres


def names_field(rejected: PodRejected, where: list[str]) -> bool:
    """A rejection names the string's field: its path, a member of it, or the object that holds it (not the
    whole pod or a top-level section); ``where``: the paths that hold the string."""
    return any(_names(rejected.field, w) for w in where)


def _names(field: str, where: str) -> bool:
    if field == where or field.startswith((where + ".", where + "[")):
        return True
    parent = where.startswith((field + ".", field + "["))
    return parent and field.count(".") + field.count("[") >= 1 and field not in ("spec.containers", "spec.volumes")


@dataclass
class Outcome:
    part: Part
    where: list[str]
    rejected: PodRejected | None


def render_alone(
    placement: Placement, strings: tuple[str, ...], site: Site, bc: pb.BuildConfig = NONE
) -> list[Outcome]:
    """Each string in a pod of its own: rendered, or refused naming its field (asserted)."""
    out = []
    for i, s in enumerate(strings):
        part = placement.build(s, i, site)
        data, (where,) = merge([part], site)
        rejected: PodRejected | None = None
        try:
            render_pod(data, bc)
        except PodRejected as e:
            rejected = e
        if rejected is not None:
            assert names_field(rejected, where), f"{placement.label} {s!r}: refused as {rejected}, not naming {where}"
        out.append(Outcome(part, where, rejected))
    return out


# --- running -----------------------------------------------------------------------------------------------------


@dataclass
class Ran:
    job_dir: Path
    job: pb.JobScript
    returncode: int
    output: bytes


def run_pod(data: dict[str, Any], job_dir: Path, bc: pb.BuildConfig = NONE, env: dict[str, str] | None = None) -> Ran:
    job = render_pod(data, bc).job
    job_dir.mkdir(parents=True)
    (job_dir / layout.SCRIPT_NAME).write_text(job.script)
    proc = subprocess.run(
        ["bash", layout.SCRIPT_NAME],
        cwd=job_dir,
        env={**os.environ, **(env or {}), layout.JOB_DIR_ENV: str(job_dir)},
        capture_output=True,
        timeout=120,
    )
    return Ran(job_dir, job, proc.returncode, proc.stdout + proc.stderr)


def run_pods(pods: list[tuple[dict[str, Any], Path]], **kw: Any) -> list[Ran]:
    """Several pods' scripts side by side (each is mostly waiting for its processes)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda p: run_pod(*p, **kw), pods))


def _log(ran: Ran, name: str) -> bytes:
    path = layout.log_path(ran.job_dir, name)
    return path.read_bytes() if path.exists() else b""


def _nul_words(raw: bytes) -> list[str]:
    words = raw.split(b"\0")
    assert words[-1] == b"", raw[-200:]
    return [w.decode("utf-8", "surrogateescape") for w in words[:-1]]


def _tar_files(raw: bytes) -> dict[str, bytes]:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                files[os.path.normpath(member.name)] = f.read()
    return files


def sbatch_directives(script: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch would read from ``script``: those before its first line that is neither blank
    nor a comment (sbatch's own rule, src/sbatch/opt.c)."""
    found = []
    for line in script.split("\n")[1:]:
        text = line.lstrip()
        if text.startswith("#SBATCH"):
            found.append(line)
        elif text and not text.startswith("#"):
            break
    return found


def check_run(ran: Ran, checks: list[Check], *, allow_cancel: bool = False) -> None:
    """Every check holds, no canary fired, no marker printed, every container ended 0 (143: cancelled; any code
    where the pod named a host that may not exist)."""
    assert not canary_fired(), f"pod text ran as code: {canary_fired()}"
    assert not sbatch_directives(ran.job.script), "sbatch would read these from the job script"
    logs = {name: _log(ran, name) for name in [*ran.job.init_containers, *ran.job.containers]}
    unreachable = {c.container for c in checks if c.kind == "host"}
    for name, raw in logs.items():
        assert MARKER.encode() not in raw, f"{name} printed the marker"
        if name in unreachable or name.startswith("stop"):  # a stopper's own end races with the stop it caused
            continue
        code = layout.exit_path(ran.job_dir, name).read_text().split()[0]
        assert code == "0" or (allow_cancel and code == "143"), (name, code, raw[-500:], ran.output[-2000:])
    assert MARKER.encode() not in ran.output
    for check in checks:
        _check(ran, logs, check)


def _check(ran: Ran, logs: dict[str, bytes], check: Check) -> None:
    raw = logs.get(check.container, b"")
    what = f"{check.kind} {check.key!r} of {check.container}"
    if check.optional and check.kind in ("trace", "request") and not Path(check.key).exists():
        return
    if check.kind == "env":
        env = dict(w.split("=", 1) for w in _nul_words(raw))
        assert env.get(check.key) == check.expected, what
    elif check.kind == "argv":
        assert _nul_words(raw) == check.expected, what
    elif check.kind == "file":
        files = _tar_files(raw)
        assert files.get(os.path.normpath(check.key)) == check.expected, (what, sorted(files))
    elif check.kind == "pwd":
        root = os.path.realpath(ran.job_dir / layout.ROOTFS_DIR / check.container)
        assert raw.decode("utf-8", "surrogateescape") == root + os.path.normpath(check.expected) + "\n", what
    elif check.kind == "trace":
        assert _nul_words(Path(check.key).read_bytes()) == check.expected, what
    elif check.kind == "request":
        request = Path(check.key).read_bytes()
        lines = request.split(b"\r\n")
        assert not any(b"\n" in line or b"\r" in line for line in lines), f"{what}: a bare CR or LF on the wire"
        assert request == check.expected, what
    elif check.kind == "dir":
        assert Path(check.key).is_dir(), what
    elif check.kind == "host":
        assert _HOST.fullmatch(check.expected), f"{what}: accepted as a host"
    elif check.kind == "flags":
        assert list(ran.job.backend_flags) == shlex.split(check.expected), what
    else:
        raise AssertionError(check.kind)


# --- the HTTP server the httpGet handlers call -----------------------------------------------------------------


@contextmanager
def http_server(trace_dir: Path) -> Iterator[int]:
    """A server on 127.0.0.1 that writes each request's bytes to ``request-<X-Case>`` in ``trace_dir``."""
    sock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            raw = b""
            while b"\r\n\r\n" not in raw:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                raw += chunk
            case = re.search(rb"\r\nX-Case: (\d+)\r\n", raw)
            name = f"request-{case.group(1).decode()}" if case else f"request-unknown-{id(conn)}"
            (trace_dir / (name + ".tmp")).write_bytes(raw)
            os.replace(trace_dir / (name + ".tmp"), trace_dir / name)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        sock.close()


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:300]
