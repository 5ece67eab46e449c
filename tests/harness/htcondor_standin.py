"""STAND-IN for HTCondor's command-line tools (no HTCondor daemons can run on these machines).

NOT HTCondor. A few hundred lines that follow the documented command-line contract closely enough
to exercise the ``htcondor`` backend for real: ``condor_submit``, ``condor_q``, ``condor_history``,
``condor_rm``, ``condor_transfer_data`` (and ``condor_status``). Jobs really run as local processes,
constraints and ``periodic_remove`` are evaluated by the real ClassAd library (``classad2``), submit
descriptions are parsed by the real ``htcondor2.Submit``, ads are printed by ``classad2``'s JSON
writer, and every job writes a user job event log that the real ``htcondor2.JobEventLog`` reads.

    install(bin_dir, state_dir)      # writes condor_* wrappers into bin_dir (put it first on PATH)

State lives in ``$HTCONDOR_STANDIN_DIR``: ``queue/<cluster>.<proc>.json`` (job ads still in the queue),
``history/<cluster>.<proc>.json`` (ads that left it), ``spool/<cluster>.<proc>/`` (spooled sandboxes) and
``calls.log`` (one line per command: tool and its -pool/-name, so tests count calls per poll).

CE mode (``install(..., ce=True)``, env ``STANDIN_CE=1``): the schedd is an HTCondor-CE's, and its job router
runs each job as a routed copy made by the router's documented transforms, each rule below commented with the
source file it comes from (``_route``). Both modes: ``condor_q`` shows the current user's jobs
(``$STANDIN_USER``, else ``$USER``: the identity the token maps to) unless ``-allusers``; ``condor_rm``
answers "permission denied" for another user's job, and ``-totals`` prints the schedd's counts.

Stand-in knobs (submit commands a test can add through the site config):
``+StandinHoldReason = "..."`` (and ``+StandinHoldCode = N``): the job is held instead of run.
Environment: ``STANDIN_KILL_CALLER_AFTER_SUBMIT=<file>`` makes the first condor_submit kill its caller
with SIGKILL right after queueing the job (and note the job id in <file>); ``STANDIN_REQUIRE_TOKEN=1``
makes every command fail unless ``_CONDOR_SCITOKENS_FILE`` names a non-empty file (what a CE with
SCITOKENS authentication needs); ``STANDIN_PERIODIC_INTERVAL`` is the seconds between periodic
expression evaluations (default 0.2; a schedd's default is 60); ``STANDIN_SPOOL_FAIL=1`` makes
``condor_submit -spool`` fail after queueing the job, as a broken spool transfer does.

This module holds the command-line tools; the queue they share (state, event log, the job itself) is the
schedd stand-in in ``htcondor_schedd.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from htcondor_schedd import (
    _classad,
    _die,
    _event,
    _finish_removed,
    _kill,
    _leave_queue,
    _locked,
    _now,
    _read,
    _root,
    _write,
    job_key,
    run,
)

TOOLS = ("condor_submit", "condor_q", "condor_history", "condor_rm", "condor_transfer_data", "condor_status")


def install(bin_dir: Path, state_dir: Path, *, ce: bool = False) -> dict[str, str]:
    """Write ``condor_*`` wrappers into ``bin_dir``; returns the environment that activates them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(__file__)} {tool} "$@"\n')
        path.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HTCONDOR_STANDIN_DIR": str(state_dir)}
    return {**env, "STANDIN_CE": "1" if ce else "0"}


def seed(state_dir: Path, queued: list[dict[str, Any]], finished: list[dict[str, Any]]) -> None:
    """Put job ads straight into the queue and the history (scale tests: no process per job)."""
    for folder, ads in (("queue", queued), ("history", finished)):
        (state_dir / folder).mkdir(parents=True, exist_ok=True)
        for ad in ads:
            _write(state_dir / folder / f"{job_key(ad)}.json", ad)
    top = max((int(ad["ClusterId"]) for ad in [*queued, *finished]), default=0)
    (state_dir / "next_cluster").write_text(str(top + 1))


def arg_sizes(state_dir: Path) -> list[tuple[str, int, int]]:
    """Every command run so far: its tool, its longest argument and all its arguments, in bytes (NULs included)."""
    try:
        rows = (state_dir / "args.log").read_text().split("\n")
    except FileNotFoundError:
        return []
    return [(t, int(a), int(b)) for t, a, b in (r.split() for r in rows if r)]


