"""What a job must be before the submitter touches disk, the registry or a backend for it.

Any NATS client allowed on the pool's subjects can send a ``JobScript`` (not only our gateway, which checks
pods as the Kubernetes API server does), so the submitter checks again, once, at the RPC: every name it
uses as a file name, a key or a batch-system word, every path it creates, every number it passes on. A
failure is :class:`InvalidRequest` naming the field as the message spells it (``pod.namespace``,
``layout[2].path``); nothing has been created by then. Pure (no I/O).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.names import is_dns_label, is_dns_subdomain, is_pod_uid
from interlink_nats.submitters.core.errors import InvalidRequest

POD_ID_MAX = 2**31 - 1
"""The largest ``runAsUser``/``runAsGroup`` Kubernetes accepts (``IsValidUserID``: 0 to MaxInt32)."""

_SHOWN = 80
_NO_POD = pb.PodRef()


def shown(value: str) -> str:
    """``value`` as a message quotes it: repr, cut to a readable length (a hostile value may be 5,000 bytes)."""
    return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + f"... ({len(value)} characters)"


def check_job(job: pb.JobScript) -> None:
    """Refuse (InvalidRequest naming the field) what could never run or is unsafe to use; see the module."""
    pod = job.pod if job.pod is not None else _NO_POD
    if not is_pod_uid(pod.uid):
        raise InvalidRequest(f"pod.uid {shown(pod.uid)} is invalid: letters, digits, '.', '_' and '-' only")
    if not is_dns_label(pod.namespace):
        raise InvalidRequest(
            f"pod.namespace {shown(pod.namespace)} is not a DNS label (lowercase letters, digits and '-', at most 63)"
        )
    if not is_dns_subdomain(pod.name):
        raise InvalidRequest(
            f"pod.name {shown(pod.name)} is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)"
        )
    names = [*job.init_containers, *job.containers]
    if not job.containers:
        raise InvalidRequest("containers: a job needs at least one container")
    for field, values in (("init_containers", job.init_containers), ("containers", job.containers)):
        for i, name in enumerate(values):
            if not is_dns_label(name):
                raise InvalidRequest(f"{field}[{i}] {shown(name)} is not a container name (a DNS label)")
    if len(set(names)) != len(names):
        raise InvalidRequest("containers: container names must be unique")
    if not job.script.strip():
        raise InvalidRequest("script: the job script is empty")
    job_layout(job.layout)  # the paths the submitter creates; cached for the runner's and the job directory's
    for i, flag in enumerate(job.backend_flags):
        if "\x00" in flag:
            raise InvalidRequest(f"backend_flags[{i}] holds a NUL byte")
    _check_numbers(job)


def job_layout(entries: Sequence[pb.LayoutEntry]) -> tuple[layout.LayoutEntry, ...] | None:
    """``JobScript.layout`` checked and as the kernel's entries: InvalidRequest naming the entry's field for a path
    outside the job directory or a bad mode; None when an entry is of a kind this submitter does not know (the
    script then makes its layout itself, as before the field existed).

    Each distinct layout is checked and converted once: the pods of a shape (a Job's, a campaign's) share theirs,
    and a Submit asked for it up to three times (the check at the door, the runner's layout, the job directory's):
    12 µs of an interLink-shaped pod's on the shell backend, 19 on Slurm's. The key is the entries' own values, so
    what is cached is what was checked."""
    return _job_layout(tuple((entry.kind, entry.path, entry.mode, entry.target) for entry in entries))


_LayoutKey = tuple[tuple[int, str, int | None, str], ...]


@lru_cache(maxsize=256)
def _job_layout(key: _LayoutKey) -> tuple[layout.LayoutEntry, ...] | None:
    for i, (kind, path, mode, target) in enumerate(key):
        fields = [("path", path)]
        if kind == pb.LayoutEntryKind.SYMLINK:
            fields.append(("target", target))
        for field, value in fields:
            try:
                layout.below_job_dir(value)
            except ValueError:
                raise InvalidRequest(
                    f"layout[{i}].{field} {shown(value)} is not a path below the job directory"
                ) from None
        if mode is not None and not 0 <= mode <= 0o777:
            raise InvalidRequest(f"layout[{i}].mode {mode:#o} is not a permission mode (0 to 0o777)")
    out: list[layout.LayoutEntry] = []
    for kind, path, mode, target in key:
        if kind == pb.LayoutEntryKind.DIRECTORY:
            out.append(layout.LayoutDir(path, mode))
        elif kind == pb.LayoutEntryKind.SYMLINK:
            out.append(layout.LayoutLink(path, target))
        else:
            return None
    return tuple(out)


def _check_numbers(job: pb.JobScript) -> None:
    res = job.resources
    if res is not None:
        for field, value in (("cpu_millis", res.cpu_millis), ("memory_bytes", res.memory_bytes), ("gpus", res.gpus)):
            if value < 0:
                raise InvalidRequest(f"resources.{field} {value} is negative")
        if res.wall_time is not None and res.wall_time.total_seconds() < 0:
            raise InvalidRequest(f"resources.wall_time {res.wall_time.total_seconds()}s is negative")
    for field, ident in (("run_as_user", job.run_as_user), ("run_as_group", job.run_as_group)):
        if ident is not None and not 0 <= ident <= POD_ID_MAX:
            raise InvalidRequest(f"{field} {ident} is not a valid id (0 to {POD_ID_MAX}, as Kubernetes accepts)")
