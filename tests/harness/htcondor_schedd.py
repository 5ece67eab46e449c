"""STAND-IN for an HTCondor schedd's queue, for the command-line stand-ins in ``htcondor_standin.py``.

NOT HTCondor. The queue model the stand-in tools share: job ads as JSON files under ``$HTCONDOR_STANDIN_DIR``
(``queue/<cluster>.<proc>.json`` for jobs still in the queue, ``history/<cluster>.<proc>.json`` for ads that left
it, ``spool/<cluster>.<proc>/`` for spooled sandboxes: a schedd keeps one job ad and one spool directory per
proc), one lock for the whole queue, the user job event log that the real ``htcondor2.JobEventLog`` reads, and
the job itself: run as a local process family, held, removed by ``periodic_remove`` (evaluated by the real
ClassAd library, ``classad2``) or by ``condor_rm``, then moved to the history.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# State -----------------------------------------------------------------------------------------


def _root() -> Path:
    root = os.environ.get("HTCONDOR_STANDIN_DIR")
    if not root:
        _die("HTCONDOR_STANDIN_DIR is not set (this is a test stand-in, not HTCondor)")
    path = Path(root)
    for sub in ("queue", "history", "spool"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return None


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _die(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def _now() -> int:
    return int(time.time())


# Job event log (the format htcondor2.JobEventLog reads) ------------------------------------------


def _event(ad: dict[str, Any], code: int, text: str, body: list[str] | None = None) -> None:
    log = ad.get("_log")
    if not log:
        return
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"{code:03d} ({ad['ClusterId']:03d}.{ad['ProcId']:03d}.000) {stamp} {text}", *(body or []), "..."]
    with open(log, "a") as fh:
        fh.write("\n".join(lines) + "\n")


# The job itself ----------------------------------------------------------------------------------


def job_key(ad: dict[str, Any]) -> str:
    """``<cluster>.<proc>``: a job's id, and the name of its files here."""
    return f"{ad['ClusterId']}.{ad.get('ProcId', 0)}"


def _update(root: Path, cluster: str, **attrs: Any) -> dict[str, Any] | None:
    """Set attributes of a queued job unless it already left the queue or was removed."""
    with _locked(root):
        path = root / "queue" / f"{cluster}.json"
        ad = _read(path)
        if ad is None or ad.get("JobStatus") == 3:
            return None
        ad.update(attrs)
        _write(path, ad)
        return ad


def _leave_queue(root: Path, ad: dict[str, Any]) -> None:
    """Move a job to the history (the caller holds the lock)."""
    cluster = job_key(ad)
    _write(root / "history" / f"{cluster}.json", ad)
    (root / "queue" / f"{cluster}.json").unlink(missing_ok=True)
    if ad.get("_spool"):
        shutil.rmtree(root / "spool" / str(cluster), ignore_errors=True)


def _periodic_remove(ad: dict[str, Any]) -> bool:
    expr = (ad.get("PeriodicRemove") or {}).get("_expr")
    if not expr:
        return False
    import classad2

    return bool(classad2.ExprTree(expr).eval(_classad(ad)))