def calls(state_dir: Path) -> list[str]:
    """Every command run so far (first word: the tool)."""
    try:
        return (state_dir / "calls.log").read_text().splitlines()
    except FileNotFoundError:
        return []


# condor_submit -----------------------------------------------------------------------------------


def _value(raw: str) -> Any:
    """A ClassAd literal as JSON (strings unquoted, numbers and booleans as such); else the expression text."""
    import classad2

    try:
        value = classad2.ExprTree(raw).eval()
    except Exception:
        return raw
    if isinstance(value, (str, int, float, bool)) and not isinstance(value, classad2.Value):
        return value
    return {"_expr": raw}


def _environment(text: str) -> dict[str, str]:
    """The new ``environment`` syntax: ``"K='v' K2='v2'"``."""
    text = text.strip()
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1].replace('""', '"')
    env = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        env[key] = value
    return env


def submit(args: list[str], root: Path) -> None:
    spool = "-spool" in args
    terse = "-terse" in args
    files = [
        a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in ("-pool", "-name"))
    ]
    if len(files) != 1:
        _die("ERROR: condor_submit needs exactly one submit description file")
    import htcondor2

    path = Path(files[0])
    try:
        desc = htcondor2.Submit(path.read_text())
    except Exception as exc:  # the real parser's verdict
        _die(f"ERROR: on line of submit file {path}: {exc}")
    cmds = {k.lower(): v for k, v in desc.items()}
    for need in ("executable",):
        if need not in cmds:
            _die(f"ERROR: submit file {path} has no {need}")
    count = _queue_count(desc, path)
    with _locked(root):
        counter = root / "next_cluster"
        cluster = int(counter.read_text()) if counter.exists() else 1
        counter.write_text(str(cluster + 1))
    ads = [_proc_ad(desc, cluster, proc, spool, root) for proc in range(count)]
    spool_fails = spool and os.environ.get("STANDIN_SPOOL_FAIL") == "1"
    for ad in ads:
        if spool_fails:
            # condor_submit queues the job on hold (HoldReasonCode 16, SpoolingInput) and prints its id before it
            # spools the input (htcondor src/condor_utils/submit_utils.cpp sets the hold, src/condor_submit.V6/
            # submit.cpp spools after queueing and prints "Failed to spool job files."); a failed spool leaves it so.
            ad.update(JobStatus=5, HoldReason="Spooling input data files", HoldReasonCode=16)
        _write(root / "queue" / f"{job_key(ad)}.json", ad)
        _event(ad, 0, "Job submitted from host: <127.0.0.1:9618>")
    ids = f"{cluster}.0 - {cluster}.{count - 1}"  # -terse: the first and the last job id (condor_submit.rst)
    if spool_fails:
        print(ids)
        _die("ERROR: Failed to spool job files.")
    for ad in ads:
        subprocess.Popen(
            [sys.executable, __file__, "__run", job_key(ad)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "HTCONDOR_STANDIN_DIR": str(root)},
        )
    if terse:
        print(ids)
    else:
        print(f"Submitting job(s){'.' * count}\n{count} job(s) submitted to cluster {cluster}.")
    crash_once = os.environ.get("STANDIN_KILL_CALLER_AFTER_SUBMIT")
    if crash_once and not Path(crash_once).exists():
        # The crash test: the job is queued, then the submitter dies before it hears the id.
        Path(crash_once).write_text(f"{cluster}.0\n")
        sys.stdout.flush()
        os.kill(os.getppid(), signal.SIGKILL)


_QUEUE_N = re.compile(r"\s*([0-9]*)\s*")
_CHOICE = re.compile(r"\$CHOICE\(\s*(?:Process|ProcId)\s*,([^)]*)\)", re.IGNORECASE)
_PROCESS = re.compile(r"\$\((?:Process|ProcId)\)", re.IGNORECASE)


