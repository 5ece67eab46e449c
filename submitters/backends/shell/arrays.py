"""``RunsArrays`` for the shell backend: the members of an array run as N local jobs.

On one host there is nothing to relieve (no scheduler records, no submission limits): each member is submitted
exactly as a single job (its run-once claim, pid and exit files, poll and cancel unchanged), so an array's member
job id is the member's own (its pod uid), and the feature is usable and testable everywhere. The array's job id
is its uid. ``find_array`` finds the array when any member's job was claimed (each claim is run-once, so
submitting the others again starts nothing twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from interlink_nats.submitters.core.backend import ArraySpec, JobHandle, JobSpec, Reconciled


class _Host(Protocol):
    """What the array methods need of ``ShellBackend``."""

    async def submit(self, spec: JobSpec) -> str: ...

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]: ...


class ShellArrays:
    """Mixed into ``ShellBackend``."""

    async def submit_array(self: _Host, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        ids = [await self.submit(member) for member in array.members]
        return array.array_uid, tuple(ids)

    async def find_array(self: _Host, array: ArraySpec) -> Reconciled:
        found = await self.reconcile([m.handle for m in array.members])
        if any(r.job_id is not None for r in found.values()):
            return Reconciled(array.array_uid)
        return Reconciled(None)

    def member_job_ids(self, array: ArraySpec, array_job_id: str) -> tuple[str, ...]:
        return tuple(m.uid for m in array.members)
