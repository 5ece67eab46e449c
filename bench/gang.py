"""A pod group as one job: the last member's /create → every member running, against N single pods.

Stack: ``interlink-nats gateway`` (with redis, where held members live), one ``interlink-nats submitter shell``
(runtime none) and a nats-server, each its own process. For each group size N (2, 8, 32 by default), in the
same rep and alternating which goes first:

- **gang**: N pods carrying Kueue's ``kueue.x-k8s.io/pod-group-name`` label and ``pod-group-total-count``
  annotation, created one by one (each /create answered before the next is sent, as interLink does). The
  gateway holds the first N-1; the last completes the group and the gateway sends one ``SubmitGroup``: one
  launcher starts all N members at once.
- **singles**: N pods without the label, created one by one: N ``Submit`` calls, N jobs.

Two pod shapes, interleaved within each rep (``--shape`` picks one): ``minimal`` (one container) and
``interlink`` (what interLink sends, from ``bench/create.py``: two containers with 15 env vars each, an emptyDir
and a configMap with items), so the group's one ``SubmitGroup`` carries N jobs of about 8 KB each.

The shell pool gets as many job slots as the largest N plus one, so N singles can all run at once too (with the
default, one slot per CPU, singles beyond the slots wait for a slot and 8 of them never all run on a 2-core host,
while a gang takes one slot). Each pod's one container sleeps until deleted. The clock runs from the moment the
last /create is sent to the first /status answer in which every container of every pod is running (``last → all
running``), and, apart, from the first /create (``first → all running``). /status is asked every 20 ms, which
bounds the resolution; the submitter polls its jobs as often (its default, 5 s, would be all the figures showed).
After each measurement every pod is deleted (its job cancelled) before the next starts.

Figures are medians over the reps; ``ratio`` is gang ÷ singles of ``last → all running`` (below 1: the
gang is running sooner after its last member arrived than N singles after theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    HttpConnection,
    RedisProcess,
    free_port,
    http_request,
    median,
    print_table,
    start_cli,
    start_gateway,
    stop_process,
    wait_http,
)
from _pods import interlink_pod_data
from interlink_nats.services.ops.nats_server import NatsServerProcess

POOL = "gang"
POLL_S = 0.02
LIMIT_S = 300.0


SHAPES = ("minimal", "interlink")
"""``minimal``: one container and nothing else. ``interlink``: the pod interLink sends (``bench/create.py``: two
containers with 15 env vars each, an emptyDir and a configMap with items), so a group's ``SubmitGroup`` carries N
jobs of about 8 KB each."""


def pod(run: str, i: int, size: int, *, grouped: bool, shape: str = "minimal") -> dict[str, object]:
    """Member ``i`` of a run: its containers sleep until its pod is deleted."""
    labels = {"kueue.x-k8s.io/pod-group-name": f"g-{run}"} if grouped else {}
    annotations = {"kueue.x-k8s.io/pod-group-total-count": str(size)} if grouped else {}
    if shape == "interlink":
        data: dict[str, Any] = interlink_pod_data(i, run, POOL)
        meta = data["pod"]["metadata"]
        meta["labels"] = {**meta.get("labels", {}), **labels}
        meta["annotations"] = annotations
        for container in data["pod"]["spec"]["containers"]:
            container["command"] = ["sleep", "3600"]
        return data
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"bench-{run}-{i}",
                "namespace": "bench",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{run}/{i}")),
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
                "tolerations": [{"key": "pool.vk.io", "value": POOL, "effect": "NoSchedule"}],
            },
        },
        "container": [{"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None}],
    }


async def all_running(conn: HttpConnection, pods: list[dict[str, object]]) -> bool:
    status, body = await conn.call(http_request("GET", "/status", json.dumps([p["pod"] for p in pods]).encode()))
    if status != 200:
        raise RuntimeError(f"/status answered {status}: {body[:200]!r}")
    answers = json.loads(body)
    return len(answers) == len(pods) and all(
        c.get("state", {}).get("running") is not None for s in answers for c in s["containers"]
    )


async def measure(port: int, run: str, size: int, *, grouped: bool, shape: str) -> tuple[float, float]:
    """(last /create → all running, first /create → all running) in seconds. Every pod created is deleted
    afterwards, also when the measurement fails: a pod's job outlives the submitter at a site, by design."""
    pods = [pod(run, i, size, grouped=grouped, shape=shape) for i in range(size)]
    conn = await HttpConnection.open("127.0.0.1", port)
    created: list[dict[str, object]] = []
    try:
        first = time.perf_counter()
        last = first
        for p in pods:
            last = time.perf_counter()
            status, body = await conn.call(http_request("POST", "/create", json.dumps(p).encode()))
            if status != 200:
                raise RuntimeError(f"/create answered {status}: {body[:300]!r}")
            created.append(p)
        while not await all_running(conn, pods):
            if time.perf_counter() - first > LIMIT_S:
                raise RuntimeError(f"{'gang' if grouped else 'singles'} of {size}: not all running in {LIMIT_S:g} s")
            await asyncio.sleep(POLL_S)
        return time.perf_counter() - last, time.perf_counter() - first
    finally:
        for p in created:
            status, body = await conn.call(http_request("POST", "/delete", json.dumps(p["pod"]).encode()))
            if status != 200:
                print(f"/delete of {p['pod']} answered {status}: {body[:300]!r}", file=sys.stderr)
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32], help="group sizes N")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--shape", choices=SHAPES, action="append", help="pod shapes (default: both, interleaved)")
    args = parser.parse_args()
    shapes = args.shape or list(SHAPES)

    tmp = Path(tempfile.mkdtemp(prefix="bench-gang-"))
    nats_server = NatsServerProcess().start_blocking()
    redis = RedisProcess()
    config = tmp / "submitter.json"
    config.write_text(
        json.dumps(
            {
                "pool": POOL,
                "backend": "shell",
                "nats": {"url": [nats_server.url]},
                "state_dir": str(tmp / POOL),
                "build_config": {"runtime": "CONTAINER_RUNTIME_NONE"},
                "shell": {"max_concurrent_jobs": max(args.sizes) + 1},
                "poll_interval_s": POLL_S,
            }
        )
    )
    submitter = start_cli(["submitter", "shell", "--config", str(config)], log=tmp / "submitter.log")
    port = free_port()
    gateway = start_gateway(nats_server.url, port, tmp / "gateway.log", redis.url)
    measured = False
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        for shape in shapes:  # the pool announced, every path warm
            asyncio.run(measure(port, f"warm-g-{shape}", 2, grouped=True, shape=shape))
            asyncio.run(measure(port, f"warm-s-{shape}", 2, grouped=False, shape=shape))
        figures: dict[tuple[str, int, bool], list[tuple[float, float]]] = {}
        rows: list[list[object]] = []
        for rep in range(args.reps):
            for shape in shapes:
                for size in args.sizes:
                    order = (True, False) if rep % 2 == 0 else (False, True)
                    for grouped in order:
                        run = f"r{rep}-{size}-{'g' if grouped else 's'}-{uuid.uuid4().hex[:6]}"
                        after_last, after_first = asyncio.run(measure(port, run, size, grouped=grouped, shape=shape))
                        figures.setdefault((shape, size, grouped), []).append((after_last, after_first))
                        kind = "gang" if grouped else "singles"
                        rows.append([rep + 1, shape, size, kind, f"{after_last:.3f}", f"{after_first:.3f}"])
        print_table(
            "pods created one by one; seconds until every container of every pod is running (/status every 20 ms)",
            ["rep", "pod", "N", "as", "last → all running", "first → all running"],
            rows,
        )
        by_shape: dict[str, dict[str, dict[str, float]]] = {}
        summary: list[list[object]] = []
        for shape in shapes:
            for size in args.sizes:
                gang_last = median([f[0] for f in figures[(shape, size, True)]])
                gang_first = median([f[1] for f in figures[(shape, size, True)]])
                single_last = median([f[0] for f in figures[(shape, size, False)]])
                single_first = median([f[1] for f in figures[(shape, size, False)]])
                ratio = gang_last / single_last if single_last else float("inf")
                summary.append(
                    [shape, size, f"{gang_last:.3f}", f"{single_last:.3f}", f"{ratio:.2f}", f"{gang_first:.3f}"]
                )
                by_shape.setdefault(shape, {})[str(size)] = {
                    "gang_last_to_running_s": round(gang_last, 4),
                    "singles_last_to_running_s": round(single_last, 4),
                    "ratio": round(ratio, 3),
                    "gang_first_to_running_s": round(gang_first, 4),
                    "singles_first_to_running_s": round(single_first, 4),
                }
        print_table(
            f"medians of {args.reps} reps",
            ["pod", "N", "gang: last → running s", "singles: last → running s", "ratio", "gang: first → running s"],
            summary,
        )
        print(json.dumps({"reps": args.reps, "poll_s": POLL_S, "pods": by_shape}))
        measured = True
    finally:
        stop_process(gateway)
        stop_process(submitter)
        redis.stop()
        nats_server.stop_blocking()
        if measured:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"the bench failed; its processes' logs stay in {tmp}", file=sys.stderr)


if __name__ == "__main__":
    main()
