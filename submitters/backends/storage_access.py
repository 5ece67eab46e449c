"""Whether the account a job runs as can use the site directories its storage volumes map to, told at Submit
when the submitter can tell: the directory exists here, and its permission bits decide (no ACL on it). A
directory missing on this host (a compute-node mount, a claim the job creates) or one with an ACL is left to
the job, which fails its set-up naming the volume if it cannot use it. I/O (stat, group lists)."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.core.backend import SubmitRejected

_ACL = "system.posix_acl_access"


def _groups(uid: int, gid: int) -> set[int]:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return {gid}
    return {gid, *os.getgrouplist(name, gid)}


def _bits(st: os.stat_result, uid: int, gid: int) -> int:
    """The rwx bits that apply to ``uid``/``gid`` (owner, else group, else other), as for the kernel."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == uid:
        return (mode >> 6) & 7
    if st.st_gid in _groups(uid, gid):
        return (mode >> 3) & 7
    return mode & 7


def _has_acl(path: str) -> bool:
    try:
        return _ACL in os.listxattr(path)
    except OSError:
        return True  # cannot tell: leave it to the job


def check_access(mounts: Iterable[pb.StorageMount], uid: int, gid: int) -> None:
    """SubmitRejected naming the pod field when account ``uid:gid`` cannot use a directory that exists here."""
    if uid == 0:
        return
    for mount in mounts:
        path = mount.site_path
        try:
            st = os.stat(path)
        except OSError:
            continue  # not on this host, or made by the job: the job's own set-up tells
        if not stat.S_ISDIR(st.st_mode) or _has_acl(path):
            continue
        need = 5 if mount.read_only else 7
        if _bits(st, uid, gid) & need != need:
            what = "read" if mount.read_only else "read and write"
            raise SubmitRejected(
                f"{mount.field}: the namespace's account ({uid}:{gid}) cannot {what} {path} on this site "
                f"(mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid}:{st.st_gid})"
            )


def check_own_access(mounts: Iterable[pb.StorageMount]) -> None:
    """:func:`check_access` for a job that runs as this process's own account: the kernel's own answer
    (``os.access``, ACLs included) for each directory that exists here."""
    if os.geteuid() == 0:
        return
    for mount in mounts:
        path = mount.site_path
        if not os.path.isdir(path):
            continue
        need = os.R_OK | os.X_OK | (0 if mount.read_only else os.W_OK)
        if not os.access(path, need):
            what = "read" if mount.read_only else "read and write"
            raise SubmitRejected(f"{mount.field}: this pool's account cannot {what} {path} on this site")
