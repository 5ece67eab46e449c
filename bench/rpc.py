"""Benchmark: Submit over the RPC layer vs raw nats-py request-reply with the same payload bytes.

Run: ``.venv/bin/python bench/rpc.py [--reps 5] [--in-flight 64]``. Starts its own nats-server and a
responder process (RpcServer for the RPC case, a bare callback echoing fixed reply bytes for the
raw case), then alternates the two cases in the same run so machine noise hits both alike.
Prints a table and, as the last line, one JSON object with the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import nats
from interlink_nats.gen.interlink_nats.v1 import (
    JobScript,
    PodRef,
    ResourceRequest,
    SubmitRequest,
    SubmitResponse,
    SubmitterServiceBase,
)
from interlink_nats.services.bus.rpc import RpcServer, submitter_client
from interlink_nats.services.ops.nats_server import NatsServerProcess

sys.path.insert(0, str(Path(__file__).parent))
from _harness import closed_loop_calls

POOL = "bench"
RAW_SUBJECT = "bench.raw.submit"


def realistic_request() -> SubmitRequest:
    """A SubmitRequest with a ~4 KB rendered batch script, like the gateway sends for a typical pod."""
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=default-train-7f9c",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=16G",
        "#SBATCH --time=02:00:00",
        "set -euo pipefail",
    ]
    lines += [f"export ENV_VAR_{i:02d}='value-{i:02d}-{'abcdef0123456789' * 2}'" for i in range(60)]
    lines += [
        "apptainer exec --nv --bind /scratch:/scratch docker://registry.example/ml/train:1.4.2 \\",
        "  python -m train --epochs 10 --data /scratch/data --out /scratch/out",
        "echo done",
    ]
    return SubmitRequest(
        job=JobScript(
            pod=PodRef(uid="5f1c6c3e-8a1d-4b8e-9d7e-2c8f0b6a1e42", namespace="default", name="train-7f9c"),
            script="\n".join(lines) + "\n",
            containers=["train"],
            resources=ResourceRequest(cpu_millis=4000, memory_bytes=16 << 30, gpus=1, wall_time=timedelta(hours=2)),
            backend_flags=["--partition=gpu", "--account=proj42"],
        )
    )


REPLY = SubmitResponse(job_id="1234567", created=True)


class BenchSubmitter(SubmitterServiceBase):
    async def submit(self, message: SubmitRequest) -> SubmitResponse:
        return REPLY


async def serve(url: str) -> None:
    """The responder process: both cases, until stdin closes."""
    nc = await nats.connect(url)
    reply_bytes = bytes(REPLY)

    async def raw(msg: nats.aio.msg.Msg) -> None:
        await nc.publish(msg.reply, reply_bytes)

    await nc.subscribe(RAW_SUBJECT, queue=POOL, cb=raw)
    server = RpcServer(nc, [BenchSubmitter()], pool=POOL, max_concurrency=64)
    await server.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(grace_s=1)
    await nc.close()


async def measure(call: Callable[[], Awaitable[object]], count: int, in_flight: int) -> tuple[float, float]:
    """(requests per second, p50 latency ms) for ``count`` calls with ``in_flight`` concurrent workers."""
    latencies, elapsed = await closed_loop_calls(call, count, in_flight)
    return count / elapsed, statistics.median(latencies) * 1000


async def main(reps: int, in_flight: int, rpc_count: int, raw_count: int) -> dict[str, float]:
    async with NatsServerProcess() as server:
        responder = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--serve",
            server.url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert responder.stdout is not None
        assert responder.stdin is not None
        try:
            async with asyncio.timeout(30):
                ready = await responder.stdout.readline()
            if ready.strip() != b"ready":
                raise RuntimeError(f"responder did not start: {ready!r}")
            nc = await nats.connect(server.url)
            request = realistic_request()
            payload = bytes(request)
            stub = submitter_client(nc, POOL, timeout=30)

            async def rpc() -> object:
                return await stub.submit(request)

            async def raw() -> object:
                return await nc.request(RAW_SUBJECT, payload, timeout=30)

            await measure(rpc, 300, in_flight)  # warm-up
            await measure(raw, 300, in_flight)
            rows: dict[str, list[tuple[float, float]]] = {"rpc": [], "raw": []}
            for rep in range(reps):
                rows["rpc"].append(await measure(rpc, rpc_count, in_flight))
                rows["raw"].append(await measure(raw, raw_count, in_flight))
                print(
                    f"rep {rep + 1}/{reps}: rpc {rows['rpc'][-1][0]:8.0f}/s  raw {rows['raw'][-1][0]:8.0f}/s",
                    file=sys.stderr,
                )
            await nc.close()
        finally:
            responder.stdin.close()
            try:
                async with asyncio.timeout(10):
                    await responder.wait()
            except TimeoutError:
                responder.kill()
                await responder.wait()

    result = {
        "rpc_per_s": round(statistics.median(r for r, _ in rows["rpc"]), 1),
        "raw_per_s": round(statistics.median(r for r, _ in rows["raw"]), 1),
        "rpc_p50_ms": round(statistics.median(p for _, p in rows["rpc"]), 3),
        "raw_p50_ms": round(statistics.median(p for _, p in rows["raw"]), 3),
    }
    result["ratio"] = round(result["rpc_per_s"] / result["raw_per_s"], 3)
    result.update(payload_bytes=len(payload), in_flight=in_flight, reps=reps)

    print(f"\nSubmit, {len(payload)} B request, {in_flight} in flight, median of {reps} reps")
    print(f"{'case':<6}{'req/s':>12}{'p50 ms':>10}")
    print(f"{'rpc':<6}{result['rpc_per_s']:>12,.0f}{result['rpc_p50_ms']:>10.2f}")
    print(f"{'raw':<6}{result['raw_per_s']:>12,.0f}{result['raw_p50_ms']:>10.2f}")
    print(f"rpc/raw throughput ratio: {result['ratio']:.2f}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rpc-count", type=int, default=3000)
    parser.add_argument("--raw-count", type=int, default=10000)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
    else:
        outcome = asyncio.run(main(args.reps, args.in_flight, args.rpc_count, args.raw_count))
        print(json.dumps(outcome))
