"""``interlink-nats nats-config``: write a nats-server configuration and one nkey per identity.

Registered by ``interlink_nats/cli.py`` as ``app.command("nats-config")(nats_config)``.
This is the I/O edge only; the permission model is the pure :func:`.bundle.build_bundle`.
It prints public keys and paths, never a seed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from .bundle import build_bundle
from .config import NatsConfigOptions
from .files import CONFIG_FILE, CREDENTIALS_DIR, read_existing_seeds, write_bundle

_GO_DURATION = re.compile(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+")
"""nats-server's durations are Go's (``1h``, ``90s``, ``1m30s``): anything else makes it refuse the config."""


def _duration(value: str) -> str:
    if value and not _GO_DURATION.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a duration such as 1h, 90s or 1m30s")
    return value


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def nats_config(
    pools: Annotated[str, typer.Option(help="comma-separated pool names (DNS labels), e.g. 'hpc-a,hpc-b'")],
    out: Annotated[Path, typer.Option(help="output directory (created 0700; existing seeds there are reused)")],
    prefix: Annotated[str, typer.Option(help="prefix of announcement and event subjects")] = "interlink",
    host: Annotated[str, typer.Option(help="address nats-server listens on")] = "0.0.0.0",
    client_port: Annotated[
        int, typer.Option(min=-1, max=65535, help="NATS client port (tls:// when TLS is on); -1 = random")
    ] = 4222,
    websocket_port: Annotated[
        int, typer.Option(min=-1, max=65535, help="WebSocket port (wss:// when TLS is on); -1 = random")
    ] = 8443,
    http_port: Annotated[
        int | None, typer.Option(min=-1, max=65535, help="monitoring port (/healthz); off by default")
    ] = None,
    jetstream_store_dir: Annotated[str, typer.Option(help="JetStream store directory as the server sees it")] = (
        "/data/jetstream"
    ),
    tls_cert: Annotated[str | None, typer.Option(help="server certificate (PEM) path as the server sees it")] = None,
    tls_key: Annotated[str | None, typer.Option(help="server private key (PEM) path as the server sees it")] = None,
    tls_ca: Annotated[str | None, typer.Option(help="CA (PEM) for verifying client certificates")] = None,
    tls_verify_clients: Annotated[bool, typer.Option(help="require client certificates (mutual TLS)")] = False,
    client_tls: Annotated[
        bool, typer.Option(help="TLS on the client port too; --no-client-tls keeps plain nats:// for in-cluster use")
    ] = True,
    dev_tls: Annotated[
        str | None,
        typer.Option(help="generate a throwaway CA + server certificate for these comma-separated hosts into OUT/tls"),
    ] = None,
    mount_path: Annotated[
        str | None,
        typer.Option(help="where the server will see OUT (e.g. a container mount); used for --dev-tls paths"),
    ] = None,
    rotate: Annotated[
        list[str] | None, typer.Option(help="identity or pool whose seed is replaced (repeatable), e.g. 'pool-a'")
    ] = None,
    shared_inboxes: Annotated[
        bool, typer.Option(help="let every identity subscribe _INBOX.> (for clients that cannot set an inbox prefix)")
    ] = False,
    response_max: Annotated[
        int, typer.Option(min=1, help="replies a pool may send per request (stream chunks)")
    ] = 100_000,
    response_expires: Annotated[
        str, typer.Option(callback=_duration, help="how long a pool may answer a request, e.g. 1h")
    ] = "1h",
    max_payload: Annotated[int | None, typer.Option(min=1, help="nats-server max_payload in bytes")] = None,
    cluster: Annotated[
        int, typer.Option(help="number of cluster nodes; above 1 writes nats-server-<i>.conf per node with routes")
    ] = 1,
    cluster_name: Annotated[str, typer.Option(help="NATS cluster name (the same on every node)")] = "interlink-nats",
    cluster_peers: Annotated[
        str | None,
        typer.Option(
            help="comma-separated host:port route address of each node, in node order "
            "(default interlink-nats-<i>:6222, a StatefulSet's pod names)"
        ),
    ] = None,
    port_stride: Annotated[
        int, typer.Option(help="node i listens on each port + i*stride (several nodes on one host); 0 = same ports")
    ] = 0,
) -> None:
    """Write nats-server.conf (per-identity nkeys and subject permissions, TLS WebSocket, JetStream) and one
    0600 nkey seed per identity: gateway, controller and each pool."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(
            f"{out} is a file; name a directory (it is created 0700 if missing)", param_hint="--out"
        )
    server_view = Path(mount_path) if mount_path else out
    if dev_tls:
        from .devtls import DevTlsUnavailableError, write_dev_tls

        try:
            files = write_dev_tls(out / "tls", _split(dev_tls), client=cluster > 1)
        except DevTlsUnavailableError as exc:
            raise typer.BadParameter(str(exc), param_hint="--dev-tls") from exc
        tls_cert = tls_cert or str(server_view / "tls" / files.server_cert.name)
        tls_key = tls_key or str(server_view / "tls" / files.server_key.name)
        if cluster > 1:
            tls_ca = tls_ca or str(server_view / "tls" / files.ca_cert.name)
        typer.echo(f"dev CA (give it to sites as their CA file): {files.ca_cert}")
    try:
        options = NatsConfigOptions(
            pools=tuple(_split(pools)),
            prefix=prefix,
            host=host,
            client_port=client_port,
            websocket_port=websocket_port,
            http_port=http_port,
            jetstream_store_dir=jetstream_store_dir,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
            tls_verify_clients=tls_verify_clients,
            client_tls=client_tls,
            shared_inboxes=shared_inboxes,
            response_max=response_max,
            response_expires=response_expires or None,
            max_payload=max_payload,
            cluster_size=cluster,
            cluster_name=cluster_name,
            cluster_peers=tuple(_split(cluster_peers or "")),
            port_stride=port_stride,
        )
        bundle = build_bundle(options, read_existing_seeds(out), rotate or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    result = write_bundle(bundle, out)
    for path in result.node_config_files or (result.config_file,):
        typer.echo(f"wrote {path}")
    if not options.tls_enabled:
        typer.echo(
            "warning: no --tls-cert/--tls-key: WebSocket and client port are plain text (development only)", err=True
        )
    for cred in bundle.credentials:
        typer.echo(
            f"  {cred.name:<24} {cred.public_key}  inbox {cred.inbox_prefix}  "
            f"seed {out / CREDENTIALS_DIR / cred.seed_file_name}"
        )
    for name in result.stale:
        typer.echo(f"revoked: {name} is no longer in {CONFIG_FILE}; delete {out / CREDENTIALS_DIR / name}.nk", err=True)
    typer.echo("reload a running server with: nats-server --signal reload=<pid> (or send it SIGHUP)")
