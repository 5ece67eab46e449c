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

The job's layout (its volume directories, runtime ``none``'s links: ``JobScript.layout``) is made here too, in the
runner between its fork and its exec of bash (the submitter passes it with the launch): the file-system work is
then no part of the submitter's CPU, and the script, finding the layout, forks nothing to make it. Where the job
runs as another account the runner makes it as that account (effective ids switched, then back). When ``job.sh``
ended the runner asks the launcher, over a pipe, to remove the ended layout (``ENDED_JOB_LAYOUT``: by descriptor,
never through a link, logs and exit files stay), and waits for its answer before it writes its exit file: a poll
that sees the job end finds the layout gone. Why the launcher: bash cannot remove a tree without forking ``rm``,
and a Python started per job costs ten times the removal; the launcher is there, a Python, already running. A
launcher gone meanwhile (the submitter restarted) answers by closing the pipe: the runner goes on, and the
submitter removes what it finds left.

Stdlib only, and runnable as a script (``python -I -S jobtree.py …``): the launcher and the runner use it
without the package. ``interlink-shell-launch``: the launcher (:mod:`.processes` says why one); ``reap PID``:
kill what is left below a runner once its ``job.sh`` ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import selectors
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
ENDED_JOB_LAYOUT = (".prepared", "volumes", "rootfs")
"""``kernel.layout.ENDED_JOB_LAYOUT`` (a test holds them equal): this file runs without the package."""
PREPARED_FILE = ".prepared"
DONE_FD, ANSWER_FD = 3, 4
"""In a runner whose layout the launcher removes: where it writes its job directory when ``job.sh`` ended, and
where it reads the launcher's answer (end of file: removed, or the launcher is gone)."""


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
    """Read NUL-terminated triples (job directory, account "uid:gid" or empty, layout or empty) on stdin; claim
    each directory and fork its runner (its own process group, a subreaper, stdio on /dev/null); answer
    "<dir>\\0<pid>\\0", or "claimed" when the claim was made before. Runners are reaped by the kernel (SIGCHLD
    ignored, reset in each). Meanwhile remove the ended layout of each runner that asks (:func:`_removed`)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = str(os.getpid()).encode()
    out = sys.stdout.buffer
    done_r, done_w = os.pipe()  # both close on exec: a runner gets its own copy of ``done_w`` only
    answers: dict[bytes, int] = {}
    """By job directory: the write end of its runner's answer pipe, closed once its layout is removed."""
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(done_r, selectors.EVENT_READ)
    pending = done = b""
    while True:
        for key, _ in sel.select():
            if key.fd == done_r:
                done = _removed(done + os.read(done_r, 65536), answers)
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return  # our answer pipes close with us: their runners go on (the submitter removes what is left)
            pending += chunk
            *fields, pending = pending.split(b"\0")
            if len(fields) % 3:
                pending = b"\0".join([*fields[len(fields) - len(fields) % 3 :], pending])
                del fields[len(fields) - len(fields) % 3 :]
            for k in range(0, len(fields), 3):
                job_dir, account, job_layout = fields[k : k + 3]
                pid = _start(job_dir, account, job_layout, me, bash, runner, env_name, done_w, answers)
                out.write(job_dir + b"\0" + pid + b"\0")
            out.flush()


def _removed(data: bytes, answers: dict[bytes, int]) -> bytes:
    """Remove the ended layout of each job directory a runner wrote (NUL-terminated), then close its answer pipe;
    a name we did not start a runner for is ignored. Returns what is not complete yet."""
    *names, rest = data.split(b"\0")
    for name in names:
        fd = answers.pop(name, None)
        if fd is not None:
            remove_ended_layout(name)
            os.close(fd)
    return rest


def _start(
    job_dir: bytes,
    account: bytes,
    job_layout: bytes,
    me: bytes,
    bash: str,
    runner: str,
    env_name: str,
    done_w: int,
    answers: dict[bytes, int],
) -> bytes:
    """Claim ``job_dir`` and fork its runner: the runner's pid, or ``claimed``."""
    try:
        os.mkdir(job_dir + b"/" + CLAIM.encode())
    except OSError:
        return b"claimed"
    _write(job_dir + b"/" + CLAIM_LAUNCHER.encode(), me)
    answer: tuple[int, int] | None = None
    if job_layout:
        with contextlib.suppress(OSError):  # out of descriptors: the submitter removes the layout
            answer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the runner: nothing but system calls (and its layout's) until exec
        try:
            os.setpgid(0, 0)
            for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores the last two: not the job
                signal.signal(sig, signal.SIG_DFL)
            if job_layout:
                make_layout(os.fsdecode(job_dir), job_layout, account)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if answer is not None:  # above the ones it goes to first, so neither overwrites the other
                high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (done_w, answer[0])]
                os.dup2(high[0], DONE_FD)
                os.dup2(high[1], ANSWER_FD)
            become_subreaper()
            os.environ[env_name] = os.fsdecode(job_dir)
            removes = "1" if answer is not None else ""
            argv = [bash, "-c", runner, RUNNER_NAME, os.fsdecode(job_dir), bash, os.fsdecode(account)]
            os.execvp(bash, [*argv, sys.executable, os.path.abspath(__file__), removes])
        finally:
            os._exit(127)
    if answer is not None:
        os.close(answer[0])
        old = answers.pop(job_dir, None)
        if old is not None:
            os.close(old)
        answers[job_dir] = answer[1]
    _write(job_dir + b"/" + CLAIM_RUNNER.encode(), str(pid).encode())
    return str(pid).encode()


