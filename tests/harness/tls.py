"""Test helpers for the secured NATS stack: a test CA, a generated config, a started server.

The CA and certificates are generated per test module (``cryptography``, a dev dependency),
the nats-server config comes from the real ``build_bundle`` — so the tests exercise exactly
what ``interlink-nats nats-config`` writes — and the server binds free ports in a temp dir.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from interlink_nats.kernel.nats_connection import credential_options
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.services.security import Bundle, Credential, NatsConfigOptions, build_bundle
from interlink_nats.services.security.devtls import DevTlsFiles, make_ca, write_dev_tls
from interlink_nats.services.security.files import CONFIG_FILE, WriteResult, read_existing_seeds, write_bundle
from nats.aio.client import Client as NATS

POOLS = ("a", "b")


def write_other_ca(path: Path) -> Path:
    """A CA that signed nothing the server presents: verifying against it must fail."""
    cert, _key = make_ca("unrelated CA")
    path.write_bytes(cert)
    return path


@dataclass
class SecureStack:
    """A nats-server started from a generated bundle, plus how to connect as each identity."""

    root: Path
    tls: DevTlsFiles
    options: NatsConfigOptions
    bundle: Bundle
    written: WriteResult
    server: NatsServerProcess
    clients: list[NATS] = field(default_factory=list)

    @property
    def tls_url(self) -> str:
        return self.server.url.replace("nats://", "tls://")

    @property
    def wss_url(self) -> str:
        url = self.server.websocket_url
        assert url is not None
        return url.replace("ws://", "wss://")

    def cred(self, name: str) -> Credential:
        return self.bundle.credential(name)

    def connect_options(self, name: str, *, ca_file: Path | None = None) -> dict[str, Any]:
        cred = self.cred(name)
        return credential_options(
            seed_file=self.written.seed_files[name], inbox=cred.inbox_prefix, ca_file=ca_file or self.tls.ca_cert
        )

    async def connect(self, name: str, *, url: str | None = None, errors: ErrorLog | None = None) -> NATS:
        """Connect as identity ``name``; permission errors land in ``errors`` (asserted by the tests)."""
        log = errors if errors is not None else ErrorLog()
        nc = await nats.connect(
            url or self.tls_url,
            error_cb=log.callback,
            allow_reconnect=False,
            connect_timeout=5,
            name=f"test-{name}",
            **self.connect_options(name),
        )
        self.clients.append(nc)
        return nc

    async def close_clients(self) -> None:
        for nc in self.clients:
            if not nc.is_closed:
                await nc.close()
        self.clients.clear()

    def regenerate(self, rotate: tuple[str, ...] = ()) -> None:
        """Rewrite the bundle (keeping or rotating seeds) and make the server reload it."""
        self.bundle = build_bundle(self.options, read_existing_seeds(self.root / "nats"), rotate)
        self.written = write_bundle(self.bundle, self.root / "nats")
        import os
        import signal

        os.kill(self.server.pid, signal.SIGHUP)


class ErrorLog:
    """Collects the async errors nats-py reports (``-ERR 'Permissions Violation ...'`` arrives here)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._changed = asyncio.Event()

    async def callback(self, exc: Exception) -> None:
        self.errors.append(str(exc))
        self._changed.set()

    def violations(self) -> list[str]:
        return [e for e in self.errors if "permissions violation" in e.lower()]

    async def wait_violation(self, kind: str, subject: str, within: float = 3.0) -> str:
        """Wait until the server reported a violation for ``kind`` (publish/subscription) on ``subject``."""
        wanted = f'permissions violation for {kind} to "{subject}"'.lower()
        async with asyncio.timeout(within):
            while True:
                for err in self.errors:
                    if wanted in err.lower():
                        return err
                self._changed.clear()
                await self._changed.wait()


def start_secure_stack(root: Path, pools: tuple[str, ...] = POOLS, **option_overrides: Any) -> SecureStack:
    """Generate TLS files + a bundle for ``pools`` under ``root`` and start nats-server from it."""
    tls = write_dev_tls(root / "tls", ["localhost", "127.0.0.1"])
    options = NatsConfigOptions(
        pools=pools,
        host="127.0.0.1",
        client_port=-1,
        websocket_port=-1,
        jetstream_store_dir=str(root / "jetstream"),
        tls_cert=str(tls.server_cert),
        tls_key=str(tls.server_key),
        **option_overrides,
    )
    bundle = build_bundle(options)
    written = write_bundle(bundle, root / "nats")
    server = NatsServerProcess(config_file=root / "nats" / CONFIG_FILE, work_dir=root / "server").start_blocking()
    return SecureStack(root, tls, options, bundle, written, server)


def stack_fixture(root: Path, **kwargs: Any) -> Iterator[SecureStack]:
    stack = start_secure_stack(root, **kwargs)
    try:
        yield stack
    finally:
        stack.server.stop_blocking()


def client_ssl(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))
