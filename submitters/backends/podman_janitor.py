"""Podman janitor: removes the containers of pods this host no longer runs.

The rendered podman script stops and removes its own containers when it is signalled (cancel,
deadline). Two cases it cannot cover: the script is killed outright (the shell backend's SIGKILL
after the grace period), and the host or submitter went down while containers ran on. Every
container carries labels (services/scripts/layout.py) naming its pod UID and its job directory, so
the shell backend can find them from outside: by pod UID when it cancels, and at start-up by job
directory, keeping only the containers whose job script is still alive.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.core.backend import BackendError

log = logging.getLogger(__name__)

COMMAND_TIME_LIMIT = 60.0


class PodmanJanitor:
    """Finds and removes labelled podman containers; every failure is logged, never raised."""

    def __init__(self, executable: str = "podman") -> None:
        self.executable = executable

    async def _podman(self, *args: str) -> str | None:
        try:
            done = await run_command([self.executable, *args], time_limit=COMMAND_TIME_LIMIT, command="podman")
        except BackendError as exc:
            log.warning("podman janitor: %s", exc)
            return None
        return done.stdout

    async def remove_pod(self, uid: str) -> None:
        """Kill and remove every container of pod ``uid`` (a no-op when there is none)."""
        await self._podman("rm", "--force", "--time", "0", "--filter", f"label={layout.LABEL_POD_UID}={uid}")

    async def job_dirs(self) -> dict[str, Path]:
        """Container id -> job directory of every labelled container, running or not."""
        out = await self._podman("ps", "--all", "--format", "json", "--filter", f"label={layout.LABEL_JOB_DIR}")
        if not out:
            return {}
        try:
            rows = json.loads(out)
        except ValueError:
            log.warning("podman janitor: cannot parse `podman ps` output")
            return {}
        found: dict[str, Path] = {}
        for row in rows if isinstance(rows, list) else []:
            labels = row.get("Labels") or {}
            job_dir = labels.get(layout.LABEL_JOB_DIR)
            if isinstance(job_dir, str) and job_dir and isinstance(row.get("Id"), str):
                found[row["Id"]] = Path(job_dir)
        return found

    async def sweep(self, job_alive: Callable[[Path], bool | None]) -> int:
        """Remove containers whose job is over; ``job_alive`` answers None for a job that is not ours."""
        orphans = [cid for cid, job_dir in (await self.job_dirs()).items() if job_alive(job_dir) is False]
        if not orphans:
            return 0
        await self._podman("rm", "--force", "--ignore", "--time", "0", *orphans)
        log.info("podman janitor: removed %d containers of jobs that no longer run", len(orphans))
        return len(orphans)
