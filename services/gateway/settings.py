"""Gateway settings: flags > environment (``INTERLINK_GATEWAY_*``, nested with ``__``) > config file > defaults.

The config file (``--config`` or ``INTERLINK_GATEWAY_CONFIG_FILE``; YAML, TOML or JSON) has these field
names as keys, the NATS ones under ``nats:``. Unknown keys are errors.
"""

from __future__ import annotations

from pathlib import Path

from interlink_nats.kernel.config_files import LayeredSettings
from interlink_nats.kernel.nats_connection import NatsConnectionSettings
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, Role, inbox_prefix, validate_pool
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict


class GatewayNatsSettings(NatsConnectionSettings):
    inbox_prefix: str = Field(
        inbox_prefix(Role.GATEWAY), description="the gateway's replies arrive here: the inbox `nats-config` grants it"
    )


class GatewaySettings(LayeredSettings):
    model_config = SettingsConfigDict(env_prefix="INTERLINK_GATEWAY_", env_nested_delimiter="__", extra="forbid")

    nats: GatewayNatsSettings = Field(default_factory=GatewayNatsSettings)
    host: str = Field("127.0.0.1", description="TCP address to listen on")
    port: int = Field(4000, description="TCP port to listen on")
    unix_socket: Path | None = Field(None, description="listen on this unix socket instead of TCP")
    bearer_token: SecretStr | None = Field(
        None, description="require `Authorization: Bearer <token>` (env or file only; or bearer_token_file)"
    )
    bearer_token_file: Path | None = Field(None, description="file holding the bearer token (e.g. a mounted Secret)")
    insecure_no_auth: bool = Field(
        False, description="serve a non-loopback address without a bearer token (anyone reaching it runs pods)"
    )
    redis_url: str | None = Field(None, description="redis for state that survives restarts; memory only if unset")
    default_pool: str | None = Field(None, description="pool for pods that name none")
    ping_free_capacity: bool = Field(
        False,
        description="the ping's node capacity is each pool's held + free (kueue-nats capacity: Free), not its total",
    )
    prefix: str = Field(DEFAULT_PREFIX, description="prefix of announcement and event subjects")
    submit_timeout_s: float = Field(30.0, description="deadline of one Submit call to a pool")
    submit_resend_s: float = Field(
        5.0,
        gt=0,
        description="a Submit not answered this long is sent again until its deadline (it joins the submission in "
        "progress): a request or reply lost with a NATS node costs this long, not the whole deadline",
    )
    pool_wait_s: float = Field(5.0, description="how long to wait for a pool with no live submitter before a 503")
    status_fallback_timeout_s: float = Field(10.0, description="deadline of a GetStatus batch of the safety net")
    stale_after_s: float = Field(
        300.0,
        gt=0,
        description="pull the status of a live pod no event mentioned for this long (safety net; a long-running "
        "pod is pulled once per period, in one batch per pool)",
    )
    group_wait_s: float = Field(
        600.0,
        gt=0,
        description="a pod group not complete this long after its first member arrived fails its members "
        "(PodGroupIncomplete); a complete group's submission is retried this long",
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, description="larger request bodies get a 413")
    shutdown_grace_s: int = Field(
        10, ge=0, description="on SIGTERM/SIGINT, in-flight requests get this long to finish (a log follow is then cut)"
    )
    events_durable: str = Field("interlink-gateway", description="name of the durable JetStream consumer")
    events_replicas: int | None = Field(
        None,
        ge=1,
        le=5,
        description="replicas of the events stream and the gateway's consumer; unset: 1 on a single server, "
        "the cluster size up to 3 on a NATS cluster (an existing stream with fewer is scaled up)",
    )

    @field_validator("default_pool")
    @classmethod
    def _pool_name(cls, value: str | None) -> str | None:
        """A pool name is a DNS label (it becomes a NATS subject token): ``hpc a`` would route nowhere."""
        return None if value is None else validate_pool(value)

    @model_validator(mode="after")
    def _token_from_file(self) -> GatewaySettings:
        """Read the bearer token file once at start, so a token never has to pass through argv or env."""
        if self.bearer_token is None and self.bearer_token_file is not None:
            try:
                token = self.bearer_token_file.read_text().strip()
            except OSError as exc:
                raise ValueError(f"cannot read bearer_token_file {self.bearer_token_file}: {exc.strerror}") from exc
            if not token:
                raise ValueError(f"bearer_token_file {self.bearer_token_file} is empty")
            self.bearer_token = SecretStr(token)
        return self
