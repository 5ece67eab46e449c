"""The submitter's settings and command line.

Sources and their precedence, config files, old names, backend sections and each backend's flags.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.settings import ConfigFileError, SubmitterSettings, parse_build_config
from pydantic import ValidationError


def test_settings_precedence_is_cli_then_env_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "submitter.toml"
    cfg.write_text(
        'pool = "from-file"\npoll_interval = 9.0\nnats_url = "tls://file:4222"\n'
        '[slurm]\nsbatch = "/opt/slurm/bin/sbatch"\npartition = "file"\n'
        '[build_config]\nruntime = "apptainer"\nimage_prefix = "docker://"\n'
    )
    monkeypatch.setenv("INTERLINK_SUBMITTER_SLURM__PARTITION", "env")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", "wss://a/nats,wss://b/nats")
    s = SubmitterSettings.load(cfg, poll_interval=1.5)
    assert s.pool == "from-file"
    assert s.poll_interval_s == 1.5
    assert s.nats.servers() == ["wss://a/nats", "wss://b/nats"]
    assert s.slurm.partition == "env"
    assert s.slurm.sbatch == "/opt/slurm/bin/sbatch", "env for one nested key keeps the file's others"
    bc = s.read_build_config()
    assert bc.runtime == pb.ContainerRuntime.APPTAINER
    assert bc.image_prefix == "docker://"


def test_yaml_config_and_clear_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("pool: Bad_Pool\n")
    with pytest.raises(ValidationError, match="DNS label"):
        SubmitterSettings.load(cfg)
    cfg.write_text("pool: ok\nnats_url: [http://x]\n")
    with pytest.raises(ValidationError, match="nats://"):
        SubmitterSettings.load(cfg)
    cfg.write_text("pool: [unclosed\n")
    with pytest.raises(ConfigFileError, match=r"s\.yaml"):
        SubmitterSettings.load(cfg)
    with pytest.raises(ConfigFileError, match="invalid"):
        parse_build_config({"no_such_field": 1})


def test_every_node_of_a_cluster_from_flag_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's servers: repeated or comma-separated --nats-url, a comma-separated env var, a YAML list."""
    nodes = ["nats://n0:4222", "nats://n1:4222", "nats://n2:4222"]
    repeated = ["nats://n0:4222,nats://n1:4222", nodes[2]]
    assert SubmitterSettings.load(None, pool="a", nats_url=repeated).nats.servers() == nodes
    cfg = tmp_path / "s.yaml"
    cfg.write_text("pool: a\nnats_url: [nats://n0:4222, 'nats://n1:4222,nats://n2:4222']\n")
    assert SubmitterSettings.load(cfg).nats.servers() == nodes
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", ",".join(nodes))
    assert SubmitterSettings.load(None, pool="a").nats.servers() == nodes


def test_new_setting_names_and_the_old_ones_they_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NATS section and unit-suffixed names; the flat and unit-less names of before stay accepted, each
    layer keeping its strength (env over file) and, within one layer, the new name winning."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "pool: a\nnats:\n  url: tls://file:4222\n  connect_timeout_s: 2\npoll_interval_s: 9\nkill_grace: 3\n"
        "slurm:\n  command_timeout: 7\nhtcondor:\n  hold_timeout_s: 60\n  token: {issuer: https://i, client_id: c,"
        " refresh_margin: 10}\n"
    )
    monkeypatch.setenv("INTERLINK_SUBMITTER_POLL_INTERVAL", "4")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS__USER", "env-user")
    monkeypatch.setenv("INTERLINK_SUBMITTER_RECONNECT_WAIT_MAX", "11")
    s = SubmitterSettings.load(cfg, announce_interval=12.0, announce_interval_s=13.0)
    assert s.nats.servers() == ["tls://file:4222"]
    assert (s.nats.user, s.nats.connect_timeout_s, s.nats.reconnect_wait_max_s) == ("env-user", 2.0, 11.0)
    assert s.poll_interval_s == 4.0, "the old variable in the environment beats the new key in the file"
    assert (s.kill_grace_s, s.announce_interval_s) == (3.0, 13.0)
    assert s.slurm.command_timeout_s == 7.0
    assert s.htcondor.hold_timeout_s == 60.0
    assert s.htcondor.token.refresh_margin_s == 10.0
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS__URL", "nats://new:4222")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", "nats://old:4222")
    assert SubmitterSettings.load(None, pool="a").nats.servers() == ["nats://new:4222"]


def test_backend_sections_are_validated_by_the_backends_own_models() -> None:
    with pytest.raises(ValidationError, match=r"slurm\.command_timeout_s\n.*greater than 0"):
        SubmitterSettings.load(None, pool="a", slurm={"command_timeout_s": 0})
    with pytest.raises(ValidationError, match=r"htcondor\.mode"):
        SubmitterSettings.load(None, pool="a", backend="htcondor", htcondor={"mode": "far"})
    with pytest.raises(ValidationError, match="unknown backend 'pbs': one of shell, slurm, htcondor"):
        SubmitterSettings.load(None, pool="a", backend="pbs")


def test_a_shell_submitter_does_not_import_the_other_backends(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from interlink_nats.submitters.settings import SubmitterSettings\n"
        "from interlink_nats.submitters.runtime import make_backend\n"
        "import interlink_nats.submitters.cli\n"
        f"make_backend(SubmitterSettings.load(None, pool='a', state_dir={str(tmp_path)!r}))\n"
        "loaded = [m for m in sys.modules if m.startswith('interlink')]\n"
        "print(sorted(m for m in loaded if m.endswith(('slurm', 'htcondor', 'tokens'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["slurm", "--pool", "a", "--nats-url", "nats://n:4222", "--poll-interval", "2", "--partition", "p"],
            {
                "backend": "slurm",
                "pool": "a",
                "nats": {"url": ["nats://n:4222"]},
                "poll_interval_s": 2.0,
                "slurm": {"partition": "p"},
            },
        ),
        (
            ["htcondor", "--poll-interval-s", "3", "--mode", "remote", "--schedd", "ce"],
            {"backend": "htcondor", "poll_interval_s": 3.0, "htcondor": {"mode": "remote", "schedd": "ce"}},
        ),
        (["shell", "--max-concurrent-jobs", "4"], {"backend": "shell", "shell": {"max_concurrent_jobs": 4}}),
        (["slurm", "--no-use-sacct"], {"backend": "slurm", "slurm": {"use_sacct": False}}),
    ],
)
def test_each_backend_command_takes_the_common_options_and_its_own_flags(
    argv: list[str], expected: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlink_nats.submitters import cli
    from typer.testing import CliRunner

    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "_serve", lambda config, level, json_logs, overrides: seen.update(overrides))
    result = CliRunner().invoke(cli.app, argv)
    assert result.exit_code == 0, result.output
    assert {key: value for key, value in seen.items() if value is not None} == expected
