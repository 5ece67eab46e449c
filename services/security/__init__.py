"""Per-identity NATS security: nkey credentials, subject permissions, TLS.

The pure core (:mod:`.permissions`, :mod:`.config`, :mod:`.bundle`) turns a list of pools into a
nats-server configuration plus one nkey credential per identity (gateway, controller, one per pool); the edges
(:mod:`.files`, :mod:`.cli`) write them with safe file modes. A credential becomes ``nats.connect``
options through :func:`interlink_nats.kernel.nats_connection.credential_options`.
"""

from __future__ import annotations

from interlink_nats.kernel.subjects import Role, inbox_prefix

from .bundle import Bundle, build_bundle
from .config import Credential, NatsConfigOptions, render_server_config
from .permissions import Permissions, controller_permissions, gateway_permissions, identity_name, pool_permissions

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
