"""``interlink-nats``: one command line for every process of the system."""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import typing
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main
from pydantic import BaseModel, SecretStr

from interlink_nats.errors import FAILED, exit_with, extra_for
from interlink_nats.kernel.logging_setup import setup_logging
from interlink_nats.kernel.signals import run_until_signal
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings

app = typer.Typer(
    name="interlink-nats",
    help="Run Kubernetes pods on remote batch sites through NATS (interLink plugin, submitters, kueue-nats).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from interlink_nats.kernel.version import release_version

        typer.echo(f"interlink-nats {release_version()}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit")
    ] = False,
) -> None:
    """Run Kubernetes pods on remote batch sites through NATS (interLink plugin, submitters, kueue-nats)."""


@app.command()
def up(
    http_port: Annotated[
        int, typer.Option(min=1, max=65535, help="port of the gateway (interLink's plugin API)")
    ] = 4000,
    host: Annotated[str, typer.Option(help="address of the gateway")] = "127.0.0.1",
    pool: Annotated[str, typer.Option(help="pool name of the embedded shell submitter")] = "local",
    state_dir: Annotated[
        Path | None, typer.Option(help="where jobs and the NATS store live (default: a temp dir)")
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="debug, info (each part's start, stop and requests), warning: the one 'is up' line")
    ] = "warning",
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="allow a --host other than loopback: `up` has no bearer token and runs pods as host commands",
        ),
    ] = False,
) -> None:
    """Start an embedded stack: nats-server on a free port, the gateway, and a shell submitter for one pool."""
    _need_all_extras()
    from interlink_nats.up import run_stack

    setup_logging(log_level)
    run_until_signal(
        lambda stop: run_stack(
            stop, http_port=http_port, host=host, pool=pool, state_dir=state_dir, insecure_no_auth=insecure_no_auth
        ),
        say_stop=lambda cause: print(f"interlink-nats: stopping: {cause}", flush=True),  # at every --log-level
    )


