"""Gateway settings: flags > environment (``INTERLINK_GATEWAY_*``, nested with ``__``) > config file > defaults.

The config file (``--config`` or ``INTERLINK_GATEWAY_CONFIG_FILE``; YAML, TOML or JSON) has these field
names as keys, the NATS ones under ``nats:``. Unknown keys are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from interlink_nats.kernel import quantities
from interlink_nats.kernel.config_files import LayeredSettings
from interlink_nats.kernel.nats_connection import NatsConnectionSettings
from interlink_nats.kernel.pod_limits import GROUP_SIZE_MAX
from interlink_nats.kernel.reported import DEFAULT_MAXIMA, Maxima
from interlink_nats.kernel.subjects import DEFAULT_PREFIX, Role, inbox_prefix, validate_pool
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

if TYPE_CHECKING:
    from interlink_nats.services.gateway.pod_group import PodGroupLimits


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
    max_reported_cpu: str = Field(
        DEFAULT_MAXIMA.cpu,
        description="the most CPUs one pool may report; a larger, negative or malformed figure is left out of the "
        "ping (that pool's share only), and logged once",
    )
    max_reported_memory: str = Field(
        DEFAULT_MAXIMA.memory, description="the most memory (and ephemeral-storage, hugepages-*) one pool may report"
    )
    max_reported_pods: str = Field(DEFAULT_MAXIMA.pods, description="the most pods one pool may report")
    max_reported_other: str = Field(
        DEFAULT_MAXIMA.other, description="the most of any other resource (GPUs, devices) one pool may report"
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
    array_window_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="the pods of one Kubernetes Job arriving for a pool whose backend takes arrays are sent as one "
        'array once none of them arrived for this long (docs/gateway.md, "Job arrays"); 0: every pod alone',
    )
    array_max_wait_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="an array being coalesced is sent this long after its first pod arrived at the latest, even "
        "if its Job's pods still come (at least array_window_s)",
    )
    array_max_count: int = Field(
        1000,
        ge=1,
        le=GROUP_SIZE_MAX,
        description="the most pods one array holds (a full array is sent at once; Slurm's MaxArraySize is 1001 by "
        "default)",
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, description="larger request bodies get a 413")
    max_group_size: int = Field(
        GROUP_SIZE_MAX,
        ge=1,
        le=GROUP_SIZE_MAX,
        description="the most members a pod group may declare (kueue.x-k8s.io/pod-group-total-count); more is a 422",
    )
    max_held_members_per_namespace: int = Field(
        GROUP_SIZE_MAX,
        ge=1,
        description="pod-group members one namespace may have waiting: the total counts of its waiting groups "
        "added up, taken by a group's first member; a new group beyond it is a 429 until some are sent or fail "
        "(at least max_group_size, so a whole group fits)",
    )
    max_held_bytes_per_namespace: int = Field(
        64 * 1024 * 1024,
        ge=1,
        description="bytes of rendered jobs of one namespace's waiting pod-group members; more is a 429",
    )
    max_held_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1,
        description="bytes of rendered jobs of all waiting pod-group members (memory and redis); more is a 429",
    )
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
    def _whole_group_fits(self) -> GatewaySettings:
        if self.max_held_members_per_namespace < self.max_group_size:
            raise ValueError(
                f"max_held_members_per_namespace ({self.max_held_members_per_namespace}) must be at least "
                f"max_group_size ({self.max_group_size}): a group that large could never be held whole"
            )
        return self

    @model_validator(mode="after")
    def _array_wait_holds_its_window(self) -> GatewaySettings:
        if self.array_max_wait_s < self.array_window_s:
            raise ValueError(
                f"array_max_wait_s ({self.array_max_wait_s:g}) must be at least array_window_s "
                f"({self.array_window_s:g}): an array could never wait its quiet window"
            )
        return self

    @field_validator("max_reported_cpu", "max_reported_memory", "max_reported_pods", "max_reported_other")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not quantities.is_valid(value) or quantities.parse(value) <= 0:
            raise ValueError(f"must be a positive Kubernetes quantity, got {value!r}")
        return value

    def report_maxima(self) -> Maxima:
        return Maxima(
            cpu=self.max_reported_cpu,
            memory=self.max_reported_memory,
            pods=self.max_reported_pods,
            other=self.max_reported_other,
        )

    def held_limits(self) -> PodGroupLimits:
        # Imported here: the settings are read by every command's CLI, and the gateway's modules need the
        # gateway extra (jinja2), which a submitter-only install does not have.
        from interlink_nats.services.gateway.pod_group import PodGroupLimits

        return PodGroupLimits(
            group_size=self.max_group_size,
            members_per_namespace=self.max_held_members_per_namespace,
            bytes_per_namespace=self.max_held_bytes_per_namespace,
            bytes_total=self.max_held_bytes,
        )

    def array_limits(self) -> PodGroupLimits:
        """What arrays being coalesced may hold: the bytes bounds of pod groups (an array holds pods for at most
        ``array_max_wait_s``, so no bound on seats: each array's ``total`` is only its most, ``array_max_count``)."""
        from interlink_nats.services.gateway.pod_group import PodGroupLimits

        return PodGroupLimits(
            group_size=self.array_max_count,
            members_per_namespace=2**62,
            bytes_per_namespace=self.max_held_bytes_per_namespace,
            bytes_total=self.max_held_bytes,
        )

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
