"""Pure: the submit description of one pod's job, written so that nothing from outside can bend it.

No I/O: tested directly, and every description is parsed back by the real ``htcondor2.Submit`` in the
tests (tests/backends/htcondor/test_htcondor_submit.py), value by value.

The submit language's own rules (htcondor ``docs/man-pages/htcondor-jdl.rst``, and the real parser):
a line whose value ends in ``\\`` (trailing blanks allowed) continues on the next line, so such a value
is refused; ``$(name)`` is expanded everywhere, inside quoted strings too, so every ``$`` of a value that
comes from outside (the pod's names, the site's paths) is written ``$(DOLLAR)``, which expands to a
literal ``$``; a pod's own commands may not use ``$`` at all (``$$(attr)`` is expanded again at match
time). ``request_memory`` is MiB and ``request_disk`` KiB unless a unit (K/KB, M/MB, G/GB, T/TB: powers
of 1024) is given.

An HTCondor-CE does not run the job as submitted: its job router makes a routed copy whose
``RequestMemory`` comes from ``maxMemory`` (default 2000), ``RequestCpus`` from ``xcount`` and whose wall
time comes from ``maxWallTime`` (minutes; default ``ROUTED_JOB_MAX_TIME`` = 4320), and deletes
``PeriodicRemove`` (htcondor-ce ``config/01-ce-router-defaults.conf``, transforms Memory, Cpus,
BatchRuntime, Cleanup). So remote mode writes those attributes beside ``request_*``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor.parse import POD_UID_ATTR, POOL_ATTR, TIME_LIMIT_ATTR, quote
from interlink_nats.submitters.core.backend import JobSpec
from interlink_nats.submitters.core.site_policy import AccountingPolicy, PolicyError

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

# Submit commands the submitter writes itself: a site or a pod may not change them, or the job
# would run something else, write elsewhere, or hide from the submitter's queries.
RESERVED_COMMANDS = frozenset(
    {
        "universe",
        "executable",
        "arguments",
        "args",
        "initialdir",
        "initial_dir",
        "output",
        "error",
        "log",
        "input",
        "queue",
        "transfer_executable",
        "transfer_input_files",
        "transfer_output_files",
        "transfer_output_remaps",
        "should_transfer_files",
        "when_to_transfer_output",
        "leave_in_queue",
        "periodic_remove",
        "on_exit_remove",
        "environment",
        "env",
        "getenv",
        "batch_name",
        "+jobbatchname",
        "my.jobbatchname",
    }
)
ACCOUNTING_COMMANDS = frozenset({"accounting_group", "accounting_group_user"})
"""Site policy (``accounting``): a pod sets them only where the site's table allows it."""
DEFAULT_POD_COMMANDS = frozenset(
    {
        "requirements",
        "rank",
        "request_cpus",
        "request_memory",
        "request_disk",
        "request_gpus",
        "require_gpus",
        "gpus_minimum_capability",
        "gpus_minimum_memory",
    }
)
"""What a pod's commands (annotation) may set unless the site says otherwise (``htcondor.allowed_pod_commands``):
placement and resources, never site policy (accounting is decided by ``accounting``), files, environment, what
runs, or custom attributes (``+Owner``, ``+AccountingGroup``…). Compared by :func:`canonical_command`."""
CE_DEFAULT_MAX_MEMORY_MB = 2000
"""What a CE's router gives a job without ``maxMemory`` (01-ce-router-defaults.conf, Memory transform)."""
_COMMAND_NAME = re.compile(r"(?:\+|[Mm][Yy]\.)?[A-Za-z_][A-Za-z0-9_.]*")
_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]B?)?", re.IGNORECASE)
_UNIT_KIB = {"": None, "K": 1, "M": 2**10, "G": 2**20, "T": 2**30}
_WHOLE = re.compile(r"\d+")
_DOLLAR_MACRO = re.compile(r"\$\(\s*dollar", re.IGNORECASE)


class SubmitCommandError(ValueError):
    """A submit command the submitter may not pass on (the message names it and where it came from)."""


