"""/create → the container running, with runtime podman against runtime ``none`` (host processes), same run.

Stack: a nats-server, ``interlink-nats gateway`` and two ``interlink-nats submitter shell`` processes, one
pool per runtime, each configured by its own config file (``build_config.runtime``). Podman is rootful,
configured in a temp dir exactly as the tests do it (tests/harness/podman_host.py: runc, no network namespace,
a busybox image from ``podman import``).

The same pod goes to both pools (only the pool toleration differs): one container that touches a file
in a hostPath volume, then exits. The file's mtime is the moment the container's process ran; the
``.exit`` file's mtime is when the script saw it end. Pods are created one at a time, alternating the
runtimes, each waiting for the previous to be running, so the figures are latencies, not queueing.

Per-pod overhead of podman = median(create → exit seen, podman) - the same for runtime none.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "harness"))

from _harness import free_port, median, percentile, print_table, start_cli, start_gateway, stop_process, wait_http
from interlink_nats.kernel import layout
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.submitters.core.status import container_file_number
from podman_host import IMAGE, PodmanHost

RUNTIMES = {"none": "CONTAINER_RUNTIME_NONE", "podman": "CONTAINER_RUNTIME_PODMAN"}


def pod(pool: str, marks: Path, uid: str) -> dict[str, object]:
    touch = 'touch "${INTERLINK_ROOTFS:-}/marks/$POD_UID"'  # runtime none: the mount is below INTERLINK_ROOTFS
    p = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{uid[:8]}", "namespace": "bench", "uid": uid},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": ["sh", "-c", touch],
                    "env": [{"name": "POD_UID", "value": uid}],
                    "volumeMounts": [{"name": "marks", "mountPath": "/marks"}],
                }
            ],
            "volumes": [{"name": "marks", "hostPath": {"path": str(marks)}}],
            "tolerations": [{"key": "pool.vk.io", "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
        },
    }
    return {"pod": p, "container": [{"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None}]}


def post(port: int, path: str, body: object) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200, response.read()


def wait_file(path: Path, limit_s: float = 120.0) -> float:
    """The file's mtime once it exists (polled every millisecond or so; the mtime is the measurement)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            time.sleep(0.001)
    raise TimeoutError(f"{path} did not appear within {limit_s:g}s")


def wait_exit_code(path: Path, limit_s: float = 120.0) -> tuple[float, int]:
    """The ``.exit`` file's mtime and code once it is whole: it exists before its one write ends in a newline
    (docs/pod-support.md, "The job directory"), so an early read sees it empty."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            mtime = path.stat().st_mtime
            code = container_file_number(path.read_text())
        except FileNotFoundError:
            code = None
        if code is not None:
            return mtime, int(code)
        time.sleep(0.001)
    raise TimeoutError(f"{path} was not written whole within {limit_s:g}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20, help="pods per runtime")
    args = parser.parse_args()

    host = PodmanHost("podman")
    host.start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-podman-"))
    marks = tmp / "marks"
    marks.mkdir()
    nats_server = NatsServerProcess().start_blocking()
    port = free_port()
    processes = []
    state: dict[str, Path] = {}
    try:
        for runtime, name in RUNTIMES.items():
            pool = f"bench-{runtime}"
            state[runtime] = tmp / pool
            config = tmp / f"{pool}.yaml"
            config.write_text(
                json.dumps(
                    {
                        "pool": pool,
                        "backend": "shell",
                        "nats": {"url": [nats_server.url]},
                        "state_dir": str(state[runtime]),
                        "poll_interval_s": 0.5,
                        "build_config": {"runtime": name},
                    }
                )
            )
            processes.append(start_cli(["submitter", "shell", "--config", str(config)], log=tmp / f"{pool}.log"))
        processes.append(start_gateway(nats_server.url, port, tmp / "gateway.log"))
        wait_http(f"http://127.0.0.1:{port}/healthz")

        running: dict[str, list[float]] = {r: [] for r in RUNTIMES}
        done: dict[str, list[float]] = {r: [] for r in RUNTIMES}
        for i in range(args.pods + 1):  # the first round warms up both pools (and the page cache)
            for runtime in RUNTIMES:
                uid = str(uuid.uuid4())
                data = pod(f"bench-{runtime}", marks, uid)
                started = time.time()
                post(port, "/create", data)
                ran = wait_file(marks / uid)
                job_dir = state[runtime] / "jobs" / uid
                ended, code = wait_exit_code(layout.exit_path(job_dir, "main"))
                if code != 0:
                    log = layout.log_path(job_dir, "main").read_text()
                    raise SystemExit(f"{runtime} pod failed with exit code {code}: {log}")
                if i:
                    running[runtime].append(max(0.0, ran - started))
                    done[runtime].append(max(0.0, ended - started))
                post(port, "/delete", data["pod"])

        rows = []
        for runtime in RUNTIMES:
            r, d = running[runtime], done[runtime]
            rows.append(
                [
                    runtime,
                    len(r),
                    f"{median(r) * 1e3:.0f}",
                    f"{percentile(r, 99) * 1e3:.0f}",
                    f"{median(d) * 1e3:.0f}",
                    f"{percentile(d, 99) * 1e3:.0f}",
                ]
            )
        print_table(
            f"/create → container running and → exit seen, one pod at a time, {args.pods} pods per runtime",
            ["runtime", "pods", "running p50 ms", "running p99 ms", "done p50 ms", "done p99 ms"],
            rows,
        )
        figures = {
            "pods_per_runtime": args.pods,
            "podman_running_p50_ms": round(median(running["podman"]) * 1e3, 1),
            "podman_running_p99_ms": round(percentile(running["podman"], 99) * 1e3, 1),
            "none_running_p50_ms": round(median(running["none"]) * 1e3, 1),
            "none_running_p99_ms": round(percentile(running["none"], 99) * 1e3, 1),
            "podman_done_p50_ms": round(median(done["podman"]) * 1e3, 1),
            "none_done_p50_ms": round(median(done["none"]) * 1e3, 1),
            "podman_overhead_per_pod_ms": round((median(done["podman"]) - median(done["none"])) * 1e3, 1),
        }
        print(json.dumps(figures))
    finally:
        for proc in processes:
            stop_process(proc)
        nats_server.stop_blocking()
        left = host.stop()
        if left:
            print(f"warning: left behind: {left}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
