"""Credentials for every identity plus the server configuration that accepts them (pure but for the CSPRNG)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import nkeys  # type: ignore[import-untyped]  # nkeys ships no type hints (no py.typed, no stubs)
from interlink_nats.kernel.subjects import inbox_prefix

from .config import Credential, NatsConfigOptions, render_server_config
from .permissions import ACCOUNT, identity_name

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


def new_user_seed() -> str:
    """A fresh nkey user seed (``SU...``) from the OS CSPRNG."""
    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def public_key_of(seed: str) -> str:
    """The ``U...`` public key of a user seed; raises if the seed is not a user seed."""
    kp = nkeys.from_seed(bytearray(seed.strip().encode()))
    try:
        public: str = kp.public_key.decode()
    finally:
        kp.wipe()
    if not public.startswith("U"):
        raise ValueError("not a user nkey seed")
    return public


@dataclass(frozen=True)
class Bundle:
    """The generated server configuration and the credentials it accepts."""

    options: NatsConfigOptions
    config_text: str
    """The single server's config; node 0's when clustered."""
    credentials: tuple[Credential, ...]
    node_configs: tuple[str, ...] = ()
    """One config per node when clustered (same accounts, permissions, listeners; own name, store, routes)."""

    def credential(self, name: str) -> Credential:
        for cred in self.credentials:
            if cred.name == name:
                return cred
        raise KeyError(name)

    def manifest(self) -> dict[str, object]:
        """Public description of the bundle (no seeds): what ``identities.json`` holds."""
        return {
            "account": ACCOUNT,
            "prefix": self.options.prefix,
            "stream": self.options.stream,
            "shared_inboxes": self.options.shared_inboxes,
            "identities": [c.manifest_entry() for c in self.credentials],
        }


def build_bundle(
    options: NatsConfigOptions,
    existing_seeds: Mapping[str, str] | None = None,
    rotate: Iterable[str] = (),
    new_seed: Callable[[], str] = new_user_seed,
) -> Bundle:
    """Credentials for every identity (reusing ``existing_seeds`` unless rotated) + the config accepting them.

    Reusing seeds makes the command idempotent: adding a pool does not invalidate the
    credentials already handed out. ``rotate`` names identities (``pool-a``) or pools (``a``)
    whose seed is replaced; the old public key disappears from the config, so after a
    reload the old seed is refused.
    """
    existing = dict(existing_seeds or {})
    wanted = {identity_name(r, p) for r, p in options.identities()}
    rotate_names: set[str] = set()
    for item in rotate:
        name = item if item in wanted else f"pool-{item}"
        if name not in wanted:
            raise ValueError(f"cannot rotate unknown identity {item!r} (known: {sorted(wanted)})")
        rotate_names.add(name)
    creds: list[Credential] = []
    for role, pool in options.identities():
        name = identity_name(role, pool)
        seed = existing.get(name) if name not in rotate_names else None
        seed = seed.strip() if seed else new_seed()
        creds.append(
            Credential(
                name=name,
                role=role,
                pool=pool,
                public_key=public_key_of(seed),
                inbox_prefix=inbox_prefix(role, pool),
                permissions=options.permissions_for(role, pool),
                seed=seed,
            )
        )
    keys = [c.public_key for c in creds]
    if len(set(keys)) != len(keys):
        raise ValueError("two identities share one nkey; every identity needs its own seed")
    nodes = tuple(render_server_config(options, creds, node=i) for i in range(options.cluster_size))
    return Bundle(
        options=options,
        config_text=nodes[0],
        credentials=tuple(creds),
        node_configs=nodes if options.clustered else (),
    )
