"""Pure core of ``interlink-nats nats-config``: pools → nats-server config text + credentials.

No I/O here (seeds come in as arguments or from an injected generator), so the permission
model can be unit-tested and the CLI stays a thin edge. This module holds the options and the
rendering of the server configuration; ``permissions`` who may do what; ``bundle`` the credentials.

Model (docs/security.md has the table): one NATS account ``INTERLINK`` with JetStream, one
nkey user per identity. nkeys keep every secret out of the server config: the config only
holds public keys, the seed stays with the process that signs the server's nonce.

* **gateway**: sends every RPC to every pool, consumes the events stream, reads announcements.
* **controller**: reads announcements, may only call ``Describe`` on pools.
* **pool ``p``**: receives only ``SubmitterService.*.p``, answers requests (``allow_responses``),
  publishes only its own events and announcements.

Each identity also gets a *private inbox prefix* (``_INBOX.gateway``, ``_INBOX.controller``,
``_INBOX.pool.<p>``) and may subscribe only below it, so one pool cannot read replies meant
for the gateway (logs and statuses of other pools). Clients must connect with that
``inbox_prefix`` (:func:`interlink_nats.kernel.subjects.inbox_prefix`; a credential becomes connect
options through :func:`interlink_nats.kernel.nats_connection.credential_options`);
``shared_inboxes=True`` falls back to everyone subscribing ``_INBOX.>`` for clients that
cannot set a prefix, at the cost of that isolation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePath

from interlink_nats.kernel import subjects
from interlink_nats.kernel.subjects import Role

from .permissions import (
    ACCOUNT,
    Permissions,
    ResponsePermission,
    controller_permissions,
    gateway_permissions,
    pool_permissions,
)

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

DEFAULT_CLUSTER_PORT = 6222


@dataclass(frozen=True)
class Credential:
    """One identity's nkey and what it is for. ``seed`` is secret: it is kept out of ``repr``."""

    name: str
    role: Role
    pool: str | None
    public_key: str
    inbox_prefix: str
    permissions: Permissions
    seed: str = field(repr=False)

    @property
    def seed_file_name(self) -> str:
        return f"{self.name}.nk"

    def manifest_entry(self) -> dict[str, object]:
        """Everything about the identity except the seed (safe to log, print or commit)."""
        return {
            "name": self.name,
            "role": self.role.value,
            "pool": self.pool,
            "public_key": self.public_key,
            "inbox_prefix": self.inbox_prefix,
            "seed_file": self.seed_file_name,
            "permissions": self.permissions.as_dict(),
        }