@dataclass(frozen=True, slots=True)
class SubmitSite:
    """What the site adds to every job's submit description (the backend makes it once, from its settings)."""

    pool: str
    spool: bool = False
    """Remote CE: sandboxes travel with the job (``-spool``), the router's attributes are written; else the
    job runs in ``job_dir`` itself and ``periodic_remove`` enforces its time limit."""
    site_commands: Mapping[str, str] | None = None
    request_disk: str = ""
    time_limit_margin: float = 60.0
    accounting: AccountingPolicy | None = None
    """Who pays, by namespace; None: a pod may not set accounting commands (the site's own commands may)."""
    allowed_pod_commands: frozenset[str] = DEFAULT_POD_COMMANDS
    """What a pod's commands may set (canonical names, :func:`check_command_names`)."""


def literal(value: str, *, what: str) -> str:
    """A value from outside as the submit language reads it back literally: ``$`` as ``$(DOLLAR)``; a
    control character (a line ends at a newline) or a trailing ``\\`` (it continues the line) refused."""
    _check_line(value, what=what)
    return _dollars(value, what=what)


def submit_string(value: str, *, what: str = "value") -> str:
    """A ClassAd string literal that the submit language does not expand (``$`` as ``$(DOLLAR)``)."""
    try:
        return _dollars(quote(value), what=what)
    except ValueError as exc:
        raise SubmitCommandError(f"{what}: {exc}") from None


def _dollars(value: str, *, what: str) -> str:
    """Every ``$`` as ``$(DOLLAR)``. The expander (htcondor ``src/condor_utils/config.cpp``, expand_macro)
    replaces ``$(DOLLAR)`` last, rescanning from the start after each one and skipping ``$$(``: so a value
    holding ``$(DOLLAR)`` or ``$$`` cannot be written literally and is refused."""
    if "$$" in value or _DOLLAR_MACRO.search(value):
        raise SubmitCommandError(f"{what} contains $$ or $(DOLLAR), which the submit language cannot keep literal")
    return value.replace("$", "$(DOLLAR)")


def _check_line(value: str, *, what: str, tabs: bool = False) -> None:
    if any((ord(c) < 32 and not (tabs and c == "\t")) or ord(c) == 127 for c in value):
        raise SubmitCommandError(f"{what} has a control character in its value")
    if value.rstrip().endswith("\\"):
        raise SubmitCommandError(f"{what} ends in a backslash (the submit language would join the next line)")


def check_quantity(value: str, *, what: str) -> str:
    """A ``request_disk``/``request_memory`` quantity: a number with an optional K/M/G/T unit."""
    if not _QUANTITY.fullmatch(value.strip()):
        raise SubmitCommandError(f"{what} {value!r} is not a quantity (a number with an optional K, M, G or T unit)")
    return value.strip()


def quantity_mib(value: str, *, default_unit_kib: int) -> int | None:
    """A quantity in MiB, rounded up (``default_unit_kib``: what a bare number counts in KiB)."""
    m = _QUANTITY.fullmatch(value.strip())
    if not m:
        return None
    unit = _UNIT_KIB[(m.group(2) or "")[:1].upper()] or default_unit_kib
    return max(1, math.ceil(float(m.group(1)) * unit / 1024))


def canonical_command(name: str) -> str:
    """A command's name as condor_submit knows it: keys are case-insensitive, and ``+Attr`` and ``MY.Attr`` set
    the same job attribute (written ``+attr``)."""
    low = name.strip().lower()
    return "+" + low[3:] if low.startswith("my.") else low


def check_command_names(names: Iterable[str], *, what: str) -> frozenset[str]:
    """A site's list of commands pods may set: valid names, none the submitter sets; ValueError naming one."""
    out = set()
    for name in names:
        key = canonical_command(name)
        if not _COMMAND_NAME.fullmatch(name.strip()):
            raise ValueError(f"{what}: {name!r} is not a submit command name")
        if key in RESERVED_COMMANDS or key.startswith("+interlink") or key in ACCOUNTING_COMMANDS:
            raise ValueError(f"{what}: {name!r} cannot be allowed (the submitter or the accounting policy sets it)")
        out.add(key)
    return frozenset(out)