def _queue_count(desc: Any, path: Path) -> int:
    """``queue`` / ``queue N``: N jobs (procs 0..N-1) of one cluster (htcondor docs/man-pages/condor_submit.rst,
    "queue [<int expr>]"). Only this form: the backend writes no other (``queue ... from`` is refused here)."""
    m = _QUEUE_N.fullmatch(desc.getQArgs() or "")
    if m is None:
        _die(f"ERROR: the stand-in reads only 'queue [N]' (submit file {path})")
    count = int(m.group(1) or 1)
    if count < 1:
        _die(f"ERROR: submit file {path} queues no job")
    return count


def _for_proc(value: str, proc: int) -> str:
    """A submit value as condor_submit expands it for one proc: ``$(Process)`` (alias ``$(ProcId)``) is the proc
    number, and ``$CHOICE(Process, a, b, ...)`` the proc's item of the list, the first at index 0 (htcondor
    docs/man-pages/condor_submit.rst, "Pre-defined macros" and "$CHOICE(index, item1, item2, ...)")."""

    def choice(m: re.Match[str]) -> str:
        items = [item.strip() for item in m.group(1).split(",")]
        if proc >= len(items):
            _die(f"ERROR: $CHOICE() macro: index {proc} is out of range")
        return items[proc]

    return _PROCESS.sub(str(proc), _CHOICE.sub(choice, value))


def _proc_ad(desc: Any, cluster: int, proc: int, spool: bool, root: Path) -> dict[str, Any]:
    """The job ad of proc ``proc``: every value expanded for it (each proc is its own job ad in the schedd)."""
    raw = {key: _for_proc(value, proc) for key, value in desc.items()}
    cmds = {k.lower(): v for k, v in raw.items()}
    iwd = Path(cmds.get("initialdir") or os.getcwd())
    now = _now()
    ad: dict[str, Any] = {
        "ClusterId": cluster,
        "ProcId": proc,
        "JobStatus": 1,
        "QDate": now,
        "EnteredCurrentStatus": now,
        "Iwd": str(iwd),
        "Cmd": cmds["executable"],
        "JobUniverse": 5,
        "Owner": _user(),
    }
    for key, value in raw.items():
        if key.upper().startswith("MY."):
            ad[key[3:]] = _value(value)
    for key, attr in (
        ("request_cpus", "RequestCpus"),
        ("request_memory", "RequestMemory"),
        ("request_disk", "RequestDisk"),
        ("request_gpus", "RequestGPUs"),
    ):
        if key in cmds:
            ad[attr] = _value(cmds[key])
    if "periodic_remove" in cmds:
        ad["PeriodicRemove"] = {"_expr": cmds["periodic_remove"]}
    if _ce():
        # The CE's router takes job ads one by one: JOB_ROUTER_SOURCE_JOB_CONSTRAINT selects by JobUniverse alone
        # and the route limits count jobs (JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE = 2000,
        # JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE = CONDORCE_MAX_JOBS = 10000; htcondor-ce
        # config/01-ce-router-defaults.conf): each proc of a cluster is routed as its own job, by the same
        # transforms. (The idle limit is not modelled: the tests' arrays are far below 2000 procs.)
        _route(ad)
    run_dir = root / "spool" / job_key(ad) if spool else iwd
    ad["_spool"] = spool
    ad["_run_dir"] = str(run_dir)
    ad["_exe"] = cmds["executable"]
    ad["_args"] = shlex.split(cmds.get("arguments", ""))
    ad["_env"] = _environment(cmds.get("environment", ""))
    ad["_out"] = cmds.get("output", "/dev/null")
    ad["_err"] = cmds.get("error", "/dev/null")
    ad["_transfer_out"] = [p.strip() for p in cmds.get("transfer_output_files", "").split(",") if p.strip()]
    if "log" in cmds:
        log = Path(cmds["log"])
        ad["_log"] = str(log if log.is_absolute() else (run_dir if spool else iwd) / log)
    if spool:
        run_dir.mkdir(parents=True, exist_ok=True)
        exe = Path(cmds["executable"])
        shutil.copy2(exe if exe.is_absolute() else iwd / exe, run_dir / exe.name)
        ad["_exe"] = exe.name
        ad["LeaveJobInQueue"] = True
    return ad


def _ce() -> bool:
    return os.environ.get("STANDIN_CE") == "1"


def _user() -> str:
    return os.environ.get("STANDIN_USER") or os.environ.get("USER", "nobody")


