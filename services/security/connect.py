"""Turn a credential produced by ``nats-config`` into ``nats.connect`` keyword arguments.

Processes (gateway, submitter, controller) call :func:`nats_connect_options` so they all
authenticate the same way: the nkey seed is read from its file by nats-py when it signs
the server nonce (never held in our own objects or logged), the private inbox prefix
matches the subscribe permission, and TLS verifies the server against the site's CA.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from .config import Role, inbox_prefix


def tls_context(
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> ssl.SSLContext:
    """A client TLS context that verifies the server (hostname + chain) against ``ca_file``.

    Without ``ca_file`` the system trust store is used (a public CA in front of the
    WebSocket listener). ``cert_file``/``key_file`` add a client certificate for mutual TLS.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file) if ca_file else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return ctx


def nats_connect_options(
    *,
    seed_file: str | Path | None = None,
    role: Role | str | None = None,
    pool: str | None = None,
    inbox: str | None = None,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    tls: bool | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` for one identity.

    ``inbox`` overrides the prefix derived from ``role``/``pool``. ``tls`` forces a TLS
    context even without a CA file (system trust store); by default one is built when a CA
    or client certificate is given. Pass the result as ``nats.connect(url, **opts)``; the
    URL scheme (``tls://``, ``wss://``) is the caller's.
    """
    opts: dict[str, Any] = {}
    if seed_file is not None:
        path = Path(seed_file)
        if not path.is_file():
            raise FileNotFoundError(f"nkey seed file not found: {path}")
        opts["nkeys_seed"] = str(path)
    prefix = inbox
    if prefix is None and role is not None:
        prefix = inbox_prefix(Role(role), pool)
    if prefix is not None:
        opts["inbox_prefix"] = prefix
    if tls or ca_file is not None or cert_file is not None:
        opts["tls"] = tls_context(ca_file, cert_file, key_file)
    return opts