def check_command(name: str, value: str, *, source: str, allowed: frozenset[str] | None = None) -> tuple[str, str]:
    """Validate one ``name = value`` submit command from the site config or a pod (``allowed``: the names it may
    set; a pod's command is then written by its canonical name, so condor_submit reads what was checked)."""
    key = name.strip()
    if not _COMMAND_NAME.fullmatch(key):
        raise SubmitCommandError(f"{source} submit command {name!r} is not a valid command name")
    low = canonical_command(key)
    if low in RESERVED_COMMANDS or low.startswith("+interlink"):
        raise SubmitCommandError(f"{source} submit command {key!r} is not allowed (the submitter sets it itself)")
    if allowed is not None and low not in allowed:  # by default a pod sets no custom attribute (owner…)
        raise SubmitCommandError(
            f"{source} submit command {key!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
        )
    text = str(value).strip()
    _check_line(text, what=f"{source} submit command {key!r}", tabs=True)
    if allowed is None:
        return key, text  # the site's own commands may use macros and expressions (request_memory = max({...}))
    key = low
    if "$" in text:
        raise SubmitCommandError(f"{source} submit command {key!r} may not use $ macros")
    if low in ("request_disk", "request_memory"):
        check_quantity(text, what=f"{source} submit command {key!r}:")
    elif low in ("request_cpus", "request_gpus") and not _WHOLE.fullmatch(text):
        raise SubmitCommandError(f"{source} submit command {key!r}: {text!r} is not a whole number")
    return key, text


def pod_commands(flags: Iterable[str], allowed: frozenset[str] = DEFAULT_POD_COMMANDS) -> list[tuple[str, str]]:
    """The pod's backend flags as ``name=value`` submit commands, each one the site allows (``allowed``, and the
    accounting commands, which :func:`accounting_commands` decides). Read as condor_submit reads a line: the name
    is what comes before the first ``=``, trimmed, case-insensitive; no ``$`` macro, no continuation."""
    out = []
    for flag in flags:
        if "=" not in flag:
            raise SubmitCommandError(f"pod submit command {flag!r} must look like name=value")
        name, value = flag.split("=", 1)
        out.append(check_command(name, value, source="pod", allowed=allowed | ACCOUNTING_COMMANDS))
    return out


def resource_commands(req: pb.ResourceRequest | None) -> list[tuple[str, str]]:
    """Pod resources → request_* (cpus rounded up; memory in MB — HTCondor's unit — rounded up)."""
    if req is None:
        return []
    out: list[tuple[str, str]] = []
    if req.cpu_millis > 0:
        out.append(("request_cpus", str(max(1, math.ceil(req.cpu_millis / 1000)))))
    if req.memory_bytes > 0:
        out.append(("request_memory", str(max(1, math.ceil(req.memory_bytes / 2**20)))))
    if req.gpus > 0:
        out.append(("request_gpus", str(req.gpus)))
    return out


def time_limit(req: pb.ResourceRequest | None, margin: float) -> int | None:
    """Whole seconds HTCondor lets the job run: the pod's deadline plus a margin, so that the
    script's own deadline (which writes every container's exit file) normally ends it first."""
    if req is None or req.wall_time is None or req.wall_time.total_seconds() <= 0:
        return None
    return max(1, math.ceil(req.wall_time.total_seconds() + max(0.0, margin)))


def accounting_commands(site: SubmitSite, namespace: str, asked: Mapping[str, str]) -> list[tuple[str, str]]:
    """The site's accounting group/user for the pod's namespace, with what the pod asked where allowed."""
    if site.accounting is None:
        if asked:
            names = ", ".join(sorted(asked))
            raise SubmitCommandError(f"pod submit command {names}: accounting is site policy; a pod may not set it")
        return []
    try:
        account = site.accounting.decide(
            namespace, group=asked.get("accounting_group"), user=asked.get("accounting_group_user")
        )
    except PolicyError as exc:
        raise SubmitCommandError(f"pod submit command: {exc}") from None
    out = []
    if account.group:
        out.append(("accounting_group", account.group))
    if account.user:
        out.append(("accounting_group_user", account.user))
    return out


