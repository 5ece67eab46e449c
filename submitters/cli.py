"""``interlink-nats submitter <backend>``: run a submitter for one pool; one command per entry of
``backends.BACKENDS`` (common options, then the backend's own flags), and ``run``.

Registered by the top-level CLI as ``app.add_typer(submitters.cli.app, name="submitter")``.
Every option can also come from the environment (``INTERLINK_SUBMITTER_<FIELD>``) or the config
file (``--config``, YAML or TOML); the command line wins, then the environment, then the file.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from interlink_nats.kernel.gc_tuning import freeze_long_lived
from interlink_nats.kernel.logging_setup import setup_logging
from interlink_nats.kernel.signals import run_until_signal
from interlink_nats.submitters.backends import BACKENDS, BackendEntry

app = typer.Typer(
    name="submitter",
    help="Serve SubmitterService for one pool on a site (settings also from INTERLINK_SUBMITTER_* and --config).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML config file")]
InstanceOpt = Annotated[str | None, typer.Option(help="name of this replica (default: host + random)")]
LogOpt = Annotated[str, typer.Option(help="debug, info, warning")]
JsonOpt = Annotated[bool, typer.Option(help="log JSON lines")]


def _option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


COMMON_OPTIONS = (
    _option("config", ConfigOpt),
    _option("pool", Annotated[str | None, typer.Option(help="pool name (a DNS label)")]),
    _option(
        "nats_url",
        Annotated[
            list[str] | None,
            typer.Option(
                "--nats-url",
                help="nats://, tls:// or wss:// URL; repeatable or comma-separated (every node of a cluster)",
            ),
        ],
    ),
    _option("state_dir", Annotated[Path | None, typer.Option(help="job directories and the registry")]),
    _option(
        "poll_interval_s",
        Annotated[
            float | None, typer.Option("--poll-interval-s", "--poll-interval", help="seconds between backend polls")
        ],
    ),
    _option("instance_id", InstanceOpt),
    _option(
        "probe_port",
        Annotated[
            int | None,
            typer.Option(help="serve /healthz and /metrics on this port (not served when unset); 0: a free port"),
        ],
    ),
    _option("probe_host", Annotated[str | None, typer.Option(help="address of /healthz and /metrics [127.0.0.1]")]),
)
LOG_OPTIONS = (_option("log_level", LogOpt, "info"), _option("json_logs", JsonOpt, False))


def _serve(config: Path | None, log_level: str, json_logs: bool, overrides: dict[str, Any]) -> None:
    from interlink_nats.kernel.nats_connection import check_credentials
    from interlink_nats.submitters.runtime import run_submitter
    from interlink_nats.submitters.settings import SubmitterSettings

    setup_logging(log_level, json_logs)
    # Invalid settings (ValidationError, ConfigFileError) and start-up failures leave through the CLI's one
    # error boundary (interlink_nats.errors): one line, exit 2 for bad input, 1 for a failed start.
    settings = SubmitterSettings.load(config, **overrides)
    settings.read_build_config()  # a broken BuildConfig or credential file is bad input too: said before
    check_credentials(settings.nats)  # anything starts (exit 2)
    freeze_long_lived()  # start-up (modules, settings) leaves the collector's scans; see kernel/gc_tuning.py
    hangups = asyncio.Event()  # SIGHUP re-reads the file: a daemon, as nats-server and slurmctld
    reread = functools.partial(SubmitterSettings.load, config, **overrides)
    run_until_signal(lambda stop: run_submitter(settings, stop, hangups=hangups, reread=reread), reload=hangups)


def _backend_command(name: str, entry: BackendEntry) -> Callable[..., None]:
    """``submitter <name>``: the common options, then the backend's own flags (its section's keys)."""

    def command(**options: Any) -> None:
        section = {flag.key: options.pop(flag.key) for flag in entry.flags}
        section = {key: value for key, value in section.items() if value is not None}
        nats_url = options.pop("nats_url")
        overrides = {
            **options,
            "backend": name,
            "nats": {"url": nats_url} if nats_url else None,
            name: section or None,
        }
        _serve(overrides.pop("config"), overrides.pop("log_level"), overrides.pop("json_logs"), overrides)

    flags = [_option(flag.key, Annotated[flag.type | None, typer.Option(help=flag.help)]) for flag in entry.flags]
    params = [*COMMON_OPTIONS, *flags, *LOG_OPTIONS]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads it
    command.__annotations__ = {param.name: param.annotation for param in params} | {"return": None}
    command.__name__ = name
    command.__doc__ = entry.help
    return command


for _name, _entry in BACKENDS.items():
    app.command(_name)(_backend_command(_name, _entry))


@app.command()
def run(
    config: ConfigOpt = None,
    instance_id: InstanceOpt = None,
    log_level: LogOpt = "info",
    json_logs: JsonOpt = False,
) -> None:
    """Run the backend the config file names (its `backend:` key): what the systemd unit starts."""
    if config is None and not os.environ.get("INTERLINK_SUBMITTER_CONFIG_FILE"):
        raise typer.BadParameter("required: the site file that names the pool and backend", param_hint="'--config'")
    _serve(config, log_level, json_logs, {"instance_id": instance_id})


@app.command()
def check(
    config: ConfigOpt = None,
    instance_id: InstanceOpt = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "warning",
    json_logs: JsonOpt = False,
) -> None:
    """Try what the config file asks for once and print a table (exit 0: all pass, 2: one failed); starts nothing.

    The file, the NATS identity on the pool's subjects, the backend's commands (each run once, read-only) and
    the BuildConfig's runtime on this host. Takes no job, submits and announces nothing, leaves nothing running.
    """
    from interlink_nats.kernel.checks import exit_code, table
    from interlink_nats.submitters.settings import SubmitterSettings
    from interlink_nats.submitters.sitecheck import check_site

    if config is None and not os.environ.get("INTERLINK_SUBMITTER_CONFIG_FILE"):
        raise typer.BadParameter("required: the site file that names the pool and backend", param_hint="'--config'")
    setup_logging(log_level, json_logs)
    settings = SubmitterSettings.load(config, instance_id=instance_id)  # a bad file: one line, exit 2, as run
    settings.read_build_config()
    checks = asyncio.run(check_site(settings))
    typer.echo(table(checks), nl=False)
    raise typer.Exit(exit_code(checks))


if __name__ == "__main__":  # ``python -m interlink_nats.submitters.cli shell …`` (tests run it this way)
    app()