def run(cluster: str, root: Path) -> None:
    ad = _read(root / "queue" / f"{cluster}.json")
    if ad is None:
        return
    reason = ad.get("StandinHoldReason")
    if reason:
        code = int(ad.get("StandinHoldCode") or 1)
        held = _update(root, cluster, JobStatus=5, HoldReason=reason, HoldReasonCode=code, EnteredCurrentStatus=_now())
        if held:
            _event(held, 12, "Job was held.", [f"\t{reason}", f"\tCode {code} Subcode 0"])
        return
    run_dir = Path(ad["_run_dir"])
    exe = ad["_exe"] if Path(ad["_exe"]).is_absolute() else str(run_dir / ad["_exe"])
    out = Path(ad["_out"]) if Path(ad["_out"]).is_absolute() else run_dir / ad["_out"]
    err = Path(ad["_err"]) if Path(ad["_err"]).is_absolute() else run_dir / ad["_err"]
    with open(out, "ab") as fo, open(err, "ab") as fe:
        proc = subprocess.Popen(
            [exe, *ad["_args"]],
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
            start_new_session=True,
            env={**{k: v for k, v in os.environ.items() if k != "HTCONDOR_STANDIN_DIR"}, **ad["_env"]},
        )
    now = _now()
    started = _update(
        root, cluster, JobStatus=2, JobStartDate=now, JobCurrentStartDate=now, EnteredCurrentStatus=now, _pid=proc.pid
    )
    if started is None:  # removed before it started
        _kill(proc.pid)
        return
    _event(started, 1, "Job executing on host: <127.0.0.1:9618>")
    interval = float(os.environ.get("STANDIN_PERIODIC_INTERVAL", "0.2"))
    while True:
        try:
            status = proc.wait(timeout=interval)
            break
        except subprocess.TimeoutExpired:
            pass
        current = _read(root / "queue" / f"{cluster}.json")
        if current is None or current.get("JobStatus") == 3:
            return  # condor_rm killed it and recorded the removal
        routed = current.get("_routed")
        if routed and time.time() - now > int(routed["BatchRuntime"]):
            # The routed job outran its wall time: removed, with the CE's reason text (htcondor-ce
            # config/01-ce-router-defaults.conf, REMOVE_CLAUSE_4 / REMOVE_REASON_4, which prints the
            # seconds followed by "minutes.").
            _kill(proc.pid)
            proc.wait()
            reason = (
                "CE job removed by SYSTEM_PERIODIC_REMOVE due to job exceeded allowed walltime: "
                f"{routed['BatchRuntime']} minutes."
            )
            _finish_removed(root, cluster, reason)
            return
        if not current.get("_no_periodic") and _periodic_remove(current):
            _kill(proc.pid)
            proc.wait()
            expr = current["PeriodicRemove"]["_expr"]
            _finish_removed(root, cluster, f"The job attribute PeriodicRemove expression '{expr}' evaluated to TRUE")
            return
    now = _now()
    attrs: dict[str, Any] = {"CompletionDate": now, "EnteredCurrentStatus": now, "JobStatus": 4}
    if status < 0:
        attrs.update(ExitBySignal=True, ExitSignal=-status)
        body = [f"\t(0) Abnormal termination (signal {-status})", "\t(0) No core file"]
    else:
        attrs.update(ExitBySignal=False, ExitCode=status)
        body = [f"\t(1) Normal termination (return value {status})"]
    usage = "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  "
    body += [usage + w for w in ("Run Remote Usage", "Run Local Usage", "Total Remote Usage", "Total Local Usage")]
    body += [f"\t0  -  {w}" for w in ("Run Bytes Sent By Job", "Run Bytes Received By Job")]
    body += [f"\t0  -  {w}" for w in ("Total Bytes Sent By Job", "Total Bytes Received By Job")]
    with _locked(root):
        path = root / "queue" / f"{cluster}.json"
        ad = _read(path)
        if ad is None or ad.get("JobStatus") == 3:
            return
        ad.update(attrs)
        _event(ad, 5, "Job terminated.", body)
        if ad.get("_spool"):
            _write(path, ad)  # spooled output waits in the queue for condor_transfer_data
        else:
            _leave_queue(root, ad)


def _family(pid: int) -> list[int]:
    """The process and all its descendants (HTCondor's starter tracks the whole family, not one group)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kill(pid: int, grace: float = 1.0) -> None:
    """SIGTERM to the job's whole process family, SIGKILL to what is left after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in _family(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        deadline = time.monotonic() + grace
        while sig == signal.SIGTERM and time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def _finish_removed(root: Path, cluster: str, reason: str) -> None:
    with _locked(root):
        ad = _read(root / "queue" / f"{cluster}.json")
        if ad is None:
            return
        now = _now()
        ad.update(JobStatus=3, RemoveReason=reason, EnteredCurrentStatus=now, CompletionDate=now)
        _event(ad, 9, "Job was aborted.", [f"\t{reason}"])
        _leave_queue(root, ad)


# A job ad as a ClassAd (for constraints, periodic expressions and printing) ----------------------


def _classad(ad: dict[str, Any]) -> Any:
    import classad2

    out = classad2.ClassAd()
    for key, value in ad.items():
        if key.startswith("_"):
            continue
        out[key] = classad2.ExprTree(value["_expr"]) if isinstance(value, dict) else value
    return out
