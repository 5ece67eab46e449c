"""Gateway settings: a config file like the submitter's, every setting a flag shown with its default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from interlink_nats.kernel.config_files import ConfigFileError
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from pydantic import ValidationError

SECRETS = {"bearer_token", "nats.password", "nats.token"}
"""Never flags: a secret on the command line is visible in `ps`. They come from env, the file, or *_file."""
NOT_FLAGS = {"config_file", "nats"}  # --config itself; the nats group is flattened into --nats-*


def gateway_help() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "gateway", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "TERM": "dumb"},
    )
    return result.stdout


def _entries(shown: str) -> list[str]:
    """Each option's help as one line: click puts the help of a long option name on the lines below it."""
    entries: list[str] = []
    for line in shown.splitlines():
        if line.startswith("  -") or not entries or not line.startswith("   "):
            entries.append(line + " ")
        else:
            entries[-1] += line.strip() + " "
    return entries


def test_every_setting_has_a_flag_with_its_default() -> None:
    shown = gateway_help()
    keys = [k for k in GatewaySettings.model_fields if k not in NOT_FLAGS] + [
        f"nats.{k}" for k in GatewayNatsSettings.model_fields
    ]
    for key in keys:
        if key in SECRETS:
            assert f"--{key.replace('.', '-').replace('_', '-')} " not in shown, f"{key} must not be a flag"
            continue
        flag = "--" + key.replace(".", "-").replace("_", "-")
        line = next((entry for entry in _entries(shown) if f" {flag} " in entry), None)
        assert line is not None, f"no flag {flag} for setting {key}"
        model = GatewaySettings if "." not in key else GatewayNatsSettings
        default = model.model_fields[key.split(".")[-1]].get_default(call_default_factory=True)
        if default is not None:
            assert f"default {default};" in line, f"{flag} does not show its default {default!r}: {line}"


def test_config_file_then_env_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"port: 4100\ndefault_pool: site-a\nbearer_token_file: {token}\n"
        "nats:\n  url: nats://10.0.0.1:4222\n  drain_timeout_s: 3\n"
    )
    from_file = GatewaySettings.load(config)
    assert (from_file.port, from_file.default_pool, from_file.nats.url) == (4100, "site-a", "nats://10.0.0.1:4222")
    assert from_file.nats.drain_timeout_s == 3
    assert from_file.bearer_token is not None and from_file.bearer_token.get_secret_value() == "s3cret"
    assert from_file.config_file == config

    monkeypatch.setenv("INTERLINK_GATEWAY_PORT", "4200")
    monkeypatch.setenv("INTERLINK_GATEWAY_NATS__URL", "nats://10.0.0.2:4222")
    from_env = GatewaySettings.load(config)
    assert (from_env.port, from_env.nats.url, from_env.default_pool) == (4200, "nats://10.0.0.2:4222", "site-a")

    assert GatewaySettings.load(config, port=4300, default_pool=None).port == 4300
    monkeypatch.setenv("INTERLINK_GATEWAY_CONFIG_FILE", str(config))
    assert GatewaySettings.load().default_pool == "site-a"


def test_unknown_key_and_unreadable_token_are_errors_naming_them(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("prot: 4100\n")
    with pytest.raises(ValidationError, match="prot"):
        GatewaySettings.load(typo)
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigFileError, match=r"missing\.yaml"):
        GatewaySettings.load(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"bearer_token_file: {tmp_path / 'nope'}\n")
    with pytest.raises(ValidationError, match="cannot read bearer_token_file"):
        GatewaySettings.load(bad)


def test_cli_reports_a_bad_gateway_config_in_one_line(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("prot: 4100\n")
    result = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "gateway", "--config", str(typo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "interlink-nats: error: invalid settings: prot: Extra inputs are not permitted"
    ]


def test_an_arrays_longest_wait_shorter_than_its_window_or_out_of_bounds_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"array_max_wait_s \(5\) must be at least array_window_s \(10\)"):
        GatewaySettings(array_window_s=10, array_max_wait_s=5)
    for bad in (0, -1, 601):
        with pytest.raises(ValidationError, match="array_max_wait_s"):
            GatewaySettings(array_max_wait_s=bad)
    assert GatewaySettings().array_max_wait_s == 30.0
    config = tmp_path / "short.yaml"
    config.write_text("array_window_s: 10\narray_max_wait_s: 5\n")
    result = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "gateway", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "array_max_wait_s (5) must be at least array_window_s (10)" in line, line
