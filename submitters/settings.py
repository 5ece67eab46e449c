"""Submitter settings: command line > environment (``INTERLINK_SUBMITTER_*``) > config file > defaults.

The config file is YAML or TOML (by extension; ``.yml``/``.yaml``/``.toml``, JSON is YAML). Its
top-level keys are the field names below; nested groups use nested tables, and in the
environment a double underscore: ``INTERLINK_SUBMITTER_SLURM__PARTITION=debug``.
The pool's BuildConfig is the file's ``build_config`` section (proto3 JSON field names), or a
separate file named by ``build_config_file``; either is re-read when it changes.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.build_config import proto_names
from interlink_nats.kernel.config_files import ConfigFileError, LayeredSettings, load_document
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, validate_pool
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    from interlink_nats.submitters.backends.htcondor import HTCondorConfig
    from interlink_nats.submitters.tokens import TokenConfig

ENV_PREFIX = "INTERLINK_SUBMITTER_"


def parse_build_config(data: dict[str, Any] | None, *, where: str = "build_config") -> pb.BuildConfig:
    """A BuildConfig from its proto3-JSON form (camelCase or snake_case keys; enum names short or full)."""
    if not data:
        return pb.BuildConfig()
    try:
        return pb.BuildConfig.from_dict(proto_names(data))
    except (KeyError, ValueError, TypeError) as exc:
        raise ConfigFileError(f"invalid {where}: {exc}") from exc


class TaintSpec(BaseModel):
    key: str
    value: str = ""
    effect: str = "NoSchedule"


class ShellSettings(BaseModel):
    max_concurrent_jobs: int = Field(0, ge=0)
    """Jobs running at once; 0 means the BuildConfig's value, else the number of CPUs."""
    bash: str = "bash"


if TYPE_CHECKING:
    from interlink_nats.submitters.backends.slurm import SlurmConfig


class SlurmSettings(BaseModel):
    sbatch: str = "sbatch"
    squeue: str = "squeue"
    scancel: str = "scancel"
    sacct: str = "sacct"
    sinfo: str = "sinfo"
    partition: str | None = None
    """Limit capacity discovery (sinfo) to this partition; jobs pick theirs with sbatch flags."""
    use_sacct: bool | None = None
    """Ask sacct about jobs that left squeue; None: as the BuildConfig says (slurm.use_sacct)."""
    squeue_all_users: bool = False
    """Poll every user's jobs instead of ``--me`` (when jobs are submitted as another user)."""
    command_timeout: float = Field(60.0, gt=0)

    def config(self) -> SlurmConfig:
        """The plain data the Slurm backend takes (the backend does not import settings)."""
        from interlink_nats.submitters.backends.slurm import SlurmConfig

        return SlurmConfig(**self.model_dump())


class OidcTokenSettings(BaseModel):
    """How the submitter obtains the bearer token the condor commands present (see ``submitters/tokens.py``).

    Secrets come from files or the environment, never from the command line or this file."""

    model_config = ConfigDict(extra="forbid")

    issuer: str
    """OIDC issuer URL; its token endpoint is found via ``<issuer>/.well-known/openid-configuration``."""
    client_id: str
    client_secret_file: Path | None = None
    client_secret_env: str = "INTERLINK_HTCONDOR_CLIENT_SECRET"
    """Name of the environment variable holding the client secret (when no file is given)."""
    refresh_token_file: Path | None = None
    refresh_token_env: str = "INTERLINK_HTCONDOR_REFRESH_TOKEN"
    grant: Literal["auto", "refresh_token", "client_credentials"] = "auto"
    """auto: the refresh-token grant when a refresh token is configured, else client credentials."""
    scope: str = "compute.create compute.read compute.modify compute.cancel"
    audience: str | None = None
    token_file: Path | None = None
    """Where the access token is written (0600); default ``<state_dir>/htcondor/token``."""
    refresh_margin: float = Field(300.0, ge=0)
    """Refresh this many seconds before expiry (at most half the token's lifetime)."""
    ca_file: Path | None = None
    http_timeout: float = Field(30.0, gt=0)

    def config(self) -> TokenConfig:
        """The plain data the token source takes (it does not import settings)."""
        from interlink_nats.submitters.tokens import TokenConfig

        return TokenConfig(**self.model_dump())


class HTCondorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["local", "remote"] = "local"
    """local: the submitter runs on a submit node whose schedd shares its filesystem (live logs);
    remote: an HTCondor-CE reached with -pool/-name, sandboxes spooled, output fetched when the job ends."""
    collector: str | None = None
    """``-pool host[:port]`` of every condor command (the CE's collector)."""
    schedd: str | None = None
    """``-name`` of every condor command (the CE's schedd)."""
    condor_submit: str = "condor_submit"
    condor_q: str = "condor_q"
    condor_history: str = "condor_history"
    condor_rm: str = "condor_rm"
    condor_transfer_data: str = "condor_transfer_data"
    condor_status: str = "condor_status"
    submit_commands: dict[str, str] = Field(default_factory=dict)
    """Extra submit commands for every job, e.g. {"+WantWholeNode": "false", "requirements": "..."}."""
    request_disk: str = ""
    """``request_disk`` of every job (KiB unless a unit is given), e.g. "2GB"; empty: the site's default."""
    time_limit_margin: float = Field(60.0, ge=0)
    """activeDeadlineSeconds plus this is HTCondor's own limit (the job script enforces the deadline itself)."""
    hold_timeout: float = Field(0.0, ge=0)
    """A job held this long (seconds) is removed and reported failed with its hold reason; 0: never."""
    use_condor_status: bool = False
    """Announce capacity from condor_status totals (a local pool); otherwise from ``capacity``."""
    history_limit: int = Field(20000, ge=1)
    """condor_history -limit: how many finished jobs one poll may read back at most."""
    environment: dict[str, str] = Field(default_factory=dict)
    """Extra environment of the condor commands (e.g. _CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS)."""
    token: OidcTokenSettings | None = None
    command_timeout: float = Field(60.0, gt=0)

    def config(self) -> HTCondorConfig:
        """The plain data the HTCondor backend takes (the backend does not import settings)."""
        from interlink_nats.submitters.backends.htcondor import HTCondorConfig

        return HTCondorConfig(**self.model_dump(exclude={"token"}))


class SubmitterSettings(LayeredSettings):
    """Everything a submitter needs; validated once at start."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    pool: str
    backend: Literal["shell", "slurm", "htcondor"] = "shell"

    nats_url: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    """nats://, tls:// or wss:// URLs (comma-separated in the environment)."""
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_token: SecretStr | None = None
    nats_nkey_seed_file: Path | None = None
    nats_creds_file: Path | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    nats_inbox_prefix: str | None = None
    """Reply inbox prefix; default ``_INBOX.pool.<pool>``, the private inbox a pool credential may use."""
    nats_connect_timeout: float = Field(5.0, gt=0)
    reconnect_wait_max: float = Field(30.0, gt=0)
    """Cap of the exponential back-off between reconnect attempts (forever)."""
    drain_timeout: float = Field(20.0, gt=0)
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

    poll_interval: float = Field(5.0, gt=0)
    announce_interval: float = Field(30.0, gt=0)
    max_concurrency: int = Field(64, ge=1)
    """RPC handlers running at once."""
    kill_grace: float = Field(5.0, ge=0)
    retention_days: float = Field(7.0, gt=0)
    """Finished jobs are forgotten after this long (k8s never reuses a pod UID)."""

    build_config: dict[str, Any] | None = None
    build_config_file: Path | None = None
    capacity: dict[str, str] = Field(default_factory=dict)
    """Overrides of discovered capacity, as Kubernetes quantities: {"cpu": "64", "pods": "500"}."""
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)

    shell: ShellSettings = Field(default_factory=ShellSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    htcondor: HTCondorSettings = Field(default_factory=HTCondorSettings)

    @field_validator("pool")
    @classmethod
    def _pool(cls, value: str) -> str:
        return validate_pool(value)

    @field_validator("nats_url", mode="before")
    @classmethod
    def _urls(cls, value: object) -> object:
        """A cluster's servers: a list (config file, repeated --nats-url) and/or comma-separated strings."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [u.strip() for item in value for u in str(item).split(",") if u.strip()]
        return value

    @field_validator("nats_url")
    @classmethod
    def _schemes(cls, value: list[str]) -> list[str]:
        for url in value:
            scheme = url.split("://", 1)[0].lower() if "://" in url else ""
            if scheme not in ("nats", "tls", "ws", "wss"):
                raise ValueError(f"NATS URL {url!r} must start with nats://, tls://, ws:// or wss://")
        if not value:
            raise ValueError("at least one NATS URL is needed")
        return value

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
        path, section = self.build_config_source()
        if path is None:
            return parse_build_config(self.build_config)
        doc = load_document(path)
        data = doc.get(section) if section else doc
        if section and data is None:
            data = self.build_config  # the file has no section: keep what env/overrides gave
        return parse_build_config(data, where=f"BuildConfig in {path}")

    def report_taints(self) -> list[pb.Taint]:
        return [pb.Taint(key=t.key, value=t.value, effect=t.effect) for t in self.taints]
