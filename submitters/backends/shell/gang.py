"""``RunsGangs`` for the shell backend: a pod group is ONE job whose script is the gang's launcher.

Why one job: the launcher is written to the gang's directory as its ``job.sh`` and launched exactly like a
single job whose uid is the group uid (the run-once claim, the pid and exit files, poll, cancel and
reconcile all work unchanged on the gang's handle); cancelling it signals its process group, which holds the
launcher and every member's script. The launcher itself is :func:`gang_script.render_gang_launcher`.

Accounts (site policy ``run_as_*``): each member is resolved and handed its job directory as a single pod
would be, and the launcher (the submitter's account, root whenever accounts switch) starts that member's
script through ``setpriv``; a member the policy refuses refuses the whole gang, naming it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.accounts import take_over, warn_about_root
from interlink_nats.submitters.backends.shell.gang_script import MemberRun, render_gang_launcher
from interlink_nats.submitters.core.backend import GangSpec, JobHandle, JobSpec, Reconciled, SubmitRejected
from interlink_nats.submitters.core.site_policy import AccountingPolicy

MEMBERS_FILE = ".gang.members"
"""In the gang's directory: its members' pod uids, one a line, so a cancel removes their podman containers."""
GANG_OF_FILE = ".gang.of"
"""In a member's job directory: its gang's directory, so the start-up sweep asks whether that job still runs."""


def pods_of(job: JobHandle) -> list[str]:
    """The pods whose containers a cancel of ``job`` removes: its own, and every member's when it is a gang."""
    try:
        members = (job.job_dir / MEMBERS_FILE).read_text().split()
    except OSError:
        members = []
    return [job.uid, *members]


def member_alive(job_dir: Path, job_alive: Callable[[Path], bool | None]) -> bool | None:
    """Whether a gang member's job still runs (its gang's, until the launcher recorded its end); None when
    ``job_dir`` is no member of a gang of this backend."""
    try:
        gang_dir = Path((job_dir / GANG_OF_FILE).read_text().strip())
    except OSError:
        return None
    if (job_dir / layout.GANG_MEMBER_EXIT).exists():
        return False
    return job_alive(gang_dir) if gang_dir != job_dir else None


class _Host(Protocol):
    """What the gang methods need of ``ShellBackend``."""

    _accounting: AccountingPolicy | None
    _bash: str
    _queued: set[str]
    _starting: set[str]
    _running: dict[str, Any]

    def _enqueue(self, spec: JobSpec) -> None: ...

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]: ...


def _accounts(policy: AccountingPolicy | None, members: Sequence[JobSpec]) -> list[str]:
    out = []
    for rank, spec in enumerate(members):
        try:
            ident = take_over(policy, spec) if policy is not None else None
        except SubmitRejected as exc:
            raise SubmitRejected(f"pod group member {rank} ({spec.namespace}/{spec.name}): {exc}") from None
        out.append(str(ident) if ident is not None else "")
    return out


def _write_launcher(job_dir: Path, text: str, members: Sequence[JobSpec]) -> Path:
    """The launcher as the gang's ``job.sh`` (0700), written atomically: a retry rewrites the same text. With
    it, the files that tie the gang and its members together (``MEMBERS_FILE``, ``GANG_OF_FILE``)."""
    os.makedirs(job_dir, 0o700, exist_ok=True)
    (job_dir / MEMBERS_FILE).write_text("".join(f"{m.uid}\n" for m in members))
    for m in members:
        (m.job_dir / GANG_OF_FILE).write_text(f"{job_dir}\n")
    path = job_dir / layout.SCRIPT_NAME
    tmp = job_dir / f".{layout.SCRIPT_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o700)
    try:
        os.fchmod(fd, 0o700)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


class ShellGangs:
    """Mixed into ``ShellBackend`` (with, for want of room there, its accounting table's reload)."""

    def set_accounting(self: _Host, policy: AccountingPolicy | None) -> None:
        """A reloaded accounting table (SIGHUP): whose account the jobs submitted from now on run as."""
        self._accounting = warn_about_root(policy)

    async def submit_gang(self: _Host, gang: GangSpec) -> str:
        accounts = await asyncio.to_thread(_accounts, self._accounting, gang.members)
        text = render_gang_launcher(
            [MemberRun(os.fspath(m.job_dir), a) for m, a in zip(gang.members, accounts, strict=True)],
            group_name=gang.name or gang.uid,
            host=socket.gethostname(),
            policy=gang.failure_policy,
            bash=self._bash,
        )
        script = await asyncio.to_thread(_write_launcher, gang.job_dir, text, gang.members)
        if gang.uid not in self._queued and gang.uid not in self._running and gang.uid not in self._starting:
            self._enqueue(JobSpec(gang.uid, gang.job_dir, script, namespace=gang.namespace, name=gang.name))
        return gang.uid

    async def find_gang(self: _Host, gang: GangSpec) -> Reconciled:
        found = await self.reconcile([JobHandle(gang.uid, gang.job_dir)])
        return found.get(gang.uid, Reconciled(None))
