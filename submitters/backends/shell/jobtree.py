"""A shell job's whole process tree: kept together by a subreaper, found through ``/proc``, stopped, then killed.

Why: a job's processes need not stay in its process group or session (``setsid``, a double fork, a runtime
``none`` command that daemonizes); signalling the runner's group and watching the runner's pid left them running
after a delete. Each runner is made a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, Linux ≥ 3.4, no privilege
needed) before it starts ``job.sh``: a process of the job whose parent ends is re-parented to the runner, not to
init, so every process of the job stays a descendant of the runner, whatever it does with sessions and groups.
A kill then walks the runner's descendants (``/proc/*/stat``'s parent pids), SIGSTOPs each (a stopped process
cannot fork), walks again until nothing new appears, and SIGKILLs them all.

Why not a cgroup per job: the one mechanism no process can leave, but a submitter can make one only with a
delegated cgroup v2 subtree (root, or systemd's ``Delegate=``), which neither the compose container nor an
unprivileged site install has; the subreaper works for every submitter. Its limits (docs/backends/shell.md): a
process that leaves the tree by other means than its parent ending (started by another daemon: ``at``,
``systemd-run``, ``ssh localhost``; podman's containers are under conmon, which the janitor removes), or a
setuid process an unprivileged submitter may not signal, is not reached; and a runner killed from outside
(OOM killer, ``kill -9``) passes its orphans to init.

Stdlib only, and runnable as a script (``python -I -S jobtree.py …``): the launcher and the runner use it
without the package. ``interlink-shell-launch``: the launcher (:mod:`.processes` says why one); ``reap PID``:
kill what is left below a runner once its ``job.sh`` ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

CLAIM = ".shell.claim"
CLAIM_LAUNCHER = f"{CLAIM}/launcher"
"""Inside the claim: pid of the launcher that made it (written before the runner is forked)."""
CLAIM_RUNNER = f"{CLAIM}/runner"
"""Inside the claim: pid of the runner it forked (written right after the fork)."""
RUNNER_NAME = "interlink-shell-job"
LAUNCHER_NAME = "interlink-shell-launch"
PR_SET_CHILD_SUBREAPER = 36
STOP_ROUNDS = 100
LEFTOVER_WAIT_S = 2.0
"""How long what ``job.sh`` left may take to end by itself before it is killed: a podman container's conmon
(re-parented to the runner) runs its clean-up command just after the container's client returned."""
"""Walks of a tree being stopped before killing what was found (each finds only processes forked meanwhile)."""


def become_subreaper() -> bool:
    """Make this process its descendants' subreaper; kept across ``execve``. False where the kernel refuses."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[1]), fields[0]
    except (IndexError, ValueError):
        return None


def descendants(root: int) -> set[int]:
    """The live (not zombie) processes below ``root``, from one pass over ``/proc``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            seen = _stat(int(name))
            if seen is not None and seen[1] not in "ZX":
                children.setdefault(seen[0], []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_tree(root: int, spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every process below ``root`` (not ``root``, nor ``spare``): stopped first, so none forks away
    between the walk and the kill. Returns how many were killed."""
    stopped: set[int] = set()
    for _ in range(STOP_ROUNDS):
        new = descendants(root) - stopped - spare
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return len(stopped)


def reap(runner: int) -> None:
    """What a runner's ``job.sh`` left (we are its child): given ``LEFTOVER_WAIT_S`` to end, then killed."""
    me = frozenset({os.getpid()})
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while descendants(runner) - me and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_tree(runner, me)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _launch(bash: str, runner: str, env_name: str) -> None:
    """Read NUL-terminated pairs (job directory, account "uid:gid" or empty) on stdin; claim each directory and
    fork its runner (its own process group, a subreaper, stdio on /dev/null); answer "<dir>\\0<pid>\\0", or
    "claimed" when the claim was made before. Runners are reaped by the kernel (SIGCHLD ignored, reset in each)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = str(os.getpid()).encode()
    out = sys.stdout.buffer
    pending = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        *pairs, pending = pending.split(b"\0")
        if len(pairs) % 2:
            pending = pairs.pop() + b"\0" + pending
        for k in range(0, len(pairs), 2):
            job_dir, account = pairs[k], pairs[k + 1]
            out.write(job_dir + b"\0" + _start(job_dir, account, me, bash, runner, env_name) + b"\0")
        out.flush()


def _start(job_dir: bytes, account: bytes, me: bytes, bash: str, runner: str, env_name: str) -> bytes:
    """Claim ``job_dir`` and fork its runner: the runner's pid, or ``claimed``."""
    try:
        os.mkdir(job_dir + b"/" + CLAIM.encode())
    except OSError:
        return b"claimed"
    _write(job_dir + b"/" + CLAIM_LAUNCHER.encode(), me)
    pid = os.fork()
    if pid == 0:  # the runner: nothing but system calls until exec
        try:
            os.setpgid(0, 0)
            for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores the last two: not the job
                signal.signal(sig, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            become_subreaper()
            os.environ[env_name] = os.fsdecode(job_dir)
            argv = [bash, "-c", runner, RUNNER_NAME, os.fsdecode(job_dir), bash, os.fsdecode(account)]
            os.execvp(bash, [*argv, sys.executable, os.path.abspath(__file__)])
        finally:
            os._exit(127)
    _write(job_dir + b"/" + CLAIM_RUNNER.encode(), str(pid).encode())
    return str(pid).encode()


def _write(path: bytes, text: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(text + b"\n")
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[1] == LAUNCHER_NAME:
        _launch(*argv[2:])
        return 0
    if len(argv) == 3 and argv[1] == "reap" and argv[2].isdigit():
        reap(int(argv[2]))
        return 0
    print(f"usage: {argv[0]} {LAUNCHER_NAME} BASH RUNNER ENV_NAME | reap PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
