"""The I/O edge of ``nats-config``: read existing seeds, write config + credentials with safe modes.

Layout of the output directory (mode 0700)::

    nats-server.conf          0600  server configuration (public keys only, but still private ops data)
    nats-server-<i>.conf      0600  with ``--cluster N``: node i's configuration (routes to the others)
    identities.json           0600  who is who: public keys, inbox prefixes, permissions (no seeds)
    credentials/<name>.nk     0600  one nkey seed per identity: gateway, controller, pool-<pool>

Files are written to a temporary sibling created with the final mode and then renamed,
so a seed is never readable by others even for an instant, and a crash never leaves a
half-written config for a reloading server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .bundle import Bundle

CONFIG_FILE = "nats-server.conf"


def node_config_file(node: int) -> str:
    """File name of cluster node ``node``'s configuration."""
    return f"nats-server-{node}.conf"


MANIFEST_FILE = "identities.json"
CREDENTIALS_DIR = "credentials"
SECRET_MODE = 0o600
DIR_MODE = 0o700


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.chmod(tmp, SECRET_MODE)  # O_CREAT's mode does not apply to a pre-existing tmp file
    os.replace(tmp, path)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)


def read_existing_seeds(out_dir: Path) -> dict[str, str]:
    """Seeds already in ``out_dir/credentials`` by identity name, so re-runs keep them valid."""
    cred_dir = out_dir / CREDENTIALS_DIR
    if not cred_dir.is_dir():
        return {}
    return {p.stem: p.read_text(encoding="utf-8").strip() for p in sorted(cred_dir.glob("*.nk"))}


@dataclass(frozen=True)
class WriteResult:
    config_file: Path
    """The single server's config, or node 0's when clustered."""
    manifest_file: Path
    seed_files: dict[str, Path]
    stale: list[str]
    """Seed files of identities no longer in the config (revoked, but the file is left to the operator)."""
    node_config_files: tuple[Path, ...] = ()


def write_bundle(bundle: Bundle, out_dir: Path) -> WriteResult:
    """Write config, manifest and seed files; report seed files that the config no longer accepts."""
    _private_dir(out_dir)
    cred_dir = out_dir / CREDENTIALS_DIR
    _private_dir(cred_dir)
    seed_files: dict[str, Path] = {}
    for cred in bundle.credentials:
        path = cred_dir / cred.seed_file_name
        _write_private(path, cred.seed + "\n")
        seed_files[cred.name] = path
    current = {c.seed_file_name for c in bundle.credentials}
    stale = sorted(p.stem for p in cred_dir.glob("*.nk") if p.name not in current)
    manifest = out_dir / MANIFEST_FILE
    _write_private(manifest, json.dumps(bundle.manifest(), indent=2) + "\n")
    nodes: list[Path] = []
    for i, text in enumerate(bundle.node_configs):
        nodes.append(out_dir / node_config_file(i))
        _write_private(nodes[-1], text)
    config = nodes[0] if nodes else out_dir / CONFIG_FILE
    if not nodes:
        _write_private(config, bundle.config_text)
    return WriteResult(
        config_file=config, manifest_file=manifest, seed_files=seed_files, stale=stale, node_config_files=tuple(nodes)
    )