def _route(ad: dict[str, Any]) -> None:
    """What an HTCondor-CE's job router does to a job, kept in ``_routed`` (the routed copy lives in the site's
    batch schedd, not in the CE's queue that condor_q -name <ce> shows)."""
    routed = {k: v for k, v in ad.items() if not k.startswith("_")}
    # The router claims the source job: Managed = External (htcondor src/condor_job_router/submit_job.cpp), so
    # the CE's schedd does not evaluate its periodic expressions (src/condor_schedd.V6/schedd.cpp,
    # ResponsibleForPeriodicExprs returns 0 for an externally managed job).
    ad["Managed"] = "External"
    ad["_no_periodic"] = True
    # Cleanup transform: DELETE PeriodicRemove (htcondor-ce config/01-ce-router-defaults.conf).
    routed.pop("PeriodicRemove", None)
    # Cpus transform: RequestCpus = xcount if defined, else the source's RequestCpus when > 1, else
    # default_xcount (1) (01-ce-router-defaults.conf).
    cpus = ad.get("RequestCpus")
    if "xcount" in ad:
        routed["RequestCpus"] = ad["xcount"]
    else:
        routed["RequestCpus"] = cpus if isinstance(cpus, int) and cpus > 1 else 1
    # Memory transform: EVALSET RequestMemory maxMemory ?: default_maxMemory (2000) — request_memory alone is
    # overwritten (01-ce-router-defaults.conf).
    routed["RequestMemory"] = ad.get("maxMemory", 2000)
    routed["JobMemory"] = routed["RequestMemory"]
    # BatchRuntime transform: 60*maxWallTime, else 60*ROUTED_JOB_MAX_TIME (4320 minutes) (01-ce-router-defaults.conf).
    routed["BatchRuntime"] = 60 * int(ad.get("maxWallTime", 4320))
    ad["_routed"] = routed


# Queries -----------------------------------------------------------------------------------------


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a in ("-pool", "-name", "-attributes", "-constraint", "-limit", "-af"):
            opts[a] = next(it, "")
        elif a.startswith("-"):
            opts[a] = ""
        else:
            rest.append(a)
    return opts, rest


def _matching(folder: Path, opts: dict[str, str], ids: list[str]) -> list[dict[str, Any]]:
    import classad2

    constraint = classad2.ExprTree(opts["-constraint"]) if opts.get("-constraint") else None
    wanted = set(ids)  # "<cluster>" names every proc of the cluster, "<cluster>.<proc>" one (condor_rm.rst)
    out = []
    for path in folder.glob("*.json"):
        ad = _read(path)
        if ad is None or (wanted and str(ad["ClusterId"]) not in wanted and job_key(ad) not in wanted):
            continue
        if constraint is not None and constraint.eval(_classad(ad)) is not True:
            continue
        out.append(ad)
    return out


def _print_json(ads: list[dict[str, Any]], attributes: str, *, brackets: bool = False) -> None:
    """Like condor_q -json: one JSON array of ads, nothing at all when no job matched. condor_history -json
    (``brackets``) prints ``[`` and ``]`` around whatever it found, so ``[]`` for nothing (htcondor
    src/condor_tools/history.cpp, printHeader/printFooter)."""
    if not ads:
        if brackets:
            print("[\n]")
        return
    keep = [a for a in attributes.split(",") if a] if attributes else None
    texts = []
    for ad in ads:
        view = {k: v for k, v in ad.items() if not k.startswith("_") and (keep is None or k in keep)}
        texts.append(_classad(view).printJson().strip())
    print("[\n" + ",\n".join(texts) + "\n]")


def query(args: list[str], root: Path, folder: str) -> None:
    opts, ids = _options(args)
    ads = sorted(
        _matching(root / folder, opts, ids), key=lambda a: (a["ClusterId"], a["ProcId"]), reverse=folder == "history"
    )
    if folder == "queue" and "-allusers" not in opts:
        # condor_q shows only the current user's jobs unless -allusers (docs/man-pages/condor_q.rst).
        ads = [a for a in ads if a.get("Owner") == _user()]
    if folder == "history" and opts.get("-limit"):
        ads = ads[: int(opts["-limit"])]
    _print_json(ads, opts.get("-attributes", ""), brackets=folder == "history")


# condor_rm and condor_transfer_data -------------------------------------------------------------


