"""Reconcile after a crash for the backends that name a job by its pod uid (slurm, htcondor).

Only how a batch system is asked for the uids differs; what an answer means (found, ran but forgotten,
never submitted) must be the same in every backend, so it is written once here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import JobHandle, Reconciled

FindByUid = Callable[[list[JobHandle]], Awaitable[dict[str, str]]]
"""The backend's lookup of jobs whose id was never recorded: pod uid → batch-system id, for those it knows."""


async def reconcile_by_uid(jobs: Sequence[JobHandle], find: FindByUid) -> dict[str, Reconciled]:
    """``Backend.reconcile``: a recorded id stands; the others are looked up once, all together, with ``find``."""
    out = {j.uid: Reconciled(j.job_id) for j in jobs if j.job_id}
    unknown = [j for j in jobs if not j.job_id]
    if not unknown:
        return out
    found = await find(unknown)
    for job in unknown:
        if job.uid in found:
            out[job.uid] = Reconciled(found[job.uid])
        elif await asyncio.to_thread(ran, job.job_dir):
            out[job.uid] = Reconciled("")  # it ran (output exists) but the batch system forgot it
        else:
            out[job.uid] = Reconciled(None)
    return out


def ran(job_dir: Path) -> bool:
    """Evidence that a job started: the batch system wrote its output, or a container wrote a file."""
    if (job_dir / layout.JOB_STDOUT).exists():
        return True
    cdir = job_dir / layout.CONTAINERS_DIR
    return cdir.is_dir() and any(cdir.iterdir())
