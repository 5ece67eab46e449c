"""What a job must be before the submitter touches disk, the registry or a backend for it.

Any NATS client allowed on the pool's subjects can send a ``JobScript`` (not only our gateway, which checks
pods as the Kubernetes API server does), so the submitter checks again, once, at the RPC: every name it
uses as a file name, a key or a batch-system word, every path it creates, every number it passes on. A
failure is :class:`InvalidRequest` naming the field as the message spells it (``pod.namespace``,
``layout[2].path``); nothing has been created by then. Pure (no I/O).
"""

from __future__ import annotations

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
    _check_layout(job.layout)
    for i, flag in enumerate(job.backend_flags):
        if "\x00" in flag:
            raise InvalidRequest(f"backend_flags[{i}] holds a NUL byte")
    _check_numbers(job)


def _check_layout(entries: list[pb.LayoutEntry]) -> None:
    """The paths the submitter itself creates: below the job directory (relative, no ``..``, no NUL)."""
    for i, entry in enumerate(entries):
        paths = [("path", entry.path)]
        if entry.kind == pb.LayoutEntryKind.SYMLINK:
            paths.append(("target", entry.target))
        for field, path in paths:
            try:
                layout.below_job_dir(path)
            except ValueError:
                raise InvalidRequest(
                    f"layout[{i}].{field} {shown(path)} is not a path below the job directory"
                ) from None
        if entry.mode is not None and not 0 <= entry.mode <= 0o777:
            raise InvalidRequest(f"layout[{i}].mode {entry.mode:#o} is not a permission mode (0 to 0o777)")


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
