"""What ``lifecycle.py`` reads of the processes it measures: a cgroup's CPU, system time, the sampler's profile by
phase (which frames make which phase of a pod's life at the submitter)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from _harness import cpu_seconds

PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (phase, substrings of "file:function"); the innermost frame any rule names decides (rules in this order).
    ("cleanup", ("jobdirs/files.py:remove_ended_layout",)),
    ("publish", ("state/outbox.py:", "edge/announcer.py:")),
    (
        "launch",
        (
            "shell/processes.py:launch",  # not the module's file reads: the poll's too
            "shell/processes.py:_read",
            "shell/processes.py:_ensure",
            "shell/backend.py:_launch",
            "shell/backend.py:_watch_exit",
            "shell/backend.py:exited",
            "shell/backend.py:_reap",
            "slurm/backend.py:submit",  # sbatch
        ),
    ),
    (
        "poll",
        (
            "engine/polling.py:",
            "shell/backend.py:poll",
            "slurm/backend.py:poll",  # squeue, sacct
            "slurm/backend.py:_observe",
            "core/lifecycle.py:",
            "core/status.py:",
        ),
    ),
    ("create", ("engine/submission.py:", "edge/service.py:", "shell/backend.py:submit", "state/batching.py:")),
    ("nats", ("nats/",)),
)


def system_seconds(pid: int) -> float:
    """The kernel's CPU on the process's behalf (``stime``): on the create path mostly the file system's inodes."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[12]) / os.sysconf("SC_CLK_TCK")


IDLE_WAKE = """
import sys, time
from pathlib import Path
def ran():
    return int(Path("/proc/self/schedstat").read_text().split()[0])
turns = int(sys.argv[1])
time.sleep(0.5)
before = ran()
for _ in range(turns):
    time.sleep(0.5)
print((ran() - before) / turns / 1e6)
"""
"""A process that sleeps 0.5 s, wakes and sleeps again: its CPU per turn (``python -c IDLE_WAKE <turns>``, in ms)
is what one wake-up of an idle process costs on this machine, printed beside the figures it inflates."""


def idle_wake_ms(turns: int = 8) -> float:
    """The machine's cost of one wake-up of a process that idled 0.5 s, in ms of CPU (``IDLE_WAKE``)."""
    out = subprocess.run([sys.executable, "-c", IDLE_WAKE, str(turns)], capture_output=True, text=True, check=True)
    return float(out.stdout)


def ran_seconds(pid: int) -> float:
    """The CPU the process's threads ran, to the nanosecond (``schedstat``; ``/proc/<pid>/stat`` counts 10 ms
    ticks, too coarse for an idle process over a few seconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def wakeups(pid: int) -> int:
    """How often the process's threads were woken from a wait (their voluntary context switches, summed).

    A stable figure where CPU time is not: on a virtual machine each wake-up of a process that idled costs it
    CPU for the caches and the vCPU's return, more the longer it idled (``IDLE_WAKE``'s yardstick)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def phase_of(stack: list[str]) -> str:
    """The phase of one sampled stack (outermost frame first)."""
    if stack and stack[-1].endswith("asyncio/runners.py:run"):
        return "loop"  # no Python frame above the loop's: uvloop's C code (epoll, socket and pipe I/O, timers)
    for frame in reversed(stack):
        for phase, markers in PHASES:
            if any(m in frame for m in markers):
                return phase
    return "other"


class CgroupCpu:
    """The CPU of the submitter and every process below it (jobs included), from a cgroup v1 ``cpuacct`` group
    the bench makes: the launcher ignores SIGCHLD (the kernel reaps the runners), so no ``cutime`` counts them.
    ``None`` figures where the bench may not make one (not root, no cpuacct hierarchy)."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, pids: list[int], label: str) -> None:
        self.path: Path | None = self.ROOT / f"bench-lifecycle-{os.getpid()}-{label}"
        try:
            self.path.mkdir()
            for pid in pids:
                (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            self.remove()
            self.path = None

    def read(self) -> float | None:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9 if self.path else None

    def remove(self) -> None:
        """Move what is left (a launcher that outlived its submitter) back to the root group, and drop ours."""
        if self.path:
            with contextlib.suppress(OSError):
                for pid in (self.path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.ROOT / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                self.path.rmdir()


class Profile:
    """The submitter's sampled stacks, read at a window's edges (SIGUSR2 stops the sampler and makes it write
    them; :meth:`start` starts it again)."""

    def __init__(self, pid: int, path: Path) -> None:
        self.pid, self.path = pid, path

    def start(self) -> None:
        os.kill(self.pid, signal.SIGUSR1)

    def read(self) -> Counter[tuple[str, ...]]:
        before = self.path.stat().st_mtime_ns if self.path.exists() else 0
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.path.exists() and self.path.stat().st_mtime_ns != before:
                try:
                    data = json.loads(self.path.read_text())
                except ValueError:
                    time.sleep(0.01)
                    continue
                return Counter({tuple(s[1:]): int(s[0]) for s in data["stacks"]})
            time.sleep(0.01)
        raise RuntimeError("the submitter's sampler did not answer SIGUSR2")

    @staticmethod
    def phases(before: Counter[tuple[str, ...]], after: Counter[tuple[str, ...]]) -> Counter[str]:
        out: Counter[str] = Counter()
        for stack, n in (after - before).items():
            out[phase_of(list(stack))] += n
        return out


def own_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid)[0] for pid in pids)
