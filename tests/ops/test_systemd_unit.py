"""The submitter's systemd unit: valid for systemd, and it starts a command that exists."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "interlink-nats-submitter@.service"
INSTALLED = "/opt/interlink-nats/venv/bin/interlink-nats"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    cli = Path(sys.executable).with_name("interlink-nats")
    instance = tmp_path / "interlink-nats-submitter@hpc-a.service"
    instance.write_text(UNIT.read_text().replace(INSTALLED, str(cli)))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(instance)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in result.stderr.splitlines() if str(instance.name) in line or "Unknown" in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_the_unit_drains_keeps_jobs_and_does_not_loop_on_bad_config() -> None:
    service = unit()["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "process"
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"
    assert service["User"] == "interlink" and service["UMask"] == "0077"
    exec_start = service["ExecStart"].split()
    assert exec_start[:3] == [INSTALLED, "submitter", "run"]


def test_systemctl_reload_sends_the_hangup_that_re_reads_the_site_file() -> None:
    """Before: no ExecReload, and a HUP stopped the submitter with exit 0, which Restart=on-failure left down."""
    assert unit()["Service"]["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_the_command_the_unit_starts_exists() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "submitter", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "backend" in result.stdout


def test_a_bad_config_exits_2_which_the_unit_does_not_restart(tmp_path: Path) -> None:
    config = tmp_path / "hpc-a.yaml"
    config.write_text("pool: hpc-a\nbakend: slurm\n")
    result = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "submitter", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == int(unit()["Service"]["RestartPreventExitStatus"])
    assert "bakend" in result.stderr.strip().splitlines()[-1]
