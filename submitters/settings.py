"""Submitter settings: command line > environment (``INTERLINK_SUBMITTER_*``) > config file > defaults.

The config file is YAML or TOML (by extension; ``.yml``/``.yaml``/``.toml``, JSON is YAML). Its
top-level keys are the field names below; nested groups (``nats``, and one section per backend of
``backends.BACKENDS``, validated by that backend's own model) use nested tables, and in the
environment a double underscore: ``INTERLINK_SUBMITTER_SLURM__PARTITION=debug``. Names changed since
(``RENAMED``: the flat ``nats_*`` keys, unit-less intervals) are still accepted, in every layer.
The pool's BuildConfig is the file's ``build_config`` section (proto3 JSON field names), or a
separate file named by ``build_config_file``; either is re-read when it changes.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.build_config import proto_names
from interlink_nats.kernel.config_files import ConfigFileError, LayeredSettings, load_document
from interlink_nats.kernel.nats_connection import NatsConnectionSettings
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, validate_pool
from interlink_nats.submitters.backends import BACKENDS
from interlink_nats.submitters.core.storage_policy import StorageSettings
from pydantic import BaseModel, Field, SerializeAsAny, ValidationError, create_model, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

ENV_PREFIX = "INTERLINK_SUBMITTER_"

RUNTIMES = tuple(runtime.name.lower() for runtime in pb.ContainerRuntime if runtime.value)
"""``runtime:`` as a site file spells it (``apptainer``…): what an unknown one's error lists."""


def parse_build_config(data: dict[str, Any] | None, *, where: str = "build_config") -> pb.BuildConfig:
    """A BuildConfig from its proto3-JSON form (camelCase or snake_case keys; enum names short or full)."""
    if not data:
        return pb.BuildConfig()
    if "storage" in data:  # one place for the storage policy: the validated top-level section
        raise ConfigFileError(f"invalid {where}: storage is set in the site file's top-level storage section")
    try:
        return pb.BuildConfig.from_dict(proto_names(data, RUNTIMES))
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigFileError(f"invalid {where}: {exc}") from exc


class TaintSpec(BaseModel):
    key: str
    value: str = ""
    effect: str = "NoSchedule"


def _under(section: str, exc: ValidationError) -> ValidationError:
    """``exc`` of a backend's section with the section's key in front of every location (``slurm.partition``)."""
    details: list[Any] = []  # pydantic_core.InitErrorDetails, a dependency we do not declare
    for error in exc.errors():
        detail: dict[str, Any] = {"type": error["type"], "loc": (section, *error["loc"]), "input": error["input"]}
        if "ctx" in error:
            detail["ctx"] = error["ctx"]
        details.append(detail)
    return ValidationError.from_exception_data("SubmitterSettings", details)


