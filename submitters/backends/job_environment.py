"""Pure: which of the submitter's environment variables a job gets (``slurm.job_environment``,
``shell.job_environment``).

A job inherits the environment of what starts it: sbatch exports its whole environment to the job (``--export=ALL``,
its default), and the shell backend's launcher passes its own to every ``job.sh``. Both are started by the
submitter, whose environment is the site admin's (tokens, cloud credentials, proxies with passwords,
``HOME=/root``), while the job is a tenant's and may run as the tenant's account (docs/security.md). So a job gets
only the variables the site lists, by name or by prefix (``LC_*``), and the ones interlink-nats sets for it
(``INTERLINK_JOB_DIR``...). Tested in tests/backends/test_job_environment.py; on a real Slurm in
tests/backends/slurm/test_slurm_job_environment.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import BeforeValidator

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

DEFAULT_JOB_ENVIRONMENT: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
)
"""What a job gets of the submitter's environment unless the site says otherwise: where programs are (the job
runs ``podman``/``apptainer`` and coreutils by name), its language, locale and time zone, and where the site's
podman configuration is when the submitter names it (containers.conf(5), containers-storage.conf(5),
containers-registries.conf(5): files, not credentials), so a job's podman uses the storage and registries the
site set up for the submitter's. None of it names the submitter's account or holds a secret (a prefix such as
``APPTAINER_*`` would: ``APPTAINER_DOCKER_PASSWORD``). ``HOME``, ``USER``, ``LOGNAME``, ``MAIL``, ``XDG_*`` are
left out: they are the submitter's, not those of the account the job runs as (Slurm sets ``SLURM_JOB_USER``; a site
whose jobs need the account's home sets it, docs/backends/slurm.md, "The job's environment")."""

SUBMITTER_SETTINGS = "INTERLINK_SUBMITTER_"
"""The submitter's own settings (``submitters.settings.ENV_PREFIX``: NATS credentials among them): never passed,
even where a site's list names them."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_names(names: object, *, what: str) -> tuple[str, ...]:
    """``names`` as a job environment allowlist: each a variable name, or a prefix followed by ``*`` (``LC_*``);
    ValueError with one line naming ``what`` and the bad entry. A ``*`` alone is refused: it would pass the
    submitter's whole environment, which is what the list is for."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise ValueError(f"{what} must be a list of environment variable names (a trailing * for a prefix)")
    out = []
    for raw in names:
        name = str(raw).strip()
        stem = name[:-1] if name.endswith("*") else name
        if not _NAME.fullmatch(stem):
            raise ValueError(
                f"{what}: {name!r} is not an environment variable name (letters, digits, _; a trailing * for a "
                "prefix, never * alone)"
            )
        out.append(name)
    return tuple(dict.fromkeys(out))


def allows(allowlist: Iterable[str], name: str) -> bool:
    """Whether ``name`` is listed in ``allowlist``, by name or by a ``PREFIX*`` entry."""
    return any(name.startswith(entry[:-1]) if entry.endswith("*") else name == entry for entry in allowlist)


def job_environment(
    env: Mapping[str, str], allowlist: Iterable[str], *, ours: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables of ``env`` that ``allowlist`` lists (never the submitter's settings), then ``ours`` (what
    interlink-nats sets for the job, which wins over a variable of the same name)."""
    listed = tuple(allowlist)
    exact = frozenset(e for e in listed if not e.endswith("*"))
    prefixes = tuple(e[:-1] for e in listed if e.endswith("*"))
    out = {
        k: v
        for k, v in env.items()
        if (k in exact or (prefixes and k.startswith(prefixes))) and not k.startswith(SUBMITTER_SETTINGS)
    }
    out.update(ours or {})
    return out


JobEnvironment = Annotated[tuple[str, ...], BeforeValidator(lambda value: check_names(value, what="job_environment"))]
"""A settings field holding a job environment allowlist (``slurm.job_environment``, ``shell.job_environment``)."""
