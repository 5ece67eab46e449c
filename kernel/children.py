"""Children that die with us: a process we spawn must not outlive us, even when we are killed -9.

Linux's ``prctl(PR_SET_PDEATHSIG)`` makes the kernel signal the child when its parent goes; other
systems get no such guarantee (the function returns None and the caller spawns as before).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child we spawn get ``sig`` when we die, even by SIGKILL (Linux only).

    The function is built before the fork (no library lookup in the child); it also exits at once when
    the parent died between the fork and the ``prctl``. The kernel sends the signal when the *thread*
    that forked exits, so spawn from a thread that lives as long as the child is wanted.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
