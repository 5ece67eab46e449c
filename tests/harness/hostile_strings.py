"""The hostile-string corpus and the pod model's string fields, for the "no pod string becomes code" tests.

``CORPUS``: strings that would create a file in ``CANARY_DIR`` (or print ``MARKER``) if any generated artifact ever
ran them as code, in every shape a shell, a bash comment, a Slurm filename pattern, an HTCondor submit
description (macros, continuation lines) or a jinja template would treat specially.

``model_string_fields``: every string (and bytes) field of :class:`.pod_model.Pod`, enumerated from the model's
dataclass fields and type hints, through nested types, unions, tuples, lists and maps (keys too). A field added
to the model later appears here by itself; ``test_pod_strings.py`` then fails until it has a placement.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import os
import shutil
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

from interlink_nats.services.scripts import pod_model
from interlink_nats.services.scripts.errors import PodRejected

CANARY_DIR = Path(tempfile.gettempdir()) / f"interlink-nats-canary-dir-{os.getpid()}"
"""Must stay empty: every shape below creates ``x`` in it when run as code."""
atexit.register(shutil.rmtree, CANARY_DIR, ignore_errors=True)  # named for this process: gone with it
_T = f"touch {CANARY_DIR}/x"
MARKER = "IL_42_MARK"
"""What the printing shapes print when run (``$((6*7))`` is computed): never in any output."""
_P = "echo IL_$((6*7))_MARK"

CORPUS: tuple[str, ...] = (
    # shell: substitutions, separators, quotes of both kinds
    f"$({_T})",
    f"`{_T}`",
    f"; {_T}",
    f"&& {_T}",
    f"|| {_T}",
    f"| {_T}",
    f"'; {_T}; '",
    f'"; {_T}; "',
    f"x' && {_T} #",
    f'x" && {_T} #',
    f"${{IFS}}{_T}",
    f"$'\\n'{_T}",
    # line breaks in every form (a comment or a header ends at one; U+2028/2029/0085 in other grammars)
    f"\n{_T}\n",
    f"g\n{_T} #",
    f"\r{_T}\r",
    f"\r\n{_T}",
    f"\u2028{_T}",
    f"\u2029{_T}",
    f"\u0085{_T}",
    f"\x0b{_T}\x0c",
    f"# comment\n{_T}",
    f"x #\n{_T}",
    f"\n{_P}\n",
    f"$({_P} >&2)",
    # NUL, backslashes, continuation lines (bash and HTCondor)
    f"x\x00{_T}",
    f"\\\n{_T}",
    "ends\\",
    "ends\\ ",
    "x\\\\",
    # HTCondor macros, Slurm filename patterns, jinja
    f"$$({_T})",
    "$(DOLLAR)",
    "$(Cluster)",
    "$ENV(HOME)",
    "%x-%j-%u-%%-%A",
    "{{ 7*7 }}",
    "{% raw %}{#",
    # Kubernetes $(VAR) references, globs and options
    "$(EXISTING)",
    "$$(EXISTING)",
    "*",
    "~",
    "-n",
    "--",
    "'",
    '"',
    "",
    " ",
    "\t",
    "\x1b[31m",
    "é漢字🙂",
    "a" * 200,
    # plausible values with a trailing line break: what re.match(...$) lets through
    "ok\n",
    "ok\r\n",
    "ok\r",
)


def canary_fired() -> list[str]:
    """What the canary directory holds (it must hold nothing)."""
    return sorted(os.listdir(CANARY_DIR)) if CANARY_DIR.exists() else []


# --- the model's string fields ---------------------------------------------------------------------------------


def _walk(tp: Any, path: str, out: list[str]) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (str, bytes):
        out.append(path)
    elif origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a not in (type(None), PodRejected)]
        for arm in arms:
            _walk(arm, path if len(arms) == 1 else f"{path}<{arm.__name__}>", out)
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        _walk(args[0], path + "[]", out)
    elif origin is tuple:
        for i, arm in enumerate(args):
            _walk(arm, f"{path}[{i}]", out)
    elif origin in (list, set, frozenset):
        _walk(args[0], path + "[]", out)
    elif origin is dict:
        _walk(args[0], path + "{key}", out)
        _walk(args[1], path + "{}", out)
    elif isinstance(tp, type) and (dataclasses.is_dataclass(tp) or hasattr(tp, "_fields")):
        hints = typing.get_type_hints(tp)
        names = [f.name for f in dataclasses.fields(tp)] if dataclasses.is_dataclass(tp) else list(tp._fields)
        for name in names:
            _walk(hints[name], f"{path}.{name}", out)
    elif tp in (int, bool, float, type(None), PodRejected) or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        pass  # no text: a number, a flag, or a rejection held for later
    else:  # a kind of type this walk does not know: say so, rather than skip its strings
        raise TypeError(f"{path}: cannot enumerate the strings of {tp!r}")


def model_string_fields() -> list[str]:
    """Every string field of the pod model as ``Pod.spec.containers[].env[]<EnvVar>.value`` (``[]`` a list
    item, ``{key}``/``{}`` a map's keys/values, ``<Type>`` one arm of a union)."""
    out: list[str] = []
    _walk(pod_model.Pod, "Pod", out)
    return out
