"""``interlink-nats``: one command line for every process of the system."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from interlink_nats.logging_setup import setup_logging
from interlink_nats.signals import run_until_signal

app = typer.Typer(
    name="interlink-nats",
    help="Run Kubernetes pods on remote batch sites through NATS (interLink plugin, submitters, kueue-nats).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.command()
def up(
    http_port: Annotated[int, typer.Option(help="port of the gateway (interLink's plugin API)")] = 4000,
    host: Annotated[str, typer.Option(help="address of the gateway")] = "127.0.0.1",
    pool: Annotated[str, typer.Option(help="pool name of the embedded shell submitter")] = "local",
    state_dir: Annotated[
        Path | None, typer.Option(help="where jobs and the NATS store live (default: a temp dir)")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Start an embedded stack: nats-server on a free port, the gateway, and a shell submitter for one pool."""
    from interlink_nats.up import run_stack

    setup_logging(log_level)
    run_until_signal(lambda stop: run_stack(stop, http_port=http_port, host=host, pool=pool, state_dir=state_dir))


@app.command()
def gateway(
    nats_url: Annotated[str | None, typer.Option(help="NATS URL (env INTERLINK_GATEWAY_NATS__URL)")] = None,
    host: Annotated[str | None, typer.Option(help="listen address")] = None,
    port: Annotated[int | None, typer.Option(help="listen port")] = None,
    unix_socket: Annotated[Path | None, typer.Option(help="listen on a unix socket instead")] = None,
    redis_url: Annotated[str | None, typer.Option(help="redis URL for state that survives restarts")] = None,
    default_pool: Annotated[str | None, typer.Option(help="pool for pods that name none")] = None,
    log_level: Annotated[str, typer.Option()] = "info",
    json_logs: Annotated[bool, typer.Option(help="log JSON lines")] = False,
) -> None:
    """Serve interLink's plugin API and forward pods to pools (settings also from INTERLINK_GATEWAY_* env)."""
    from interlink_nats.services.gateway.server import serve
    from interlink_nats.services.gateway.settings import GatewaySettings

    setup_logging(log_level, json_logs)
    settings = GatewaySettings()
    overrides = {
        "host": host,
        "port": port,
        "unix_socket": unix_socket,
        "redis_url": redis_url,
        "default_pool": default_pool,
    }
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if nats_url:
        settings.nats = settings.nats.model_copy(update={"url": nats_url})
    run_until_signal(lambda stop: serve(settings, stop))


def _register_subcommands() -> None:
    from interlink_nats.controller.cli import app as controller_app
    from interlink_nats.services.scripts.cli import render
    from interlink_nats.services.security.cli import nats_config
    from interlink_nats.submitters.cli import app as submitter_app

    app.command(help="Print the job script a pod becomes (secrets masked), so an admin sees exactly what runs.")(render)
    app.command("nats-config")(nats_config)
    app.add_typer(submitter_app, name="submitter")
    app.add_typer(controller_app, name="controller", help="kueue-nats: MasterQueue → Kueue objects (run, render).")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
