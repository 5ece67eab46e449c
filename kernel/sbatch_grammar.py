"""Pure: sbatch's command-line grammar — its option table and glibc getopt_long's rules — and an allowlist check.

sbatch parses its command line with glibc's ``getopt_long`` (optstring ``+...``: options stop at the first word
that is not one): a long option may be written as any unambiguous prefix (``--acco`` is ``--account``), short
options bundle (``-vAacct`` is ``-v -A acct``), a value comes as ``--opt=v``, ``--opt v``, ``-Av`` or ``-A v``
(an optional value only as ``--opt=v`` or ``-kv``). Here every word is parsed the same way, each option is known
by its canonical long name, and :meth:`Flag.argv` writes it back as ``--name=value`` for sbatch to read exactly
what was checked. In the kernel because both sides use it: the Slurm submitter (the authority,
``submitters.backends.slurm.flags``) and the gateway, which refuses a pod early when its pool announced its
allowlist. Tested in tests/backends/slurm/test_slurm_flags.py, and against the real sbatch in
tests/backends/slurm/test_slurm_flags_real.py.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class Arg(enum.Enum):
    NONE = ""
    REQUIRED = "="
    OPTIONAL = "?"


class FlagError(ValueError):
    """A backend flag the submitter may not pass on (the message names it as it was written)."""


# sbatch's option table, Slurm 22.05.8 (the version the project tests against: Debian 12's slurm-wlm, and
# `sbatch --version` here): src/common/slurm_opt.c at tag slurm-22-05-8-1, every entry of common_options[] that
# has a name and a set_func or set_func_sbatch (what slurm_option_table_create gives sbatch), in that order.
# name[/short letter] then "=" (required value), "?" (optional value) or nothing (no value).
_TABLE = """
account/A= acctg-freq= array/a= batch= begin/b= bb= bbf= cluster-constraint= chdir/D= cluster= clusters/M=
comment= container= context= contiguous constraint/C= core-spec/S= cores-per-socket= cpu-freq= cpus-per-gpu=
cpus-per-task/c= deadline= delay-boot= dependency/d= distribution/m= error/e= exclude/x= exclusive? export=
export-file= extra-node-info/B= get-user-env? gid= gpu-bind= gpu-freq= gpus/G= gpus-per-node= gpus-per-socket=
gpus-per-task= gres= gres-flags= help/h hint= hold/H ignore-pbs input/i= job-name/J= kill-on-invalid-dep=
licenses/L= mail-type= mail-user= mcs-label= mem= mem-bind= mem-per-cpu= mem-per-gpu= mincpus= network= nice?
no-kill/k? no-requeue nodefile/F= nodelist/w= nodes/N= ntasks/n= ntasks-per-core= ntasks-per-gpu=
ntasks-per-node= ntasks-per-socket= ntasks-per-tres= open-mode= output/o= overcommit/O oversubscribe/s parsable
partition/p= power= prefer= priority= profile= propagate? qos/q= quiet/Q reboot requeue reservation= signal=
sockets-per-node= spread-job switches= tasks-per-node= test-only thread-spec= threads-per-core= time/t=
time-min= tmp= uid= use-min-nodes verbose/v version/V usage wait/W wait-all-nodes= wckey= wrap=
"""
_SAME = {"tasks-per-node": "ntasks-per-node"}
"""Entries with the same ``val`` in slurm_opt.c (LONG_OPT_NTASKSPERNODE): one option under two names."""


@dataclass(frozen=True, slots=True)
class SbatchOption:
    name: str
    """Canonical long name (what the allowlist and the re-written flag use)."""
    arg: Arg
    written: str
    """The long name as listed (``tasks-per-node`` for ``ntasks-per-node``'s second name)."""


def _options() -> tuple[dict[str, SbatchOption], dict[str, SbatchOption]]:
    longs: dict[str, SbatchOption] = {}
    shorts: dict[str, SbatchOption] = {}
    for entry in _TABLE.split():
        arg = Arg(entry[-1]) if entry[-1] in "=?" else Arg.NONE
        name, _, short = entry.rstrip("=?").partition("/")
        option = SbatchOption(_SAME.get(name, name), arg, name)
        longs[name] = option
        if short:
            shorts[short] = option
    return longs, shorts


LONG_OPTIONS, SHORT_OPTIONS = _options()
OPTION_NAMES = frozenset(o.name for o in LONG_OPTIONS.values())

RESERVED = frozenset(
    {
        *("job-name", "chdir", "output", "error", "input", "parsable", "wrap", "test-only", "wait"),
        *("uid", "gid", "export", "export-file", "get-user-env", "array", "dependency", "clusters", "cluster"),
        *("help", "usage", "version"),
    }
)
"""Options neither a pod nor the site's flags may use: the submitter sets them itself (name, directory, output,
``--parsable``), or they would run something else (``--wrap``), as someone else (``--uid``, ``--gid``, the
submitter's environment), as many jobs (``--array``), elsewhere (``-M``: squeue would not see it), after another
job, or not at all (``--test-only``, ``--help``), or make sbatch wait."""

DEFAULT_ALLOWED = frozenset(
    {
        *("partition", "time", "time-min", "deadline", "signal", "comment"),
        *("constraint", "prefer", "exclude", "contiguous", "switches", "use-min-nodes", "wait-all-nodes"),
        *("hint", "distribution", "gres-flags", "gpu-bind", "mem-bind", "no-kill"),
    }
)
"""What a pod's ``slurm-job.vk.io/flags`` may use unless the site says otherwise (``slurm.allowed_pod_flags``):
where and when its job runs, never who runs or pays for it (``--account`` is site policy, ``--qos``,
``--wckey``), how much it takes beyond what Kueue admitted (``--nodes``, ``--ntasks``, ``--mem``, ``--gres``,
``--exclusive``: the pod's resources size the job), its priority (``--nice``, ``--priority``), the submitter's
files (``--nodefile``, ``--open-mode``), mail, reboots, containers, burst buffers or requeues.
docs/backends/slurm.md lists it with the reasons."""


@dataclass(frozen=True, slots=True)
class Flag:
    """One option as sbatch reads it."""

    name: str
    """Canonical long name."""
    value: str | None
    """None: no value (an option that takes none, or an optional value not given)."""
    written: str
    """The word(s) the flag was written as, for messages."""

    def argv(self) -> str:
        """The flag as sbatch is given it: ``--name=value`` (``--name`` without a value)."""
        return f"--{self.name}" if self.value is None else f"--{self.name}={self.value}"


def _long(word: str, *, source: str) -> tuple[SbatchOption, str | None]:
    """``--name[=value]``: the option (exact name, else the one option all prefix matches are) and its value."""
    text, eq, value = word[2:].partition("=")
    exact = LONG_OPTIONS.get(text)
    if exact is not None:
        return exact, value if eq else None
    found = [o for name, o in LONG_OPTIONS.items() if name.startswith(text)]
    if not found:
        raise FlagError(f"{source} flag {word!r}: sbatch has no such option")
    # glibc: several prefix matches are one option when they agree on it (same val, same has_arg)
    if len({(o.name, o.arg) for o in found}) > 1:
        names = ", ".join(f"--{o.written}" for o in found)
        raise FlagError(f"{source} flag {word!r} is ambiguous: sbatch would refuse it (it could be {names})")
    return found[0], value if eq else None


def parse(words: Sequence[str], *, source: str) -> list[Flag]:
    """``words`` as sbatch's getopt_long reads them; FlagError for a word sbatch would refuse or read as the
    script (a word that is not an option, ``--``), and for a control character anywhere."""
    out: list[Flag] = []
    i = 0
    while i < len(words):
        word = words[i]
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise FlagError(f"{source} flag {word!r} has a control character")
        if word == "--" or not word.startswith("-") or word == "-":
            raise FlagError(f"{source} flag {word!r} is not an sbatch option (sbatch would take it as the script)")
        read = _long_flag if word.startswith("--") else _short_flags
        flags, i = read(words, i, source=source)
        out += flags
        i += 1
    return out


def _long_flag(words: Sequence[str], i: int, *, source: str) -> tuple[list[Flag], int]:
    """``words[i]``, a long option, and its value (attached, or the next word); the last index read."""
    word = words[i]
    option, value = _long(word, source=source)
    if option.arg is Arg.NONE and value is not None:
        raise FlagError(f"{source} flag {word!r}: --{option.written} takes no value")
    if option.arg is Arg.REQUIRED and value is None:
        i, value = _next_value(words, i, source=source)
        word = f"{word} {value}"
    return [Flag(option.name, value, word)], i


def _short_flags(words: Sequence[str], i: int, *, source: str) -> tuple[list[Flag], int]:
    """``words[i]``, one or more bundled short options; the first that takes a value ends the bundle (the rest of
    the word is its value; a required one without it takes the next word); the last index read."""
    word = words[i]
    out = []
    for j in range(1, len(word)):
        short = SHORT_OPTIONS.get(word[j])
        if short is None:
            raise FlagError(f"{source} flag {word!r}: sbatch has no option -{word[j]}")
        if short.arg is Arg.NONE:
            out.append(Flag(short.name, None, word))
            continue
        rest = word[j + 1 :]
        if rest or short.arg is Arg.OPTIONAL:
            out.append(Flag(short.name, rest or None, word))
        else:
            i, value = _next_value(words, i, source=source)
            out.append(Flag(short.name, value, f"{word} {value}"))
        break
    return out, i


def _next_value(words: Sequence[str], i: int, *, source: str) -> tuple[int, str]:
    if i + 1 >= len(words):
        raise FlagError(f"{source} flag {words[i]!r} needs a value")
    value = words[i + 1]
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise FlagError(f"{source} flag {words[i]!r} {value!r} has a control character")
    return i + 1, value


def check_names(names: Iterable[str], *, what: str) -> frozenset[str]:
    """A site's list of option names: canonical long names sbatch has, none of RESERVED; ValueError naming one."""
    out = set()
    for name in names:
        if name not in OPTION_NAMES:
            hint = f" (its canonical name is {_SAME[name]!r})" if name in _SAME else ""
            raise ValueError(f"{what}: {name!r} is not an sbatch option name (a long name without dashes){hint}")
        if name in RESERVED:
            raise ValueError(f"{what}: {name!r} cannot be allowed (the submitter controls it)")
        out.add(name)
    return frozenset(out)


def allowed(flags: Iterable[Flag], allow: frozenset[str], *, source: str, shown: Iterable[str] = ()) -> list[Flag]:
    """``flags`` when each is in ``allow``; else FlagError naming the first other one as written (and what is
    allowed: ``shown``, else ``allow``)."""
    out = []
    for flag in flags:
        if flag.name not in allow:
            listed = ", ".join(sorted(shown or allow)) or "none"
            raise FlagError(
                f"{source} flag {flag.written!r} (sbatch --{flag.name}) is not allowed on this pool (allowed: {listed})"
            )
        out.append(flag)
    return out