class SubmitterSettingsBase(LayeredSettings):
    """Everything a submitter needs but the backends' sections (added from ``backends.BACKENDS`` below)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    RENAMED: ClassVar[Mapping[str, str]] = {
        **{f"nats_{key}": f"nats.{key}" for key in ("url", "user", "password", "token", "nkey_seed_file")},
        **{f"nats_{key}": f"nats.{key}" for key in ("creds_file", "inbox_prefix")},
        **{f"tls_{key}_file": f"nats.tls_{key}_file" for key in ("ca", "cert", "key")},
        "nats_connect_timeout": "nats.connect_timeout_s",
        "reconnect_wait_max": "nats.reconnect_wait_max_s",
        "drain_timeout": "nats.drain_timeout_s",
        "poll_interval": "poll_interval_s",
        "announce_interval": "announce_interval_s",
        "kill_grace": "kill_grace_s",
    }
    """The flat NATS keys and the unit-less names of before: deployed files and environments keep working."""

    pool: str
    backend: str = "shell"
    """One of ``backends.BACKENDS``; its section (``shell:``, ``slurm:``, ``htcondor:``) configures it."""

    nats: NatsConnectionSettings = Field(default_factory=NatsConnectionSettings)
    """The NATS connection (``INTERLINK_SUBMITTER_NATS__URL``…); the inbox defaults to ``_INBOX.pool.<pool>``."""
    subject_prefix: str = DEFAULT_PREFIX

    state_dir: Path | None = None
    """Job directories and the registry; default ``$XDG_STATE_HOME/interlink-nats/<pool>``."""
    registry_path: Path | None = None
    instance_id: str | None = None
    """Names this process in events and ownership records; default ``<host>-<random>``."""

    probe_host: str = "127.0.0.1"
    """Address of /healthz and /metrics (when probe_port is set)."""
    probe_port: int | None = Field(None, ge=0, le=65535)
    """Port of /healthz and /metrics; unset: not served (0: a free port, logged)."""

    poll_interval_s: float = Field(5.0, gt=0)
    announce_interval_s: float = Field(30.0, gt=0)
    failure_window_s: float = Field(300.0, gt=0)
    """The ResourceReport's recent submit/start failures count this far back (the controller holds a failing pool)."""
    max_concurrency: int = Field(64, ge=1)
    """RPC handlers running at once."""
    kill_grace_s: float = Field(5.0, ge=0)
    """Shell backend: a cancel's wait for the job before it returns, and the time a cancelled script gets beyond
    the site's longest grace (``build_config.limits``) before its whole process tree is KILLed."""
    retention_days: float = Field(7.0, gt=0)
    """Finished jobs are forgotten after this long (k8s never reuses a pod UID)."""

    build_config: dict[str, Any] | None = None
    build_config_file: Path | None = None
    capacity: dict[str, str] = Field(default_factory=dict)
    """Overrides of discovered capacity, as Kubernetes quantities: {"cpu": "64", "pods": "500"}."""
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    """Which claims, hostPath prefixes and NFS exports jobs may mount (announced in the BuildConfig); none by
    default."""

    @field_validator("pool")
    @classmethod
    def _pool(cls, value: str) -> str:
        return validate_pool(value)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}: one of {', '.join(BACKENDS)}")
        return value

    @model_validator(mode="after")
    def _backend_sections(self) -> Self:
        """Validate each given section, and the selected backend's (defaults), with the backend's own model.

        Only those backends are imported: a shell submitter never loads the Slurm or HTCondor code."""
        for name, entry in BACKENDS.items():
            raw = getattr(self, name, None)
            if isinstance(raw, BaseModel) or (raw is None and name != self.backend):
                continue
            try:
                setattr(self, name, entry.config_model().model_validate(raw or {}))
            except ValidationError as exc:
                raise _under(name, exc) from None
        return self

    def backend_config(self) -> BaseModel:
        """The selected backend's validated settings section (what its ``create`` takes)."""
        section = getattr(self, self.backend)
        assert isinstance(section, BaseModel), "validated by _backend_sections"
        return section

    # Derived values -------------------------------------------------------------------------

    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return base / "interlink-nats" / self.pool

    def resolved_registry_path(self) -> Path:
        return self.registry_path or self.resolved_state_dir() / "registry.sqlite3"

    def resolved_instance_id(self) -> str:
        return self.instance_id or f"{socket.gethostname().split('.')[0]}-{uuid.uuid4().hex[:8]}"

    def build_config_source(self) -> tuple[Path | None, str | None]:
        """(file to watch, section in it) for the BuildConfig."""
        if self.build_config_file is not None:
            return self.build_config_file, None
        if self.config_file is not None:
            return self.config_file, "build_config"
        return None, None

    def read_build_config(self) -> pb.BuildConfig:
        """The BuildConfig, with the site's storage policy (the ``storage`` section) in it."""
        path, section = self.build_config_source()
        if path is None:
            config = parse_build_config(self.build_config)
        else:
            doc = load_document(path)
            data = doc.get(section) if section else doc
            if section and data is None:
                data = self.build_config  # the file has no section: keep what env/overrides gave
            config = parse_build_config(data, where=f"BuildConfig in {path}")
        config.storage = self.storage.to_proto()
        return config

    def report_taints(self) -> list[pb.Taint]:
        return [pb.Taint(key=t.key, value=t.value, effect=t.effect) for t in self.taints]


def _with_backend_sections(base: type[SubmitterSettingsBase]) -> type[SubmitterSettingsBase]:
    """``base`` plus one settings section per registered backend, validated by ``_backend_sections``."""
    sections: dict[str, Any] = {
        name: (
            dict[str, Any] | SerializeAsAny[BaseModel] | None,
            Field(None, description=f"settings of the {name} backend ({entry.module}.{entry.config})"),
        )
        for name, entry in BACKENDS.items()
    }
    return create_model("SubmitterSettings", __base__=base, __module__=__name__, __doc__=base.__doc__, **sections)


if TYPE_CHECKING:
    SubmitterSettings = SubmitterSettingsBase
else:
    SubmitterSettings = _with_backend_sections(SubmitterSettingsBase)