def encode_layout(entries: list[tuple[str, str, int | str | None]], marker: bool) -> bytes:
    """The layout as the launcher reads it: JSON (no NUL in it), ``[kind, path, mode or target]`` per entry
    (``d`` a directory, ``l`` a link), ``["m", "", null]`` last for the marker."""
    items: list[tuple[str, str, int | str | None]] = [*entries, ("m", "", None)] if marker else list(entries)
    return json.dumps(items, ensure_ascii=True, separators=(",", ":")).encode()


def make_layout(directory: str, job_layout: bytes, account: bytes) -> None:
    """Make the layout the submitter passed, as ``prepare_job_dir`` made it (``submitters/jobdirs/files.py``):
    0700 directories like ``mkdir -p``, then their mode; links, absolute in the job directory's name, replacing
    what is there; the marker last. As ``account`` ("uid:gid") when given: the job directory is the account's
    already, and an effective-id switch makes every entry the account's as the script's own would be, and
    follows no link the account could have put there with more rights than the account's. Errors are ignored:
    the script makes what is missing itself."""
    undo: list[tuple[object, int | list[int]]] = []  # each switch made, with what to put back
    try:
        if account:
            uid, _, gid = os.fsdecode(account).partition(":")
            groups = os.getgroups()
            os.setgroups([])
            undo.append((os.setgroups, groups))
            os.setegid(int(gid))
            undo.append((os.setegid, os.getgid()))
            os.seteuid(int(uid))
            undo.append((os.seteuid, os.getuid()))
        _make_entries(directory, json.loads(job_layout))
    except (OSError, ValueError, TypeError, AssertionError):
        pass
    finally:
        for put_back, value in reversed(undo):  # back to the runner's own ids, or no job at all
            try:
                put_back(value)  # type: ignore[operator]
            except OSError:
                os._exit(127)


def _make_entries(directory: str, entries: list[list[object]]) -> None:
    absolute = os.path.abspath(directory)
    made: set[str] = set()
    for kind, rel, extra in entries:
        if kind == "m":
            os.symlink(absolute, os.path.join(directory, PREPARED_FILE))
            continue
        assert isinstance(rel, str)
        path = os.path.join(directory, rel)
        if kind == "d":
            _make_dirs(directory, rel, made)
            if isinstance(extra, int):
                os.chmod(path, extra)
            continue
        assert isinstance(extra, str)
        _make_dirs(directory, rel.rpartition("/")[0], made)
        target = os.path.join(absolute, extra)
        try:
            os.symlink(target, path)
        except FileExistsError:  # like `ln -sfn`: a link or file there is replaced
            os.unlink(path)
            os.symlink(target, path)


def _make_dirs(directory: str, rel: str, made: set[str]) -> None:
    """``mkdir -p`` below the job dir, parents first; an existing directory or link to one is kept."""
    if not rel or rel in made:
        return
    _make_dirs(directory, rel.rpartition("/")[0], made)
    path = os.path.join(directory, rel)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    made.add(rel)


def remove_ended_layout(job_dir: bytes) -> None:
    """``submitters/jobdirs/files.py::remove_ended_layout``: ``ENDED_JOB_LAYOUT`` removed by descriptor, a link
    removed and never followed, errors ignored."""
    try:
        fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in ENDED_JOB_LAYOUT:
            _remove_tree(name, fd)
    except RecursionError:
        pass
    finally:
        os.close(fd)


_TREE_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_tree(name: str, parent_fd: int) -> None:
    try:
        fd = os.open(name, _TREE_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except OSError:  # ELOOP or ENOTDIR: a link or a file
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)
        return
    try:
        with os.scandir(fd) as it:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in children:
            if is_dir:
                _remove_tree(child, fd)
                continue
            try:
                os.unlink(child, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:
                _remove_tree(child, fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent_fd)


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