@dataclass(frozen=True)
class NatsConfigOptions:
    """Knobs of the generated nats-server configuration (ports, TLS files, JetStream store)."""

    pools: tuple[str, ...]
    prefix: str = subjects.DEFAULT_PREFIX
    stream: str = subjects.EVENTS_STREAM
    host: str = "0.0.0.0"
    client_port: int = 4222
    websocket_port: int = 8443
    http_port: int | None = None
    """Monitoring endpoint (``/healthz``, ``/varz``); ``None`` = off."""
    jetstream_store_dir: str = "/data/jetstream"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    """CA to verify client certificates with; only used when ``tls_verify_clients``."""
    tls_verify_clients: bool = False
    """Require client certificates (mutual TLS) on top of nkeys."""
    client_tls: bool = True
    """TLS on the client port too (``tls://``); off lets in-cluster clients use plain ``nats://``."""
    websocket_compression: bool = True
    max_payload: int | None = None
    server_name: str = "interlink-nats"
    shared_inboxes: bool = False
    response_max: int = 100_000
    """allow_responses.max: chunks a pool may send back for one request (server streaming)."""
    response_expires: str | None = "1h"
    """allow_responses.expires: how long a received request may still be answered."""
    cluster_size: int = 1
    """Number of nodes; above 1 each node gets its own config with routes to the others."""
    cluster_name: str = "interlink-nats"
    cluster_peers: tuple[str, ...] = ()
    """``host:port`` route address of each node (``cluster_size`` entries); empty = ``<server_name>-<i>:6222``,
    the names a StatefulSet's headless Service gives its pods."""
    port_stride: int = 0
    """Node ``i`` listens on ``client_port + i*stride`` (and likewise WebSocket/monitoring): several nodes on one
    host for a local trial; 0 on separate hosts."""

    def __post_init__(self) -> None:
        if not self.pools:
            raise ValueError("at least one pool is needed")
        for pool in self.pools:
            subjects.validate_pool(pool)
        if len(set(self.pools)) != len(self.pools):
            raise ValueError(f"duplicate pool names in {list(self.pools)}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_verify_clients and not self.tls_ca:
            raise ValueError("verifying client certificates needs --tls-ca")
        if self.response_max < 1:
            raise ValueError("response_max must be >= 1")
        if self.cluster_size < 1:
            raise ValueError("--cluster must be >= 1")
        if self.cluster_peers and len(self.cluster_peers) != self.cluster_size:
            raise ValueError(
                f"--cluster-peers names {len(self.cluster_peers)} nodes but --cluster is {self.cluster_size}"
            )
        for peer in self.cluster_peers:
            host, sep, port = peer.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"--cluster-peers entry {peer!r} is not host:port")
        if self.clustered and self.tls_enabled and not self.tls_ca:
            raise ValueError("TLS between cluster nodes needs --tls-ca (the CA that signed every node's certificate)")

    @property
    def clustered(self) -> bool:
        return self.cluster_size > 1

    def node_name(self, node: int) -> str:
        return f"{self.server_name}-{node}" if self.clustered else self.server_name

    def route_addresses(self) -> tuple[str, ...]:
        """``host:port`` of every node's cluster listener."""
        if self.cluster_peers:
            return self.cluster_peers
        return tuple(f"{self.node_name(i)}:{DEFAULT_CLUSTER_PORT}" for i in range(self.cluster_size))

    def node_port(self, port: int, node: int) -> int:
        return port if port == -1 else port + node * self.port_stride

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    def identities(self) -> list[tuple[Role, str | None]]:
        return [(Role.GATEWAY, None), (Role.CONTROLLER, None), *((Role.POOL, p) for p in self.pools)]

    def permissions_for(self, role: Role, pool: str | None) -> Permissions:
        if role is Role.GATEWAY:
            return gateway_permissions(self.prefix, self.stream, shared_inboxes=self.shared_inboxes)
        if role is Role.CONTROLLER:
            return controller_permissions(self.prefix, shared_inboxes=self.shared_inboxes)
        assert pool is not None
        return pool_permissions(
            pool,
            self.prefix,
            self.stream,
            shared_inboxes=self.shared_inboxes,
            responses=ResponsePermission(self.response_max, self.response_expires),
        )


# --- rendering -------------------------------------------------------------------------------------------


def _q(value: str | PurePath) -> str:
    """A double-quoted nats-conf string. JSON escaping is valid there, and quoting stops
    nats-conf from reading ``$JS...`` as a variable reference."""
    return json.dumps(str(value))


def _list(items: Iterable[str], indent: str) -> str:
    inner = "".join(f"{indent}  {_q(i)}\n" for i in items)
    return f"[\n{inner}{indent}]"