def _need_all_extras() -> None:
    """``up`` runs every part: a missing module points at ``[all]``, not at the one other extra it belongs to
    (an install with ``[gateway]`` was told to add ``[submitter]``, then lacked the nats-server binary)."""
    import importlib

    for module in ("aiosqlite", "uvicorn", "starlette", "redis"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            raise MissingExtra(
                f"up runs the gateway and a submitter: it needs the 'all' extra ({module} is not "
                "installed): pip install 'interlink-nats[all]'"
            ) from None


class MissingExtra(RuntimeError):
    """An install step to name (exit 1, as for every command whose extra is missing: interlink_nats.errors)."""

    exit_code = FAILED


_FLAG_LIMITS: dict[str, dict[str, Any]] = {"port": {"min": 0, "max": 65535}}
"""What typer checks of a flag besides its type (the setting itself accepts more)."""


def _setting_options(section: type[BaseModel], prefix: str = "") -> list[inspect.Parameter]:
    """A flag per setting of ``section``, typed as the setting and described by it (its description, default
    and config key), so --help, the flags and the docs cannot drift. Secrets never (a flag shows in ``ps``: they
    come from files or the environment), nor a nested section (its own flags, ``prefix``ed) or --config."""
    params = []
    for key, info in section.model_fields.items():
        kind = info.annotation
        if key == "config_file" or kind is None or _is_secret(kind) or _is_section(kind):
            continue
        default = info.get_default(call_default_factory=True)
        shown = "" if default is None else f"default {default}; "
        config_key = f"{prefix.replace('_', '.')}{key}"
        name = f"{prefix}{key}"
        help_text = f"{info.description or config_key} ({shown}config key {config_key})"
        flag = [f"--{name.replace('_', '-')}"] if kind is bool else []  # a switch that only turns it on
        option = typer.Option(*flag, help=help_text, **_FLAG_LIMITS.get(name, {}))
        annotation = Annotated[kind | None, option]  # type: ignore[valid-type]  # built from the model
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return params


def _is_secret(kind: Any) -> bool:
    return SecretStr in (kind, *typing.get_args(kind))


def _is_section(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


gateway_app = typer.Typer(name="gateway", invoke_without_command=True, pretty_exceptions_enable=False)


def gateway(
    ctx: typer.Context,
    *,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="YAML/TOML/JSON config file (env INTERLINK_GATEWAY_CONFIG_FILE)"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
    json_logs: Annotated[bool, typer.Option(help="log JSON lines")] = False,
    **flags: Any,
) -> None:
    """Serve interLink's plugin API and forward pods to pools.

    Settings: flags > environment (INTERLINK_GATEWAY_*, nested with __, e.g. INTERLINK_GATEWAY_NATS__URL) >
    config file > defaults. Secrets (NATS password/token, the bearer token) come from files or the
    environment, never from the command line.
    """
    from interlink_nats.services.gateway.server import serve

    if ctx.invoked_subcommand is not None:
        return  # ``gateway check``: its own options
    setup_logging(log_level, json_logs)
    settings = _gateway_settings(config, flags)
    hangups = asyncio.Event()  # SIGHUP re-reads the file (a daemon, as nats-server); `up` stops on it instead
    reread = functools.partial(_gateway_settings, config, flags)
    run_until_signal(lambda stop: serve(settings, stop, hangups=hangups, reread=reread), reload=hangups)


def _gateway_settings(config: Path | None, flags: dict[str, Any]) -> GatewaySettings:
    """Flags > environment > file > defaults; the NATS flags (``--nats-*``) go to the ``nats`` section."""
    given = {key: value for key, value in flags.items() if value is not None}
    nats = {key.removeprefix("nats_"): value for key, value in given.items() if key.startswith("nats_")}
    settings = GatewaySettings.load(
        config, **{key: value for key, value in given.items() if not key.startswith("nats_")}
    )
    if nats:
        settings.nats = settings.nats.model_copy(update=nats)
    return settings


def _register_gateway() -> None:
    """``gateway``: --config, then a flag per NATS setting (``--nats-*``) and per gateway setting, then logging."""
    params = list(inspect.signature(gateway, eval_str=True).parameters.values())
    settings = _setting_options(GatewayNatsSettings, "nats_") + _setting_options(GatewaySettings)
    gateway.__signature__ = inspect.Signature([*params[:2], *settings, *params[2:4]])  # type: ignore[attr-defined]
    gateway_app.callback()(gateway)
    app.add_typer(gateway_app, name="gateway")


@gateway_app.command("check")
def gateway_check(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="YAML/TOML/JSON config file (env INTERLINK_GATEWAY_CONFIG_FILE)"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "warning",
    json_logs: Annotated[bool, typer.Option(help="log JSON lines")] = False,
) -> None:
    """Try the configuration once and print a table (exit 0: all pass, 2: one failed); serves nothing.

    Connects to NATS as the configured identity, tries the subscription the gateway needs, pings redis.
    """
    from interlink_nats.kernel.checks import exit_code, table
    from interlink_nats.services.gateway.server import check_gateway

    setup_logging(log_level, json_logs)
    checks = asyncio.run(check_gateway(_gateway_settings(config, {})))
    typer.echo(table(checks), nl=False)
    raise typer.Exit(exit_code(checks))


_register_gateway()


def _unavailable(name: str, error: ModuleNotFoundError, help_text: str) -> None:
    """Register ``name`` as a command that explains which extra to install (the base install lacks it)."""

    @app.command(
        name,
        help=f"{help_text} (needs the {extra_for(error.name) or error.name!r} extra)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    )
    def unavailable(ctx: typer.Context) -> None:
        raise error


def _register_subcommands() -> None:
    """Each command group is optional: a submitter-only install has no renderer and no Kubernetes client."""
    render_help = "Print the job script a pod becomes (secrets masked), so an admin sees exactly what runs."
    try:
        from interlink_nats.services.scripts.cli import render
    except ModuleNotFoundError as exc:
        _unavailable("render", exc, render_help)
    else:
        app.command(help=render_help)(render)

    from interlink_nats.services.security.cli import nats_config

    app.command("nats-config")(nats_config)

    from interlink_nats.submitters.cli import app as submitter_app

    app.add_typer(submitter_app, name="submitter")

    controller_help = "kueue-nats: MasterQueue → Kueue objects (run, render)."
    try:
        from interlink_nats.controller.cli import app as controller_app
    except ModuleNotFoundError as exc:
        _unavailable("controller", exc, controller_help)
    else:
        app.add_typer(controller_app, name="controller", help=controller_help)


_register_subcommands()


def _tidy_help(command: Any) -> Any:
    """--help without typer's Python type names: a flag shows no ``<bool>``, a repeatable option ``<str>...``.

    Typer 0.29 prints each option's annotation (``<bool>``, ``<list[str]>``); an operator reads flags, not types.
    Click's own layout, not rich's table: at 80 columns the table cut long names (``--websocket-po…``).
    """
    command.rich_markup_mode = None
    # Click wraps at 80 columns whatever the terminal; as wide as the terminal instead (a line per option there).
    command.context_settings = {**(command.context_settings or {}), "max_content_width": 10_000}
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif getattr(param, "multiple", False):
            param.metavar = "<str>..."
    make_help_option = command.get_help_option  # --help is made per context, outside ``params``

    def help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)
    return command


def main() -> None:
    """The entry point: every error leaves as one line (usage errors exit 2), never a traceback or a box."""
    import click

    # Typer ≥ 0.29 raises its own copy of click's exceptions (typer.TyperException), not click's.
    root = _tidy_help(typer.main.get_command(app))
    try:
        code = root.main(standalone_mode=False, prog_name="interlink-nats")
    except (click.exceptions.Abort, typer.Abort):
        raise SystemExit(130) from None
    except (click.ClickException, typer.TyperException) as exc:  # usage errors: a bad option, BadParameter
        if not hasattr(exc, "format_message"):
            exit_with(exc)
        ctx = getattr(exc, "ctx", None)
        usage = type(exc).__name__ in (
            "UsageError",
            "BadParameter",
            "NoSuchOption",
            "MissingParameter",
            "BadOptionUsage",
        )
        hint = f" (see {ctx.command_path} --help)" if usage and ctx is not None else ""
        print(f"interlink-nats: error: {exc.format_message()}{hint}", file=sys.stderr)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except Exception as exc:
        exit_with(exc, flags=_flags_of(root, sys.argv[1:]))
    raise SystemExit(code if isinstance(code, int) else 0)


def _flags_of(command: Any, argv: list[str]) -> set[str]:
    """The options of the (sub)command ``argv`` ran: an error names a flag only when the user could type it."""
    for arg in argv:
        command = getattr(command, "commands", {}).get(arg, command)  # typer's groups are not click.Group
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


if __name__ == "__main__":
    main()
