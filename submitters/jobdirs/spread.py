"""Spread the job directories over the block groups of an ext2/3/4 file system (``chattr +T`` on ``jobs/``).

Why: ext4 without a journal never hands out an inode freed in the last 60 s (360 s while its inode table block
is not yet written back): a new inode skips each of them in its block group, reading its inode to see when it
was freed (``recently_deleted`` in fs/ext4/ialloc.c). The allocator puts a directory's subdirectories and files
in its own group, and every ended pod frees its layout at once (14 inodes for an interLink-shaped pod), so with
every job directory in the group of ``jobs/`` each new inode scanned the thousands freed there in the last
minutes: 85-90 % of the submitter's CPU over a pod's whole life (bench/lifecycle.py; ``perf``: under
``ext4_mkdir`` and ``ext4_symlink``, ``recently_deleted``). ``FS_TOPDIR_FL`` marks "the top of a directory
hierarchy": the Orlov allocator then places each new subdirectory of ``jobs/`` in a group it chooses among the
emptier ones, so the freed inodes are spread over the groups too. The flag is not inherited: a job directory's
layout stays in its own group, near its files. File systems without the flag refuse the ioctl: nothing changes.

Only without a journal: with one, ext4 checks no freed inode's age, and the mark only costs each new job directory
the Orlov allocator's walk over every group (50 µs a ``mkdir`` instead of 36 on a journaled 250 GB ext4 here), so a
journaled file system gets no mark, and loses one an earlier version gave it. A journal is told by the kernel's
own list of them (``/proc/fs/jbd2/<device>-<journal inode>``).
"""

from __future__ import annotations

import array
import os
import struct
import sys

TOPDIR_FL = 0x00020000
"""``FS_TOPDIR_FL`` (include/uapi/linux/fs.h), what ``chattr +T`` sets."""
_GENERIC_IOCTL_MACHINES = frozenset({"x86_64", "i386", "i686", "aarch64", "armv7l", "armv6l", "riscv64", "s390x"})
"""Architectures whose ioctl numbers follow asm-generic/ioctl.h (the encoding below); elsewhere nothing is tried."""
_LONG = struct.calcsize("l")
_GETFLAGS = (2 << 30) | (_LONG << 16) | (ord("f") << 8) | 1
"""``FS_IOC_GETFLAGS`` = ``_IOR('f', 1, long)``; the kernel reads and writes an int through it, as chattr does."""
_SETFLAGS = (1 << 30) | (_LONG << 16) | (ord("f") << 8) | 2
"""``FS_IOC_SETFLAGS`` = ``_IOW('f', 2, long)``."""


def spread_subdirectories(directory: str, jbd2: str = "/proc/fs/jbd2") -> bool:
    """Set ``FS_TOPDIR_FL`` on ``directory`` (its other flags kept) unless its file system keeps a journal; True
    when it is set (now or before).

    The owner may set it (no capability needed). False where the file system, the platform or the directory
    refuses; the jobs then run as before, only with the allocator's default placement. On a journaled file
    system the flag is taken off again (an earlier version set it everywhere) and this returns False.
    ``jbd2``: where the kernel lists the journals it runs (tests point it elsewhere)."""
    if sys.platform != "linux" or os.uname().machine not in _GENERIC_IOCTL_MACHINES:
        return False
    import fcntl

    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        wanted = not _journaled(os.fstat(fd).st_dev, jbd2)
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _GETFLAGS, flags, True)
        if bool(flags[0] & TOPDIR_FL) == wanted:
            return wanted
        flags[0] ^= TOPDIR_FL
        fcntl.ioctl(fd, _SETFLAGS, flags, True)
        return wanted
    except OSError:
        return False
    finally:
        os.close(fd)


def _journaled(device: int, jbd2: str) -> bool:
    """Whether the file system on ``device`` has a journal the kernel runs: jbd2 names each
    ``<block device>-<journal inode>``. No list (no journal anywhere: jbd2 not even loaded) or no name for the
    device (no sysfs): taken as none, the case where the mark matters. An external journal is listed under its own
    device, so its file system is marked as before: the walk costs it 14 µs a job directory, nothing worse."""
    try:
        name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}"))
        journals = os.listdir(jbd2)
    except OSError:
        return False
    return any(journal.rpartition("-")[0] == name for journal in journals)