def ce_commands(body: Sequence[tuple[str, str]], limit: int | None) -> list[tuple[str, str]]:
    """The CE router's inputs from the job's final ``request_*`` (01-ce-router-defaults.conf): ``maxMemory``
    (MiB), ``xcount`` (cpus), ``maxWallTime`` (minutes, rounded up, margin included)."""
    last = {k.lower(): v for k, v in body}
    out: list[tuple[str, str]] = []
    memory = last.get("request_memory")
    mib = quantity_mib(memory, default_unit_kib=1024) if memory else None
    if mib is not None:
        out.append(("+maxMemory", str(mib)))
    cpus = last.get("request_cpus")
    if cpus is not None and _WHOLE.fullmatch(cpus):
        out.append(("+xcount", cpus))
    if limit is not None:
        out.append(("+maxWallTime", str(max(1, math.ceil(limit / 60)))))
    return out


def submit_description(job: JobSpec, site: SubmitSite) -> str:
    """The whole submit description. Later commands win, so the order is the precedence:
    site commands < pod commands < pod resources < site accounting < what the submitter must control."""
    lines = ["# interlink-nats: one pod, one job (generated; do not edit)", "universe = vanilla"]
    body: list[tuple[str, str]] = []
    if site.request_disk:
        body.append(("request_disk", check_quantity(site.request_disk, what="site request_disk")))
    for name, value in (site.site_commands or {}).items():
        body.append(check_command(name, value, source="site"))
    asked: dict[str, str] = {}
    for key, value in pod_commands(job.backend_flags, site.allowed_pod_commands):
        if key in ACCOUNTING_COMMANDS:
            asked[key] = value
        else:
            body.append((key, value))
    body.extend(resource_commands(job.resources))
    body.extend(accounting_commands(site, job.namespace, asked))
    limit = time_limit(job.resources, site.time_limit_margin)
    if site.spool:
        body.extend(ce_commands(body, limit))
    lines += [f"{k} = {v}" for k, v in body]
    path = str(job.job_dir)
    job_dir = literal(_path(path), what="job directory")
    lines += ["executable = job.sh", f"initialdir = {job_dir}", "output = job.out", "error = job.err", "log = job.log"]
    if site.spool:
        # The sandbox travels: job.sh in, the container files out (when the job ends or is evicted). Only
        # containers/ is listed: a listed file missing at transfer time would hold the job.
        lines += [
            "should_transfer_files = YES",
            "when_to_transfer_output = ON_EXIT_OR_EVICT",
            "transfer_executable = true",
            "transfer_output_files = containers",
        ]
    else:
        # Shared filesystem: the job writes its container files in place, so logs are live.
        lines += [
            "should_transfer_files = NO",
            f"environment = {_environment({'INTERLINK_JOB_DIR': path})}",
        ]
    batch = f"{job.namespace}/{job.name}" if job.name else job.uid
    lines += [
        f"+{POD_UID_ATTR} = {submit_string(job.uid, what='pod uid')}",
        f"+{POOL_ATTR} = {submit_string(site.pool, what='pool')}",
        f"+JobBatchName = {submit_string(batch, what='pod name')}",
    ]
    if limit is not None:
        lines.append(f"+{TIME_LIMIT_ATTR} = {limit}")
        if not site.spool:  # a CE's router claims the job and deletes PeriodicRemove: maxWallTime does it there
            lines.append(f"periodic_remove = (JobStatus == 2) && (time() - JobCurrentStartDate > {TIME_LIMIT_ATTR})")
    lines.append("queue 1")
    return "\n".join(lines) + "\n"


def _path(path: str) -> str:
    if path != path.strip() or not path:
        raise SubmitCommandError(f"job directory {path!r} cannot be written in a submit description")
    return path


def _environment(env: Mapping[str, str]) -> str:
    """The new (quoted) ``environment`` syntax: values single-quoted, quotes doubled, ``$`` as ``$(DOLLAR)``."""
    parts = []
    for key, value in env.items():
        _check_line(value, what=f"environment value of {key}")
        text = _dollars(value.replace(chr(39), chr(39) * 2).replace(chr(34), chr(34) * 2), what=f"environment {key}")
        parts.append(f"{key}='{text}'")
    return '"' + " ".join(parts) + '"'
