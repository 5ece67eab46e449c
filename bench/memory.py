"""The gateway's memory per tracked pod, and how long a restart takes to serve again.

The real gateway process (``interlink-nats gateway``) restores its pod table from redis, its normal
restart path, with a status per pod (init + two containers, as in bench/status.py). Figures:

- RSS of the gateway tracking N pods (``/proc/<pid>/status`` VmRSS) once it serves;
- the baseline: RSS of the same gateway with an empty table, measured in the same run;
- bytes per pod over that baseline;
- restart time: from the process's start to ``/status`` answering for the last restored pod;
- RSS once every pod's status has been asked for (``/status`` in batches of 500 pods, as the VK polls):
  whatever the gateway keeps per pod to answer fast counts too.

Goals (P6): RSS <= 250 MB at 100,000 pods, restart <= 5 s; and <= 500 B per pod.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import RedisProcess, free_port, median, print_table, start_gateway, stop_process
from interlink_nats.services.gateway.store import REDIS_PODS_KEY
from interlink_nats.services.ops.nats_server import NatsServerProcess
from status import make_records, status_body


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def answers(port: int, body: bytes) -> bool:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/status", data=body, method="GET")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            statuses = json.loads(response.read())
    except Exception:
        return False
    return bool(statuses) and bool(statuses[0].get("containers"))


def ask_every_pod(port: int, bodies: list[bytes]) -> None:
    for body in bodies:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/status", data=body, method="GET")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def run_gateway(
    nats_url: str,
    redis_url: str,
    probe: bytes | None,
    log: Path,
    polls: list[bytes] | None = None,
    deadline_s: float = 300.0,
) -> dict[str, float]:
    """Start a gateway, wait until it serves (``probe``: a /status body that must find its pod), measure, stop it."""
    port = free_port()
    started = time.monotonic()
    proc = start_gateway(nats_url, port, log, redis_url)
    try:
        body = probe if probe is not None else b"[]"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the gateway exited ({proc.returncode}); see {log}")
            if probe is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                        break
                except Exception:
                    pass
            elif answers(port, body):
                break
            if time.monotonic() - started > deadline_s:
                raise RuntimeError(f"the gateway did not serve within {deadline_s}s")
            time.sleep(0.02)
        ready_s = time.monotonic() - started
        time.sleep(1.0)  # let start-up garbage settle before reading RSS
        figures = {"ready_s": ready_s, "rss": float(rss_bytes(proc.pid))}
        if polls:
            ask_every_pod(port, polls)
            time.sleep(1.0)
            figures["rss_polled"] = float(rss_bytes(proc.pid))
        return figures
    finally:
        stop_process(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    import redis

    tmp = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    nats = NatsServerProcess().start_blocking()
    empty_redis = RedisProcess()
    full_redis = RedisProcess()
    try:
        records = make_records(args.pods)
        client = redis.Redis.from_url(full_redis.url)
        for start in range(0, len(records), 10_000):
            pipe = client.pipeline(transaction=False)
            for record in records[start : start + 10_000]:
                pipe.hset(REDIS_PODS_KEY, record.uid, record.to_json())
            pipe.execute()
        probe = status_body(records[-1])
        polls = [
            b"[" + b",".join(status_body(r)[1:-1] for r in records[i : i + 500]) + b"]"
            for i in range(0, len(records), 500)
        ]
        del records
        rows, baseline, loaded = [], [], []
        for rep in range(args.reps):
            base = run_gateway(nats.url, empty_redis.url, None, tmp / "gateway-empty.log")
            full = run_gateway(nats.url, full_redis.url, probe, tmp / "gateway-full.log", polls)
            baseline.append(base)
            loaded.append(full)
            per_pod = (full["rss"] - base["rss"]) / args.pods
            rows.append(
                [
                    rep + 1,
                    f"{base['rss'] / 2**20:.1f}",
                    f"{full['rss'] / 2**20:.1f}",
                    f"{per_pod:.0f}",
                    f"{full['rss_polled'] / 2**20:.1f}",
                    f"{base['ready_s']:.2f}",
                    f"{full['ready_s']:.2f}",
                ]
            )
        print_table(
            f"gateway memory: {args.pods} pods restored from redis (with statuses) vs an empty table",
            ["rep", "baseline RSS MB", "RSS MB", "bytes/pod", "RSS MB, all polled", "empty start s", "restart s"],
            rows,
        )
        rss_mb = median([f["rss"] for f in loaded]) / 2**20
        base_mb = median([b["rss"] for b in baseline]) / 2**20
        figures = {
            "pods": args.pods,
            "rss_mb": round(rss_mb, 1),
            "baseline_rss_mb": round(base_mb, 1),
            "bytes_per_pod": round((rss_mb - base_mb) * 2**20 / args.pods),
            "rss_polled_mb": round(median([f["rss_polled"] for f in loaded]) / 2**20, 1),
            "restart_s": round(median([f["ready_s"] for f in loaded]), 2),
            "empty_start_s": round(median([b["ready_s"] for b in baseline]), 2),
            "goal_rss_mb": 250,
            "goal_bytes_per_pod": 500,
            "goal_restart_s": 5.0,
            "reps": args.reps,
        }
        print(json.dumps(figures))
    finally:
        empty_redis.stop()
        full_redis.stop()
        nats.stop_blocking()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