def remove(args: list[str], root: Path) -> None:
    opts, ids = _options(args)
    if not ids and not opts.get("-constraint"):
        _die("condor_rm: no job ids or -constraint given")
    ads = _matching(root / "queue", opts, ids)
    user = _user()
    # A schedd lets a user remove only their own jobs (no queue superuser here): the rest is permission denied.
    denied = [a for a in ads if a.get("Owner") != user]
    mine = [a for a in ads if a.get("Owner") == user]
    for ad in mine:  # like the schedd: the job is Removed at once, then its processes are killed
        _finish_removed(root, job_key(ad), f"via condor_rm (by user {user})")
        if ad.get("_pid"):
            _kill(int(ad["_pid"]))
    found = {str(a["ClusterId"]) for a in ads} | {job_key(a) for a in ads}
    missing = [i for i in ids if i not in found]
    for ad in mine:
        print(f"Job {job_key(ad)} marked for removal")
    if "-totals" in opts:
        # The counts line of src/condor_rm.V6/rm.cpp (doWorkByList / doWorkByConstraint with -totals).
        print(
            f"{len(mine)} Succeeded, 0 Failed, {len(missing)} Not Found, 0 Bad Status, 0 Already Done, "
            f"{len(denied)} Permission Denied"
        )
    if missing or denied or (not ads and opts.get("-constraint")):
        # The same text whether the jobs are gone or not the caller's to remove (rm.cpp).
        what = ", ".join(missing + [job_key(a) for a in denied]) if ids else "constraint"
        _die(f"Couldn't find/remove all jobs matching {what}")


def transfer(args: list[str], root: Path) -> None:
    opts, ids = _options(args)
    ads = _matching(root / "queue", opts, ids)
    with _locked(root):
        for ad in ads:
            if ad.get("JobStatus") != 4 or not ad.get("_spool"):
                continue
            run_dir, iwd = Path(ad["_run_dir"]), Path(ad["Iwd"])
            for name in [ad["_out"], ad["_err"], Path(ad.get("_log") or "").name, *ad["_transfer_out"]]:
                src = run_dir / name
                if not name or not src.exists():
                    continue
                if src.is_dir():
                    shutil.copytree(src, iwd / name, dirs_exist_ok=True)
                else:
                    shutil.copy2(src, iwd / name)
            ad["StageOutFinish"] = _now()
            _leave_queue(root, ad)
    print(f"Fetching data files... {len(ads)} job(s)")


def status(args: list[str], root: Path) -> None:
    cpus = os.cpu_count() or 1
    ad = {"Machine": socket.gethostname(), "TotalSlotCpus": cpus, "TotalSlotMemory": 4096, "TotalSlotGPUs": 0}
    _print_json([ad], "")


def main(argv: list[str]) -> None:
    tool, args = argv[0], argv[1:]
    root = _root()
    if tool == "__run":
        run(args[0], root)
        return
    target = " ".join(f"{a} {args[i + 1]}" for i, a in enumerate(args[:-1]) if a in ("-pool", "-name"))
    with _locked(root), open(root / "calls.log", "a") as fh, open(root / "args.log", "a") as sizes:
        fh.write(f"{tool} {target}".rstrip() + "\n")
        lengths = [len(a.encode()) + 1 for a in args] or [0]  # what exec counts: each argument and its NUL
        sizes.write(f"{tool} {max(lengths)} {sum(lengths)}\n")
    if os.environ.get("STANDIN_REQUIRE_TOKEN") == "1":
        token = os.environ.get("_CONDOR_SCITOKENS_FILE", "")
        if not token or not Path(token).is_file() or not Path(token).read_text().strip():
            _die("SECMAN:2007:Failed to end classad message. AUTHENTICATE:1003:Failed to authenticate with any method")
    handlers = {
        "condor_submit": lambda: submit(args, root),
        "condor_q": lambda: query(args, root, "queue"),
        "condor_history": lambda: query(args, root, "history"),
        "condor_rm": lambda: remove(args, root),
        "condor_transfer_data": lambda: transfer(args, root),
        "condor_status": lambda: status(args, root),
    }
    if tool not in handlers:
        _die(f"unknown stand-in tool {tool}")
    handlers[tool]()


if __name__ == "__main__":
    main(sys.argv[1:])
