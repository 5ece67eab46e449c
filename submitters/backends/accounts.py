"""Running a job as the site's account for its namespace: resolve the account, hand the job directory over.

The decision is pure (:meth:`site_policy.AccountingPolicy.run_as`); this module does the I/O around it,
shared by the backends that switch accounts (shell through ``setpriv``, slurm through ``sbatch --uid``):
names become ids (``pwd``/``grp``), and the job directory, made by the submitter, is given to the account
so the script can write its container files and logs there. The submitter itself keeps reading them (it
is root whenever it switches), and cancels as before (root may signal any process, ``scancel`` any job).

Root is said out loud: a root submitter whose table switches accounts refuses a namespace whose rule names
no account (``run_as_user: root`` says root), and a root submitter says at start which namespaces run as root.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.storage_access import check_access, check_own_access
from interlink_nats.submitters.core.backend import JobSpec, SubmitRejected
from interlink_nats.submitters.core.site_policy import AccountingPolicy, PolicyError, RunAs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Identity:
    """Numeric ids a job runs as."""

    uid: int
    gid: int

    def __str__(self) -> str:
        return f"{self.uid}:{self.gid}"


def resolve(run_as: RunAs) -> Identity:
    """Names to ids (a number stands for itself); the group defaults to the user's primary group."""
    user = run_as.user
    try:
        if not user:
            uid = os.geteuid()
        elif user.isdigit():
            uid = int(user)
        else:
            uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise SubmitRejected(f"site account {user!r} does not exist on this host") from None
    group = run_as.group
    try:
        if group.isdigit():
            gid = int(group)
        elif group:
            gid = grp.getgrnam(group).gr_gid
        elif not user:
            gid = os.getegid()
        else:
            gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        what = f"group {group!r}" if group else f"uid {uid} (no runAsGroup, and no passwd entry to take one from)"
        raise SubmitRejected(f"site account {what} does not exist on this host") from None
    return Identity(uid, gid)


def job_identity(policy: AccountingPolicy | None, spec: JobSpec) -> Identity | None:
    """Whom ``spec`` runs as: None for the submitter's own account (also whenever the site has no policy:
    a pod's ``securityContext`` ids are then ignored, as before). A pod asking for what its namespace's rule
    does not allow, or a switch this process cannot make, is refused (SubmitRejected: the pod fails with it)."""
    if policy is None:
        return None
    try:
        key, run_as = policy.run_as_rule(spec.namespace, uid=spec.run_as_user, gid=spec.run_as_group)
    except PolicyError as exc:
        raise SubmitRejected(str(exc)) from exc
    if not run_as.user and os.geteuid() == 0 and policy.switches_accounts:
        raise SubmitRejected(
            f"namespace {spec.namespace!r} has no account to run as: site rule {key!r} sets no run_as_user, and "
            f"this submitter, being root, runs a namespace as root only where its rule says run_as_user: root"
        )
    if not run_as.user and not run_as.group:
        return None
    ident = resolve(run_as)
    if ident.uid == os.geteuid() and ident.gid == os.getegid():
        return None
    if os.geteuid() != 0:
        raise SubmitRejected(
            f"the site runs this namespace as {ident}, but the submitter is not root and cannot switch"
        )
    return ident


def root_warning(policy: AccountingPolicy | None) -> str | None:
    """What a root submitter says once at start about running jobs as root (None when it is not root)."""
    if os.geteuid() != 0:
        return None
    if policy is None or not policy.switches_accounts:
        return "the submitter runs as root and its accounting table switches no accounts: every job runs as root"
    parts = []
    refused = policy.rules_without_user()
    if refused:
        parts.append(
            f"site rule(s) {', '.join(map(repr, refused))} set no run_as_user: their pods are refused unless they "
            "ask for a runAsUser the rule allows (run_as_user: root runs them as root)"
        )
    root = policy.rules_as_root()
    if root:
        parts.append(f"site rule(s) {', '.join(map(repr, root))} run pods as root")
    return "; ".join(parts) or None


def warn_about_root(policy: AccountingPolicy | None) -> AccountingPolicy | None:
    """:func:`root_warning`, logged (a backend calls it once, at start); ``policy`` passes through."""
    warning = root_warning(policy)
    if warning:
        log.warning("%s", warning)
    return policy


def hand_over(job_dir: Path, ident: Identity) -> None:
    """Give the job directory (made by the submitter, nothing in it from elsewhere yet) to ``ident``, and make
    sure the account can reach it and append to the pool's change journal (a hint only: see polling)."""
    for root, dirs, files in os.walk(job_dir):
        os.lchown(root, ident.uid, ident.gid)
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), ident.uid, ident.gid)
    jobs = job_dir.parent
    for own in (jobs, jobs.parent):  # the jobs root and the state dir: the submitter's own
        mode = own.stat().st_mode
        if mode & 0o011 != 0o011:
            os.chmod(own, stat.S_IMODE(mode) | 0o011)  # search only: an account cannot list the other jobs
    journal = layout.changes_path(job_dir)
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o622)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o622:
            os.fchmod(fd, 0o622)
    finally:
        os.close(fd)
    for parent in jobs.parent.parents:
        if parent.stat().st_mode & 0o001 == 0:
            raise SubmitRejected(f"{parent} is not searchable by other accounts (o+x): jobs cannot run as {ident}")


def take_over(policy: AccountingPolicy, spec: JobSpec) -> Identity | None:
    """:func:`job_identity`, with the job directory handed over when the job runs as another account, once
    that account is known to be able to use the job's storage (where this host can tell)."""
    ident = job_identity(policy, spec)
    if ident is None:
        check_own_access(spec.storage)
        return None
    check_access(spec.storage, ident.uid, ident.gid)
    hand_over(spec.job_dir, ident)
    return ident
