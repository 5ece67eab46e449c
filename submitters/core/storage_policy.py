"""The site config's ``storage`` section: which PersistentVolumeClaims, hostPath prefixes and NFS exports the
pool's jobs may mount, and where they are on the site (docs/site-install.md, "Storage").

Validated here (an error names the key as the site file spells it: ``storage.claims[0].path``) and turned into
the :class:`pb.StoragePolicy` the pool announces in its BuildConfig; :func:`kernel.storage.resolve` applies it,
at the gateway and again in the submitter. Namespace keys follow the accounting table's rules
(:mod:`kernel.namespace_keys`). The default maps nothing: no claim, no hostPath, no nfs volume. Pure.
"""

from __future__ import annotations

import re
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.namespace_keys import check_key
from interlink_nats.kernel.storage import check_template, is_clean_absolute
from pydantic import BaseModel, ConfigDict, Field, field_validator

_NAME_KEY = re.compile(r"[a-z0-9.*?\[\]!-]{1,253}")
_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:\[\]-]{0,252}")
DEFAULT_CREATE_MODE = 0o770
"""A created claim directory: the namespace's account and its group, nobody else."""


def _mode(value: object) -> int:
    """``0770``, ``"0o770"``, ``"770"`` or 504: permission bits, nothing more (no setuid, no sticky)."""
    if isinstance(value, bool):
        raise ValueError("a mode is a number such as '0770'")
    if isinstance(value, str):
        text = value.strip().removeprefix("0o")
        if not re.fullmatch(r"[0-7]{1,4}", text):
            raise ValueError(f"{value!r} is not an octal mode such as '0770'")
        value = int(text, 8)
    if not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ValueError(f"{value!r} is not a permission mode (0000 to 0777)")
    return value


def _directory(value: str) -> str:
    if not is_clean_absolute(value):
        raise ValueError(f"{value!r} is not a clean absolute path (no '.', '..', '//' or trailing '/')")
    return value


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    """A namespace name or a pattern of one (``lab-*``), as in the accounting table."""

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_key(value)


class ClaimRuleSettings(_Rule):
    """Claims of matching namespaces (and names, storage class, NFS source) live at ``path``."""

    claim: str = "*"
    """A claim name or a pattern of one."""
    storage_class: str = ""
    """Only claims of this storage class (name or pattern), when interLink sends the claim objects."""
    nfs_server: str = ""
    """Only claims bound to a PersistentVolume of this NFS server (and below ``nfs_path``)."""
    nfs_path: str = ""
    path: str
    """The site directory, a template of ``{namespace}``, ``{claim}`` and ``{volume}``."""
    read_only: bool = False
    """Mounted read-only whatever the pod asks; false: the pod's ``readOnly`` decides."""
    create: bool = False
    """The job creates the directory when missing (as the namespace's account)."""
    create_mode: int = DEFAULT_CREATE_MODE

    @field_validator("claim", "storage_class")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not _NAME_KEY.fullmatch(value):
            raise ValueError(f"{value!r} is neither a Kubernetes name nor a pattern of one")
        return value

    @field_validator("nfs_server")
    @classmethod
    def _server(cls, value: str) -> str:
        if value and not _SERVER.fullmatch(value):
            raise ValueError(f"{value!r} is not a host name or address")
        return value

    @field_validator("nfs_path")
    @classmethod
    def _nfs_path(cls, value: str) -> str:
        return _directory(value) if value else value

    @field_validator("path")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value)

    @field_validator("create_mode", mode="before")
    @classmethod
    def _create_mode(cls, value: object) -> int:
        return _mode(value)

    def to_proto(self) -> pb.ClaimRule:
        return pb.ClaimRule(
            namespace=self.namespace,
            claim=self.claim if self.claim != "*" else "",
            storage_class=self.storage_class,
            nfs_server=self.nfs_server,
            nfs_path=self.nfs_path,
            path=self.path,
            read_only=self.read_only,
            create=self.create,
            create_mode=self.create_mode,
        )


class HostPathRuleSettings(_Rule):
    """Pods of matching namespaces may name ``prefix`` or a path below it in a hostPath volume."""

    namespace: str = "*"
    prefix: str
    read_only: bool = True
    """Read-only unless the site says otherwise: a host directory is the site's."""

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return _directory(value)

    def to_proto(self) -> pb.HostPathRule:
        return pb.HostPathRule(namespace=self.namespace, prefix=self.prefix, read_only=self.read_only)


class NfsExportSettings(_Rule):
    """The NFS export ``server:path``, mounted by the site at ``site_path``."""

    namespace: str = "*"
    server: str
    path: str
    site_path: str
    read_only: bool = False

    @field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if not _SERVER.fullmatch(value):
            raise ValueError(f"{value!r} is not a host name or address")
        return value

    @field_validator("path", "site_path")
    @classmethod
    def _paths(cls, value: str) -> str:
        return _directory(value)

    def to_proto(self) -> pb.NfsExportRule:
        return pb.NfsExportRule(
            namespace=self.namespace,
            server=self.server,
            path=self.path,
            site_path=self.site_path,
            read_only=self.read_only,
        )


class StorageSettings(BaseModel):
    """``storage:``: ``claims``, ``host_paths`` and ``nfs`` rules; each list empty by default (nothing mapped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    claims: list[ClaimRuleSettings] = Field(default_factory=list)
    host_paths: list[HostPathRuleSettings] = Field(default_factory=list)
    nfs: list[NfsExportSettings] = Field(default_factory=list)

    def to_proto(self) -> pb.StoragePolicy:
        return pb.StoragePolicy(
            claims=[r.to_proto() for r in self.claims],
            host_paths=[r.to_proto() for r in self.host_paths],
            nfs_exports=[r.to_proto() for r in self.nfs],
        )


def storage_policy(raw: dict[str, Any] | StorageSettings | None) -> pb.StoragePolicy:
    """The announced policy of a ``storage`` section (None: the default, nothing mapped)."""
    if raw is None:
        return pb.StoragePolicy()
    settings = raw if isinstance(raw, StorageSettings) else StorageSettings.model_validate(raw)
    return settings.to_proto()