def _render_permissions(perms: Permissions, indent: str) -> str:
    lines = [
        f"{indent}permissions: {{",
        f"{indent}  publish: {{ allow: {_list(perms.publish, indent + '  ')} }}",
        f"{indent}  subscribe: {{ allow: {_list(perms.subscribe, indent + '  ')} }}",
    ]
    if perms.allow_responses is not None:
        resp = f"max: {perms.allow_responses.max_msgs}"
        if perms.allow_responses.expires:
            resp += f", expires: {_q(perms.allow_responses.expires)}"
        lines.append(f"{indent}  allow_responses: {{ {resp} }}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _render_tls(options: NatsConfigOptions, indent: str, *, client_port: bool, routes: bool = False) -> str:
    assert options.tls_cert
    assert options.tls_key
    lines = [
        f"{indent}tls {{",
        f"{indent}  cert_file: {_q(options.tls_cert)}",
        f"{indent}  key_file: {_q(options.tls_key)}",
    ]
    if routes:
        # Routes are mutual TLS: each node proves itself to the others with a certificate from the same CA.
        assert options.tls_ca
        lines.append(f"{indent}  ca_file: {_q(options.tls_ca)}")
        lines.append(f"{indent}  verify: true")
        lines.append(f"{indent}  timeout: 5")
    elif options.tls_ca and options.tls_verify_clients:
        lines.append(f"{indent}  ca_file: {_q(options.tls_ca)}")
        lines.append(f"{indent}  verify: true")
    if client_port:
        lines.append(f"{indent}  timeout: 5")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _render_cluster(options: NatsConfigOptions, node: int) -> list[str]:
    """The ``cluster`` block of one node: its route listener and routes to every other node."""
    peers = options.route_addresses()
    own_port = peers[node].rpartition(":")[2]
    out = [
        "cluster {",
        f"  name: {_q(options.cluster_name)}",
        f"  listen: {_q(f'{options.host}:{own_port}')}",
    ]
    if options.tls_enabled:
        out.append(_render_tls(options, "  ", client_port=False, routes=True))
    else:
        out.append("  # No certificate given: routes are plain text (development only).")
    out.append(f"  routes: {_list((f'nats-route://{p}' for i, p in enumerate(peers) if i != node), '  ')}")
    out.append("}")
    out.append("")
    return out


def render_server_config(options: NatsConfigOptions, credentials: Iterable[Credential], node: int = 0) -> str:
    """The nats-server configuration text (of cluster node ``node``). Holds public keys only: safe to diff."""
    creds = list(credentials)
    store = options.jetstream_store_dir
    if options.clustered:
        store = f"{store.rstrip('/')}/{options.node_name(node)}"
    out = [
        "# Generated by `interlink-nats nats-config`; regenerate instead of editing.",
        "# Holds nkey *public* keys only; the seeds live in the per-identity .nk files.",
        f"server_name: {_q(options.node_name(node))}",
        f"listen: {_q(f'{options.host}:{options.node_port(options.client_port, node)}')}",
    ]
    if options.http_port is not None:
        out.append(f"http: {_q(f'{options.host}:{options.node_port(options.http_port, node)}')}")
    if options.max_payload is not None:
        out.append(f"max_payload: {options.max_payload}")
    if options.tls_enabled and options.client_tls:
        out.append(_render_tls(options, "", client_port=True))
    out.append("")
    out.append("websocket {")
    out.append(f"  listen: {_q(f'{options.host}:{options.node_port(options.websocket_port, node)}')}")
    if options.tls_enabled:
        out.append(_render_tls(options, "  ", client_port=False))
    else:
        out.append("  # No certificate given: plain ws:// for local development only.")
        out.append("  no_tls: true")
    out.append(f"  compression: {'true' if options.websocket_compression else 'false'}")
    out.append("}")
    out.append("")
    out.append("jetstream {")
    out.append(f"  store_dir: {_q(store)}")
    out.append("}")
    out.append("")
    if options.clustered:
        out.extend(_render_cluster(options, node))
    out.append("accounts {")
    out.append(f"  {ACCOUNT}: {{")
    out.append("    jetstream: enabled")
    out.append("    users: [")
    for cred in creds:
        label = cred.name if cred.pool is None else f"{cred.name} (pool {cred.pool})"
        out.append(f"      # {label}; inbox prefix {cred.inbox_prefix}")
        out.append("      {")
        out.append(f"        nkey: {_q(cred.public_key)}")
        out.append(_render_permissions(cred.permissions, "        "))
        out.append("      }")
    out.append("    ]")
    out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"
