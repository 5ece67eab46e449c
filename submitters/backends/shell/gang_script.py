"""The launcher of a pod group on one host: the bash text the shell backend runs as the gang's one job.

Pure (a function of the gang, tested directly): every member's script starts at once, each as a single job's
would (``bash ./job.sh`` in its own job directory with ``INTERLINK_JOB_DIR`` set, output to its ``job.out``),
with ``layout.GROUP_ENV`` exported. Each member runs under a small wrapper that passes TERM on to its script
and records the script's exit code (``layout.GANG_MEMBER_EXIT``) so the submitter maps every member from its
own code. FAIL_GANG: the first member to end non-zero has every other one stopped (TERM; they are marked
``layout.GANG_MEMBER_STOPPED`` first) and the launcher exits with that code. CONTINUE: it waits for all and
exits with the first non-zero code. TERM/INT/HUP to the launcher (a cancel) go on to every member, and it
waits for them, so a cancel leaves no process behind. Every gang-derived string is a shell-quoted word of an
assignment, never in a comment (a newline would end the comment: the rest would run as the submitter).

Why wrappers and a scan instead of ``wait -n -p``: the project supports bash ≥ 4.3, which has ``wait -n``
but cannot say which child ended; the wrappers' files say it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.backend import SubmitRejected

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


@dataclass(frozen=True, slots=True)
class MemberRun:
    """One member as the launcher starts it: its job directory and the account it runs as ("uid:gid" or "")."""

    job_dir: str
    account: str = ""


_BODY = r"""
__ended=()
__rc=0
# One member: its script in the background (so a trapped TERM is passed on at once), its own exit code recorded.
__member() {
  local pid rc=127 again
  cd -- "$2" || exit 97
  export "__JOB_DIR_ENV__=$2" "__RANK_ENV__=$1"
  rm -f -- "__EXIT__" "__STOPPED__"
  trap 'kill -TERM "$pid" 2>/dev/null' TERM
  trap 'kill -HUP "$pid" 2>/dev/null' HUP
  if [ -n "$3" ]; then
    setpriv --reuid="${3%%:*}" --regid="${3##*:}" --clear-groups -- "$__bash" ./job.sh >> job.out 2>&1 </dev/null &
  else
    "$__bash" ./job.sh >> job.out 2>&1 </dev/null &
  fi
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
  # bash can lose the status of a child that ends just as a trapped TERM interrupts `wait` (seen in 5.2): it then
  # lists the job as running although it is gone, and `wait PID` would block for ever. It ended by that TERM.
  jobs -rp > "__JOBS__" 2>/dev/null
  while read -r again; do [ "$again" = "$pid" ] && rc=143 && pid=; done < "__JOBS__"
  if [ -n "$pid" ]; then
    wait "$pid" 2>/dev/null
    again=$?
    [ "$again" = 127 ] || rc=$again
  fi
  echo "$rc" > "__EXIT__.tmp" && mv -f "__EXIT__.tmp" "__EXIT__"
  exit "$rc"
}
# Stop every member still running (TERM: each script stops its containers within their grace), wait for them.
__stop_rest() {
  local i
  for i in "${!__pids[@]}"; do
    [ -n "${__ended[$i]:-}" ] && continue
    [ "$1" = mark ] && : > "${__dirs[$i]}/__STOPPED__"
    kill -TERM "${__pids[$i]}" 2>/dev/null
  done
  for i in "${!__pids[@]}"; do
    while kill -0 "${__pids[$i]}" 2>/dev/null; do wait "${__pids[$i]}"; done
  done
}
__on_signal() {
  trap : TERM INT HUP
  __stop_rest
  exit $((128 + $1))
}
trap '__on_signal 15' TERM
trap '__on_signal 2' INT
trap '__on_signal 1' HUP
__pids=()
for __i in "${!__dirs[@]}"; do
  __member "$__i" "${__dirs[$__i]}" "${__accounts[$__i]}" &
  __pids[$__i]=$!
done
__left=${#__pids[@]}
while [ "$__left" -gt 0 ]; do
  __found=0
  for __i in "${!__pids[@]}"; do
    [ -n "${__ended[$__i]:-}" ] && continue
    kill -0 "${__pids[$__i]}" 2>/dev/null && continue
    wait "${__pids[$__i]}" 2>/dev/null
    __code=$?
    [ -s "${__dirs[$__i]}/__EXIT__" ] && __code=$(< "${__dirs[$__i]}/__EXIT__")
    __ended[$__i]=1
    __left=$((__left - 1))
    __found=1
    if [ "$__code" != 0 ] && [ "$__rc" = 0 ]; then
      __rc=$__code
      if [ "$__fail_gang" = 1 ]; then
        __stop_rest mark
        exit "$__rc"
      fi
    fi
  done
  [ "$__found" = 1 ] || [ "$__left" = 0 ] || wait -n 2>/dev/null
done
exit "$__rc"
"""


def render_gang_launcher(
    members: Sequence[MemberRun],
    *,
    group_name: str,
    host: str,
    policy: pb.GangFailurePolicy,
    bash: str = "bash",
) -> str:
    """The gang's ``job.sh``: ``members`` in rank order, all on ``host`` (so HOSTS names it ``size`` times)."""
    for value in (group_name, host, bash, *(m.job_dir for m in members), *(m.account for m in members)):
        if "\x00" in value:  # no shell word can hold a NUL (bash drops it): the value would arrive changed
            raise SubmitRejected(f"pod group {group_name!r}: {value!r} contains a NUL character")
    size = len(members)
    hosts = ",".join([host] * size)
    exports = {
        layout.GROUP_NAME_ENV: group_name,
        layout.GROUP_SIZE_ENV: str(size),
        layout.GROUP_HOSTS_ENV: hosts,
        layout.GROUP_LEADER_ENV: host,
    }
    fail_gang = 0 if policy == pb.GangFailurePolicy.CONTINUE else 1
    head = [
        "#!/usr/bin/env bash",
        "# interlink-nats: the launcher of one pod group on one host (generated; do not edit)",
        "export " + " ".join(shlex.quote(f"{k}={v}") for k, v in exports.items()),
        f"__bash={shlex.quote(bash)}",
        f"__fail_gang={fail_gang}",
        "__dirs=(" + " ".join(shlex.quote(m.job_dir) for m in members) + ")",
        "__accounts=(" + " ".join(shlex.quote(m.account) for m in members) + ")",
    ]
    body = (
        _BODY.replace("__JOB_DIR_ENV__", layout.JOB_DIR_ENV)
        .replace("__RANK_ENV__", layout.GROUP_RANK_ENV)
        .replace("__EXIT__", layout.GANG_MEMBER_EXIT)
        .replace("__JOBS__", layout.GANG_MEMBER_JOBS)
        .replace("__STOPPED__", layout.GANG_MEMBER_STOPPED)
    )
    return "\n".join(head) + "\n" + body.lstrip("\n")
