"""``bench/arrays.py --stack``: the same burst through the whole stack, nats-server, ``interlink-nats gateway``
(with redis) and ``interlink-nats submitter slurm``, each its own process, on a fresh one-node Slurm.

The pods are created one by one over HTTP (each ``/create`` answered before the next is sent, as interLink does).
As an array they carry an Indexed Job's label and annotation, so the gateway coalesces them (its default
``array_window_s``, 2 s of quiet, ``array_max_wait_s``, 30 s, and ``array_max_count``, 1,000: a burst longer than
the longest wait makes more than one array);
as singles the same pods carry no Job label. The clock runs from the last ``/create`` to the first ``/status`` (every
0.2 s) in which every container of every pod is running or terminated; the submitter polls Slurm every 0.5 s.
CPU is the gateway's and the submitter's own and their reaped children's (sbatch, squeue), from ``/proc``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _harness import (
    HttpConnection,
    RedisProcess,
    cpu_seconds,
    free_port,
    http_request,
    start_cli,
    start_gateway,
    stop_process,
    wait_http,
)
from interlink_nats.services.ops.nats_server import NatsServerProcess
from slurm_cluster import SlurmCluster

POOL = "arrays"
STATUS_S = 0.2
LIMIT_S = 600.0


def pod(run: str, job_uid: str, i: int, *, as_job: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"scan-{run}-{i}", "namespace": "bench", "uid": str(uuid.uuid4())}
    if as_job:
        meta["labels"] = {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": "scan"}
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["true"],
        "env": [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}],
        "resources": {"limits": {"cpu": "1", "memory": "8Mi"}},
    }
    spec = {"containers": [container], "tolerations": [{"key": "pool.vk.io", "value": POOL, "effect": "NoSchedule"}]}
    return {
        "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
        "container": [{"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None}],
    }


async def _all_up(conn: HttpConnection, pods: list[dict[str, Any]]) -> bool:
    status, body = await conn.call(http_request("GET", "/status", json.dumps([p["pod"] for p in pods]).encode()))
    if status != 200:
        raise RuntimeError(f"/status answered {status}: {body[:200]!r}")
    answers = json.loads(body)
    for s in answers:  # a pod that failed (its array refused by the pool, say) is not "up": the run is void
        for c in s["containers"]:
            ended = c.get("state", {}).get("terminated")
            if ended is not None and ended.get("exitCode") != 0:
                raise RuntimeError(f"pod {s.get('name')} failed: {ended.get('reason')}: {ended.get('message')}")
    return len(answers) == len(pods) and all(
        c.get("state", {}).get("running") is not None or c.get("state", {}).get("terminated") is not None
        for s in answers
        for c in s["containers"]
    )


async def _burst(port: int, pods: list[dict[str, Any]]) -> tuple[float, float]:
    conn = await HttpConnection.open("127.0.0.1", port)
    try:
        first = time.perf_counter()
        for p in pods:
            status, body = await conn.call(http_request("POST", "/create", json.dumps(p).encode()))
            if status != 200:
                raise RuntimeError(f"/create answered {status}: {body[:300]!r}")
        last = time.perf_counter()
        while not await _all_up(conn, pods):
            if time.perf_counter() - last > LIMIT_S:
                raise RuntimeError(f"not all {len(pods)} pods up in {LIMIT_S:g} s")
            await asyncio.sleep(STATUS_S)
        return time.perf_counter() - last, last - first
    finally:
        conn.close()


def _cpu(pid: int) -> float:
    own, children = cpu_seconds(pid)
    return own + children


def measure_stack(
    mode: str, n: int, queue_depth: int | None = None, max_payload: int | None = None
) -> dict[str, float]:
    """One burst of N pods through the stack, as one Job's pods (coalesced) or as N unrelated pods, on a Slurm
    whose ``default_queue_depth`` is ``queue_depth`` (None: Slurm's), with a nats-server whose ``max_payload`` is
    ``max_payload`` (None: NATS's 1 MiB; the gateway never lets an array grow past it)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-array-stack-"))
    cluster = SlurmCluster(cpus=n + 2, queue_depth=queue_depth).start()
    if max_payload is None:
        nats_server = NatsServerProcess().start_blocking()
    else:
        conf = tmp / "nats-server.conf"
        conf.write_text(f"max_payload: {max_payload}\n")
        listen = ["-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(tmp / "jetstream")]
        nats_server = NatsServerProcess(config_file=conf, extra_args=listen).start_blocking()
    redis = RedisProcess()
    config = tmp / "submitter.json"
    config.write_text(
        json.dumps(
            {
                "pool": POOL,
                "backend": "slurm",
                "nats": {"url": [nats_server.url]},
                "state_dir": str(tmp / POOL),
                "build_config": {"runtime": "CONTAINER_RUNTIME_NONE"},
                "poll_interval_s": 0.5,
            }
        )
    )
    submitter = start_cli(
        ["submitter", "slurm", "--config", str(config)], env={"SLURM_CONF": str(cluster.conf)}, log=tmp / "sub.log"
    )
    port = free_port()
    gateway = start_gateway(nats_server.url, port, tmp / "gateway.log", redis.url)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        asyncio.run(_burst(port, [pod("warm", "", 0, as_job=False)]))  # the pool announced, every path warm
        log = cluster.dir / "log" / "slurmctld.log"
        subs = len(re.findall(r"_slurm_rpc_submit_batch_job", log.read_text()))
        ctld = cluster._procs[0].pid
        before = (_cpu(gateway.pid) + _cpu(submitter.pid), cpu_seconds(ctld)[0])
        job_uid = str(uuid.uuid4())
        pods = [pod(mode, job_uid, i, as_job=mode == "array") for i in range(n)]
        after_last, creating = asyncio.run(_burst(port, pods))
        return {
            "all_up_s": after_last,
            "from_first_s": creating + after_last,
            "submit_s": creating,
            "submissions": len(re.findall(r"_slurm_rpc_submit_batch_job", log.read_text())) - subs,
            "cpu_per_pod_ms": (_cpu(gateway.pid) + _cpu(submitter.pid) - before[0]) / n * 1000,
            "ctld_per_pod_ms": (cpu_seconds(ctld)[0] - before[1]) / n * 1000,
        }
    finally:
        stop_process(gateway)
        stop_process(submitter)
        redis.stop()
        nats_server.stop_blocking()
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
