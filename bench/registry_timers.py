"""What the submitter reads from its registry on a timer, against the history the retention keeps.

Two reads run whatever the pods do: the ResourceReport's recent usage (the jobs that ended in the last hour, every
``announce_interval_s``, 30 s shipped) and the owners of live or unpublished jobs (to adopt a dead replica's, every
third poll: 15 s at the shipped 5 s poll). Their cost must follow what is live, not the ``retention_days`` (7) of
ended jobs kept, or a site's submitter pays for its past at every tick: a pod's whole life then includes a share
of every read of the week it is kept.

For each history size a registry is built with ``Registry.open`` (the shipped schema) and filled with ended jobs
(an interLink-shaped pod's stored spec and a two-container final status with its usage), their end times spread
over the retention, a few live and unpublished rows among them. Timed (CPU of this process, medians of
``--rounds``), in the same run on the same rows:

- after: the registry's reads as shipped (``Registry.statuses_ended_since``, ``Registry.owners``, through its
  connection's thread, which this process's CPU counts) and ``core.usage.EndedUsage``
  at its steady state (the window read before, so only what changed is decoded);
- before: the same file without the two timer indexes (``jobs_by_finished``,
  ``jobs_ended_unpublished``) and the reads as
  they were until 2026-11-29 (every status in the window decoded at every report; ``SELECT DISTINCT owner ... OR
  published < revision``), restated here as the baseline.

Prints a table; the LAST line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import print_table
from _pods import SHAPES
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import usage as kernel_usage
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.core import fastwire
from interlink_nats.submitters.core.lifecycle import LIVE_PHASES
from interlink_nats.submitters.core.usage import EndedUsage
from interlink_nats.submitters.state.registry import Registry

RETENTION_S = 7 * 86400
WINDOW_S = 3600
USAGE_EVERY_S = 30.0
OWNERS_EVERY_S = 15.0
BEFORE_USAGE = "SELECT status FROM jobs WHERE finished_at >= ? AND status IS NOT NULL"
BEFORE_OWNERS = "SELECT DISTINCT owner FROM jobs WHERE phase IN (?, ?) OR published < revision"


def ended_status(uid: str) -> bytes:
    status = pb.JobStatus(
        pod=pb.PodRef(uid=uid, namespace="bench", name="bench-pod"),
        state=pb.JobState.SUCCEEDED,
        job_id="4242",
        containers=[pb.ContainerStatus(name=name, exit_code=0, reason="Completed") for name in ("main", "sidecar")],
        usage=pb.JobUsage(millicpu_seconds=100_000, memory_mib_seconds=6_400, wall_millis=1_000_000, source=1),
    )
    return bytes(status)


def fill(path: Path, rows: int, now: float) -> None:
    """``rows`` ended jobs over the retention, one in 500 live, one in 1,000 with an event not yet published."""
    job = render_job(SHAPES["interlink"].make(0, "timers", "bench"), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    spec = fastwire.job_spec(job)
    rng = random.Random(7)
    values = []
    for i in range(rows):
        uid = str(uuid.UUID(int=rng.getrandbits(128)))
        live = i % 500 == 0
        values.append(
            (
                uid,
                "bench",
                "bench-pod",
                "active" if live else "done",
                "4242",
                "host-a",
                f"/state/jobs/{uid}",
                "[]",
                '["main","sidecar"]',
                spec,
                3,
                ended_status(uid),
                3,
                2 if i % 1000 == 1 else 3,
                now - RETENTION_S,
                now,
                None if live else now - rng.random() * RETENTION_S,
            )
        )
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO jobs (uid, namespace, name, phase, job_id, owner, job_dir, init_containers, containers, spec,"
            " state, status, revision, published, created_at, updated_at, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            values,
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the main file: the baseline is a copy of it
    conn.close()


def cpu_ms(read: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        read()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


async def _create(path: Path) -> None:
    await (await Registry.open(path)).close()


def measure(tmp: Path, size: int, rounds: int) -> dict[str, float]:
    """One history size: the shipped registry and its index-less copy, each read as its code reads it."""
    now = time.time()
    after_path = tmp / f"after-{size}.sqlite3"

    asyncio.run(_create(after_path))
    fill(after_path, size, now)
    before_path = tmp / f"before-{size}.sqlite3"
    shutil.copy(after_path, before_path)
    with sqlite3.connect(before_path) as conn:
        conn.execute("DROP INDEX jobs_by_finished")
        conn.execute("DROP INDEX jobs_ended_unpublished")
    loop = asyncio.new_event_loop()  # the shipped reads, through the registry as the submitter makes them
    after = loop.run_until_complete(Registry.open(after_path))
    before = sqlite3.connect(before_path)
    since = now - WINDOW_S
    tally = EndedUsage()

    def usage_after() -> pb.JobUsage:
        return tally.summed(loop.run_until_complete(after.statuses_ended_since(since)))

    def usage_before() -> pb.JobUsage:
        raw = [bytes(r[0]) for r in before.execute(BEFORE_USAGE, (since,))]
        return kernel_usage.summed(u for u in map(kernel_usage.usage_in_status, raw) if u is not None)

    def owners_after() -> set[str]:
        return loop.run_until_complete(after.owners())

    def owners_before() -> set[str]:
        return {str(r[0]) for r in before.execute(BEFORE_OWNERS, LIVE_PHASES)}

    try:
        assert usage_after() == usage_before(), "the same sum either way"
        assert owners_after() == owners_before() == {"host-a"}
        got = {
            "usage_before_ms": cpu_ms(usage_before, rounds),
            "usage_after_ms": cpu_ms(usage_after, rounds),
            "owners_before_ms": cpu_ms(owners_before, rounds),
            "owners_after_ms": cpu_ms(owners_after, rounds),
            "rows_in_usage_window": float(len(loop.run_until_complete(after.statuses_ended_since(since)))),
        }
    finally:
        loop.run_until_complete(after.close())
        loop.close()
        before.close()
    got["cpu_ms_per_s_before"] = got["usage_before_ms"] / USAGE_EVERY_S + got["owners_before_ms"] / OWNERS_EVERY_S
    got["cpu_ms_per_s_after"] = got["usage_after_ms"] / USAGE_EVERY_S + got["owners_after_ms"] / OWNERS_EVERY_S
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 30_000, 100_000])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-registry-timers-"))
    rows_out: list[list[object]] = []
    figures: dict[str, dict[str, float]] = {}
    try:
        for size in args.sizes:
            got = measure(tmp, size, args.rounds)
            figures[str(size)] = {k: round(v, 4) for k, v in got.items()}
            per_s_before, per_s_after = got["cpu_ms_per_s_before"], got["cpu_ms_per_s_after"]
            rows_out.append(
                [
                    size,
                    int(got["rows_in_usage_window"]),
                    f"{got['usage_before_ms']:.2f}",
                    f"{got['usage_after_ms']:.3f}",
                    f"{got['owners_before_ms']:.2f}",
                    f"{got['owners_after_ms']:.3f}",
                    f"{per_s_before:.3f}",
                    f"{per_s_after:.4f}",
                    f"{per_s_before / max(per_s_after, 1e-6):.0f}x",
                ]
            )
        print_table(
            "the submitter's timed registry reads against the history kept (7 days of ended jobs; recent usage every"
            f" {USAGE_EVERY_S:g} s, owners every {OWNERS_EVERY_S:g} s); CPU ms per read, medians of {args.rounds}",
            [
                "jobs kept",
                "in the hour",
                "usage before",
                "usage after",
                "owners before",
                "owners after",
                "ms/s before",
                "ms/s after",
                "before/after",
            ],
            rows_out,
        )
        print(json.dumps({"sizes": figures, "rounds": args.rounds}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
