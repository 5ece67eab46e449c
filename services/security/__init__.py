"""Per-identity NATS security: nkey credentials, subject permissions, TLS.

The pure core (:mod:`.config`) turns a list of pools into a nats-server configuration
plus one nkey credential per identity (gateway, controller, one per pool); the edges
(:mod:`.files`, :mod:`.cli`) write them with safe file modes, and :mod:`.connect` turns a
credential back into ``nats.connect`` options for the processes that use it.
"""

from __future__ import annotations

from .config import (
    Bundle,
    Credential,
    NatsConfigOptions,
    Permissions,
    Role,
    build_bundle,
    controller_permissions,
    gateway_permissions,
    identity_name,
    inbox_prefix,
    pool_permissions,
    render_server_config,
)
from .connect import nats_connect_options, tls_context

__all__ = [
    "Bundle",
    "Credential",
    "NatsConfigOptions",
    "Permissions",
    "Role",
    "build_bundle",
    "controller_permissions",
    "gateway_permissions",
    "identity_name",
    "inbox_prefix",
    "nats_connect_options",
    "pool_permissions",
    "render_server_config",
    "tls_context",
]
