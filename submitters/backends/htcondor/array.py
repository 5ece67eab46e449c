"""Pure: the submit description of the pods of one Job as ONE HTCondor cluster (``queue N``: N procs).

Proc p runs member p: its directory is ``<array dir>/tasks/$(Process)`` (the backend links ``tasks/<p>`` to member
p's job directory, so its ``job.sh`` is run, its output and container files are written, and with ``-spool``
its sandbox travels, all in that member's own directory), and its pod-uid attribute is
``$CHOICE(Process, <uid 0>, <uid 1>, ...)``. ``$(Process)`` and ``$CHOICE(index, item1, item2, ...)`` are the
submit language's own macros, expanded per proc by condor_submit (htcondor docs/man-pages/condor_submit.rst,
"Pre-defined macros"). One description holds one set of commands, so the members must ask the same flags and
resources (the pods of one Job do). The array's uid is an attribute of every proc: ``find_array`` finds the
cluster by it after a crash. Everything else is a single pod's description (``submit.submit_description``),
written once with marks in place of the per-proc values, so the two cannot drift apart.

An HTCondor-CE routes each proc as its own job: its router selects job ads by ``JobUniverse`` alone and counts its
route limits in jobs (htcondor-ce ``config/01-ce-router-defaults.conf``: ``JOB_ROUTER_SOURCE_JOB_CONSTRAINT``,
``JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE``), so the CE accepts the cluster as N routed jobs, each transformed
as a single pod's is. Tested in tests/backends/htcondor/test_htcondor_arrays.py, descriptions checked by the real
``htcondor2``.
"""

from __future__ import annotations

import re

from interlink_nats.submitters.backends.htcondor.parse import pool_constraint, quote
from interlink_nats.submitters.backends.htcondor.submit import (
    SubmitCommandError,
    SubmitSite,
    submit_description,
    submit_string,
)
from interlink_nats.submitters.core.backend import ArraySpec, JobSpec

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

ARRAY_UID_ATTR = "InterlinkArrayUid"
TASKS_DIR = "tasks"
"""``<array dir>/tasks/<p>``: a link to member p's job directory."""
_PROC_MARK = "InterlinkProcMark"
_UID_MARK = "InterlinkUidMark"
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""What a ``$CHOICE`` item may be: no comma, parenthesis, blank or ``$`` (a Kubernetes uid is a UUID)."""


def _label(spec: JobSpec) -> str:
    return spec.name or spec.uid


def array_description(array: ArraySpec, site: SubmitSite) -> str:
    """The one submit description of ``array``; SubmitCommandError naming what cannot be written."""
    members = array.members
    if not members:
        raise SubmitCommandError(f"job array {array.name or array.array_uid!r} has no members")
    first = members[0]
    for other in members[1:]:
        for what, mine, theirs in (
            ("backend flags", first.backend_flags, other.backend_flags),
            ("resources", first.resources, other.resources),
        ):
            if mine != theirs:
                raise SubmitCommandError(
                    f"job array: pods {_label(first)!r} and {_label(other)!r} ask for different {what}"
                )
    for member in members:
        if not _UID.fullmatch(member.uid):
            raise SubmitCommandError(f"job array: pod uid {member.uid!r} cannot be listed in $CHOICE()")
    if _PROC_MARK in str(array.job_dir):
        raise SubmitCommandError(f"job array directory {str(array.job_dir)!r} cannot be written")
    template = JobSpec(
        _UID_MARK,
        array.job_dir / TASKS_DIR / _PROC_MARK,
        first.script,
        first.resources,
        first.backend_flags,
        namespace=array.namespace or first.namespace,
        name=array.name,
    )
    text = submit_description(template, site)
    choice = f"$CHOICE(Process, {', '.join(m.uid for m in members)})"
    lines = text.replace(_PROC_MARK, "$(Process)").replace(_UID_MARK, choice).rstrip("\n").split("\n")
    if lines[-1] != "queue 1":
        raise SubmitCommandError("a single pod's description does not end in 'queue 1'")  # never: submit.py's own
    lines[0] = "# interlink-nats: the pods of one Job, one proc each (generated; do not edit)"
    uid = submit_string(array.array_uid, what="array uid")
    lines[-1:] = [f"+{ARRAY_UID_ATTR} = {uid}", f"queue {len(members)}"]
    return "\n".join(lines) + "\n"


def array_constraint(pool: str, array_uid: str) -> str:
    """The procs of one array in the pool (condor_q / condor_history ``-constraint``)."""
    return f"{pool_constraint(pool)} && {ARRAY_UID_ATTR} == {quote(array_uid)}"


def member_job_ids(cluster: str, count: int) -> tuple[str, ...]:
    """Member p's job id: ``<cluster>.<p>``."""
    return tuple(f"{cluster}.{p}" for p in range(count))
