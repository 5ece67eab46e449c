"""Settings from a config file, the environment and the command line, in that order of strength.

Every long-running process (gateway, submitter) reads the same way: defaults < config file (YAML, TOML
or JSON by extension) < environment (``<PREFIX>*``, nested with ``__``) < command-line flags. One
implementation, so an operator learns it once and an unknown key is an error in every process.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource


class ConfigFileError(ValueError):
    """The config file could not be read or parsed; the message names the file."""

    exit_code = 2  # bad input: the CLI prints the message as one line and exits with this


def one_line(exc: Exception) -> str:
    """A parser's error as one line with its position (YAML's own message spans several)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"{getattr(exc, 'problem', None) or 'invalid YAML'} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).splitlines()[0]


def load_document(path: Path) -> dict[str, Any]:
    """Parse a YAML/TOML/JSON file into a dict (empty file → {})."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigFileError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix.lower() == ".json":
            data = json.loads(text) if text.strip() else {}
        else:
            data = yaml.safe_load(text) or {}
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigFileError(f"cannot parse config file {path}: {one_line(exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {path} must hold a mapping at the top level")
    return data


_FILE_VALUES: ContextVar[dict[str, Any]] = ContextVar("config_file_values", default={})  # noqa: B039


class _FileSource(PydanticBaseSettingsSource):
    """The config file's values, below the environment (pydantic-settings deep-merges sources)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get())


def renamed(name: str, *old: str) -> AliasChoices:
    """``validation_alias`` of a renamed field of a nested model: the new name and the old ones it replaced.

    Why: deployed config files and environments keep working after a rename (``command_timeout`` →
    ``command_timeout_s``); nested sections take it this way, top-level fields through ``RENAMED``."""
    return AliasChoices(name, *old)


def _move_renamed(values: dict[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """``values`` with every old key moved to its new (dotted) path; within one layer the new name wins."""
    out = dict(values)
    for old, new in renames.items():
        if old not in out:
            continue
        value = out.pop(old)
        *parents, leaf = new.split(".")
        target = out
        for part in parents:
            section = target.get(part)
            if section is not None and not isinstance(section, Mapping):
                break  # the section was given as an object (a model): it wins over the old flat key
            target[part] = section = dict(section or {})
            target = section
        else:
            target.setdefault(leaf, value)
    return out


class _RenamedSource(PydanticBaseSettingsSource):
    """One layer (init, environment or file) with its old setting names moved to the new ones.

    The environment layer also reads the old variables (``<PREFIX><OLD NAME>``), which pydantic-settings
    no longer looks for once the field is renamed; the new variable wins over the old one."""

    def __init__(
        self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource, *, old_env: bool = False
    ) -> None:
        super().__init__(settings_cls)
        self.inner = inner
        self.old_env = old_env

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        renames: Mapping[str, str] = getattr(self.settings_cls, "RENAMED", {})
        values = dict(self.inner())
        if self.old_env:
            prefix = str(self.config.get("env_prefix", "")).upper()
            environ = {key.upper(): value for key, value in os.environ.items()}
            for old in renames:
                if f"{prefix}{old.upper()}" in environ:
                    values.setdefault(old, environ[f"{prefix}{old.upper()}"])
        return _move_renamed(values, renames)


class LayeredSettings(BaseSettings):
    """Base of a process's settings: ``load()`` layers file < environment < overrides.

    Subclasses set ``model_config`` with their ``env_prefix`` (and ``extra="forbid"``, so a typo in a
    file or the environment is an error naming the key, not a silently ignored setting).
    """

    config_file: Path | None = Field(None, description="the YAML/TOML/JSON file these settings were read from")

    RENAMED: ClassVar[Mapping[str, str]] = {}
    """Old top-level setting name → its new dotted path (``"poll_interval": "poll_interval_s"``,
    ``"nats_url": "nats.url"``): still accepted as a file key, init argument and environment variable."""

    CONFIG_ENV: ClassVar[str] = "CONFIG_FILE"
    """With the env prefix, the environment variable that names the config file."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            _RenamedSource(settings_cls, init_settings),
            _RenamedSource(settings_cls, env_settings, old_env=True),
            _RenamedSource(settings_cls, _FileSource(settings_cls)),
            file_secret_settings,
        )

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> Self:
        """Settings from the file (if any), overridden by the environment, overridden by ``overrides``.

        ``None`` overrides are dropped: a flag the user did not give does not hide the file or env.
        """
        overrides = {k: v for k, v in overrides.items() if v is not None}
        env_name = f"{cls.model_config.get('env_prefix', '')}{cls.CONFIG_ENV}"
        if config_file is None and os.environ.get(env_name):
            config_file = Path(os.environ[env_name])
        file_values: dict[str, Any] = load_document(config_file) if config_file else {}
        if config_file is not None:
            overrides.setdefault("config_file", config_file)
        token = _FILE_VALUES.set(file_values)
        try:
            return cls(**overrides)
        finally:
            _FILE_VALUES.reset(token)
