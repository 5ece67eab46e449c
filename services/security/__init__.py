"""Per-identity NATS security: nkey credentials, subject permissions, TLS.

The pure core (:mod:`.config`) turns a list of pools into a nats-server configuration
plus one nkey credential per identity (gateway, controller, one per pool); the edges
(:mod:`.files`, :mod:`.cli`) write them with safe file modes. A credential becomes ``nats.connect``
options through :func:`interlink_nats.kernel.nats_connection.credential_options`.
"""

from __future__ import annotations

from interlink_nats.kernel.subjects import Role, inbox_prefix

from .config import (
    Bundle,
    Credential,
    NatsConfigOptions,
    Permissions,
    build_bundle,
    controller_permissions,
    gateway_permissions,
    identity_name,
    pool_permissions,
    render_server_config,
)

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
    "pool_permissions",
    "render_server_config",
]
