"""What the submit, recovery and query modules share: one instance's identity and its parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import Clock
from interlink_nats.submitters.backends.base import Backend, JobSpec
from interlink_nats.submitters.outbox import Outbox
from interlink_nats.submitters.polling import Poller
from interlink_nats.submitters.registry import Registry
from interlink_nats.submitters.registry_schema import JobRow


@dataclass(frozen=True, slots=True)
class Instance:
    pool: str
    instance_id: str
    state_dir: Path
    backend: Backend
    clock: Clock
    outbox: Outbox
    poller: Poller
    registry: Callable[[], Registry]
    """The open registry; raises ``errors.Unavailable`` when the submitter is not running."""

    @property
    def lock_dir(self) -> Path:
        return self.state_dir / "instances"


def job_spec(row: JobRow, job: pb.JobScript | None = None) -> JobSpec:
    """The backend's view of a registered job (its script already sits in the job directory).

    ``job``: the request's JobScript when at hand, which spares parsing the stored copy.
    """
    if job is None:
        job = row.job_spec()
    return JobSpec(
        uid=row.uid,
        job_dir=row.job_dir,
        script=row.job_dir / layout.SCRIPT_NAME,
        resources=job.resources,
        backend_flags=tuple(job.backend_flags),
        namespace=row.namespace,
        name=row.name,
    )
