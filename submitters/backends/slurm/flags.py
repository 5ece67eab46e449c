"""Pure: a job's backend flags read with sbatch's grammar (``kernel.sbatch_grammar``), then allowed; and the other
inputs sbatch reads options from (the script's header, its environment).

Comparing the words a pod wrote with names (the old denylist) let ``--arr``, ``--ui`` and ``-vAgrp`` through; here
every word is parsed first, each option is checked by its canonical long name against the pool's allowlist, and
what passes is handed to sbatch re-written as ``--name=value``. Tested in tests/backends/slurm/test_slurm_flags.py,
and against the real sbatch in tests/backends/slurm/test_slurm_flags_real.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from interlink_nats.kernel.sbatch_grammar import DEFAULT_ALLOWED as DEFAULT_ALLOWED
from interlink_nats.kernel.sbatch_grammar import LONG_OPTIONS as LONG_OPTIONS
from interlink_nats.kernel.sbatch_grammar import OPTION_NAMES as OPTION_NAMES
from interlink_nats.kernel.sbatch_grammar import RESERVED as RESERVED
from interlink_nats.kernel.sbatch_grammar import Flag as Flag
from interlink_nats.kernel.sbatch_grammar import FlagError as FlagError
from interlink_nats.kernel.sbatch_grammar import allowed as allowed
from interlink_nats.kernel.sbatch_grammar import check_names as check_names
from interlink_nats.kernel.sbatch_grammar import parse as parse
from interlink_nats.submitters.backends.job_environment import job_environment


def site_flags(words: Sequence[str], *, source: str) -> list[Flag]:
    """The site's own flags (the pool's ``sbatch_flags``, a flavor's): parsed, and none of RESERVED."""
    flags = parse(words, source=source)
    for flag in flags:
        if flag.name in RESERVED:
            raise FlagError(f"{source} flag {flag.written!r} is not allowed (the submitter sets --{flag.name} itself)")
    return flags


@dataclass(frozen=True, slots=True)
class FlagPolicy:
    """What a job's backend flags may hold: the allowlist, and the site's flavors' flags (trusted as the site's)."""

    allow: frozenset[str] = DEFAULT_ALLOWED
    flavors: Mapping[tuple[str, ...], list[Flag]] | None = None
    """Each flavor's flags by their words: a job's flags that begin with them (the gateway puts the flavor's
    before the pod's) are the site's; any pod may pick any flavor, so this grants nothing a pod could not ask."""

    def check(self, words: Sequence[str], *, account_by_policy: bool) -> list[Flag]:
        """A job's backend flags (flavor's, then pod's), parsed and allowed. ``--account`` is left in for the
        site's accounting policy to decide when there is one (``account_by_policy``); else it must be allowed."""
        start, trusted = 0, []
        for prefix, flags in (self.flavors or {}).items():
            if len(prefix) > start and tuple(words[: len(prefix)]) == prefix:
                start, trusted = len(prefix), flags
        rest = words[start:]
        allow = self.allow | {"account"} if account_by_policy else self.allow
        return [*trusted, *allowed(parse(rest, source="pod"), allow, source="pod", shown=self.allow)]


def take_account(flags: Sequence[Flag]) -> tuple[list[Flag], str | None]:
    """``flags`` without ``--account`` (any spelling sbatch accepts), and the account asked for (the last, as
    sbatch reads them); None: none asked."""
    asked = None
    rest = []
    for flag in flags:
        if flag.name == "account":
            asked = flag.value or ""
        else:
            rest.append(flag)
    return rest, asked


# sbatch reads options from two more places, before the command line (which wins only where it names the option):
# directives at the top of the script, and its own environment (src/sbatch/opt.c, 22.05.8).
_DIRECTIVES = ("#SBATCH", "#SLURM", "#PBS", "#BSUB")
"""``#SBATCH``/``#SLURM`` (_opt_batch_script) and the ``#PBS``/``#BSUB`` it translates (xlate_batch_script)."""
_INPUT_ENV = ("SLURM_CLUSTERS", "SLURM_HINT", "SLURM_HOSTFILE", "SLURM_UMASK", "SLURM_CONTAINER")
"""The SLURM_* variables sbatch reads as options (env_vars[], _opt_verify, sbatch.c); every SBATCH_* is one."""
SBATCH_NEEDS = ("SLURM_CONF",)
"""What sbatch reads from its environment to work, kept whatever ``slurm.job_environment`` says: where slurm.conf
is (src/common/read_config.c; without it sbatch looks for /etc/slurm/slurm.conf, then for a configless
controller in DNS). Everything else it needs comes from that file: the controllers, and the munge socket
(``AuthInfo=socket=``). A path, no secret; the job's own ``srun``/``scontrol`` (a pod group's launcher) need it too.
``SLURM_JWT`` (auth/jwt clients) is a token: it is passed only where the site lists it, and then every job sees it."""


def check_script_header(lines: Iterable[str], *, what: str = "job script") -> None:
    """FlagError when the script (its ``lines``, read only this far) has a line sbatch would read as options:
    sbatch scans from the top to the first line that is neither blank nor a comment; any comment line there
    starting (after blanks, in any case) with a directive word is refused. The gateway's scripts have none:
    this holds against any other NATS client."""
    for line in lines:
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            return
        if stripped.upper().startswith(_DIRECTIVES):
            raise FlagError(f"{what}: line {stripped[:60].rstrip()!r} is an sbatch directive; flags come only checked")


def job_sbatch_environment(env: Mapping[str, str], allow: Iterable[str], ours: Mapping[str, str]) -> dict[str, str]:
    """sbatch's environment, which every job inherits: the variables of ``env`` (the submitter's) that ``allow``
    (``slurm.job_environment``) lists, and :data:`SBATCH_NEEDS`, then ``ours`` (what interlink-nats sets for the
    job); never what sbatch would read as options, nor the submitter's settings (:func:`sbatch_environment`)."""
    return sbatch_environment(job_environment(env, (*allow, *SBATCH_NEEDS), ours=ours))


class SbatchEnvironment:
    """sbatch's environment for each call: the submitter's, filtered by :func:`job_sbatch_environment` at the first
    call only (a running process's environment does not change; filtering it was 80 µs of every Slurm pod's
    submit), and the call's own variables (``ours``) over it, filtered alike."""

    def __init__(self, allow: Iterable[str]) -> None:
        self._allow = tuple(allow)
        self._site: dict[str, str] | None = None

    def __call__(self, ours: Mapping[str, str]) -> dict[str, str]:
        if self._site is None:
            self._site = job_sbatch_environment(os.environ, self._allow, {})
        return {**self._site, **sbatch_environment(ours)}


def sbatch_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables sbatch would read as options (``SBATCH_*``, :data:`_INPUT_ENV`) and without
    the submitter's own settings (``INTERLINK_SUBMITTER_*``: secrets that the job, which inherits sbatch's
    environment, must not see)."""
    return {
        k: v for k, v in env.items() if not k.startswith(("SBATCH_", "INTERLINK_SUBMITTER_")) and k not in _INPUT_ENV
    }
