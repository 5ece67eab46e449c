"""Every CLI error a user can cause is one clear line (exit 2 for bad input), never a traceback.

Each case printed a Python traceback before the CLI got its error boundary (interlink_nats.errors).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {
        "bad_yaml": tmp_path / "bad.yaml",
        "bad_json": tmp_path / "bad.json",
        "list_json": tmp_path / "list.json",
        "a_file": tmp_path / "a-file",
        "mq_int_spec": tmp_path / "mq-int-spec.yaml",
        "mq_int_flavors": tmp_path / "mq-int-flavors.yaml",
        "mq_int_flavor": tmp_path / "mq-int-flavor.yaml",
        "seed": tmp_path / "garbage.nk",
        "bc_typo": tmp_path / "bc-typo.yaml",
        "bc_flavor": tmp_path / "bc-flavor.yaml",
        "pod": tmp_path / "pod.json",
        "seed_site": tmp_path / "seed-site.yaml",
        "open_seed": tmp_path / "open.nk",
        "open_seed_site": tmp_path / "open-seed-site.yaml",
        "slurm_timeout": tmp_path / "slurm-timeout.yaml",
        "dockerr": tmp_path / "dockerr.yaml",
        "spaced_pool": tmp_path / "spaced-pool.yaml",
    }
    made["bad_yaml"].write_text("a: [\n")
    made["bad_json"].write_text("{bad\n")
    made["list_json"].write_text("[]\n")
    made["a_file"].write_text("x\n")
    head = "apiVersion: vk.io/v1alpha1\nkind: MasterQueue\nmetadata: {name: a}\n"
    made["mq_int_spec"].write_text(head + "spec: 5\n")
    made["mq_int_flavors"].write_text(head + "spec: {template: {cohort: c}, flavors: 3}\n")
    made["mq_int_flavor"].write_text(head + "spec: {template: {cohort: c}, flavors: [{name: f, natsFlavor: 7}]}\n")
    made["seed"].write_text("garbage\n")
    made["seed"].chmod(0o600)
    made["seed_site"].write_text(f"nats_nkey_seed_file: {made['seed']}\nstate_dir: {tmp_path / 'state'}\n")
    made["open_seed"].write_text("SUAGARBAGE\n")
    made["open_seed"].chmod(0o644)  # what a plain `cat > pool.nk` leaves
    made["open_seed_site"].write_text(
        f"pool: a\nnats: {{url: 'nats://127.0.0.1:9', nkey_seed_file: {made['open_seed']}}}\n"
        f"state_dir: {tmp_path / 'state'}\n"
    )
    made["slurm_timeout"].write_text(
        f"pool: a\nbackend: slurm\nstate_dir: {tmp_path / 'state'}\nslurm: {{command_timeout_s: 0}}\n"
    )
    made["dockerr"].write_text(f"pool: a\nstate_dir: {tmp_path / 'state'}\nbuild_config: {{runtime: dockerr}}\n")
    made["spaced_pool"].write_text("port: 0\ndefault_pool: hpc a\n")
    made["bc_typo"].write_text("runtime: apptainer\nmemory_limitt: 3\n")
    made["bc_flavor"].write_text(
        f"pool: a\nstate_dir: {tmp_path / 'state'}\nbuild_config:\n  flavors:\n    gpu: {{cpu: '4'}}\n"
    )
    made["pod"].write_text(
        '{"metadata": {"name": "p", "namespace": "d", "uid": "u"},'
        ' "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}'
    )
    return made


CASES = {
    "controller render, bad YAML": (
        ["controller", "render", "-m", "{bad_yaml}", "-r", "{list_json}"],
        "not valid YAML",
    ),
    "controller render, bad JSON": (
        ["controller", "render", "-m", str(EXAMPLES / "masterqueue.yaml"), "-r", "{bad_json}"],
        "not valid JSON",
    ),
    "nats-config --out naming a file": (["nats-config", "--out", "{a_file}", "--pools", "a"], "is a file"),
    "controller run without a kubeconfig": (["controller", "run"], "no Kubernetes configuration"),
    "render, bad JSON": (["render", "{bad_json}"], "not valid JSON"),
    "submitter, bad config file": (["submitter", "shell", "--config", "{bad_yaml}"], "cannot parse config file"),
    # Python's exception names leaked for each of these (TypeError, AttributeError, KeyError, OverflowError,
    # ValueError) or the exit code was 1 (a garbage seed: systemd restarted the unit every 5 s).
    "controller render, spec not a mapping": (
        ["controller", "render", "-m", "{mq_int_spec}", "-r", "{list_json}"],
        "spec: must be a mapping, not int",
    ),
    "controller render, flavors not a list": (
        ["controller", "render", "-m", "{mq_int_flavors}", "-r", "{list_json}"],
        "spec.flavors: must be a list",
    ),
    "controller render, natsFlavor not a mapping": (
        ["controller", "render", "-m", "{mq_int_flavor}", "-r", "{list_json}"],
        "spec.flavors[0].natsFlavor: must be a mapping",
    ),
    "render --build-config with a typo": (
        ["render", "{pod}", "--build-config", "{bc_typo}"],
        "--build-config",
    ),
    "render --build-config, a flavor's unknown key": (
        ["render", "{pod}", "--build-config", "{bc_flavor}"],
        "flavors.gpu.cpu: unknown key",
    ),
    "submitter, a flavor's unknown key in its site file": (
        ["submitter", "shell", "--nats-url", "nats://127.0.0.1:9", "--config", "{bc_flavor}"],
        "flavors.gpu.cpu: unknown key",
    ),
    "render --runtime unknown": (["render", "{pod}", "--runtime", "docker"], "--runtime"),
    "gateway --port out of range": (["gateway", "--port", "99999"], "'--port'"),
    "up --http-port out of range": (["up", "--http-port", "70000"], "'--http-port'"),
    "up --log-level unknown": (["up", "--log-level", "loud"], "--log-level 'loud'"),
    "gateway --log-level unknown": (["gateway", "--log-level", "loud"], "--log-level 'loud'"),
    "gateway, garbage nkey seed": (
        ["gateway", "--nats-nkey-seed-file", "{seed}", "--nats-url", "nats://127.0.0.1:9", "--port", "0"],
        "garbage.nk: not an nkey seed",
    ),
    "submitter, garbage nkey seed": (
        ["submitter", "shell", "--pool", "a", "--nats-url", "nats://127.0.0.1:9", "--config", "{seed_site}"],
        "garbage.nk: not an nkey seed",
    ),
    "gateway, a setting of the wrong type": (
        ["gateway", "--port", "0", "--submit-timeout-s", "x"],
        "--submit-timeout-s",
    ),
    "gateway, an unknown option": (["gateway", "--nope"], "No such option: --nope"),
    "submitter run without --config": (["submitter", "run"], "'--config'"),
    "submitter check without --config": (["submitter", "check"], "'--config'"),
    "submitter check, bad config file": (["submitter", "check", "--config", "{bad_yaml}"], "cannot parse config file"),
    "submitter check, an unknown runtime": (
        ["submitter", "check", "--config", "{dockerr}"],
        "runtime: unknown value 'dockerr': one of apptainer, singularity, podman, none",
    ),
    "gateway check, bad config file": (["gateway", "check", "--config", "{bad_yaml}"], "cannot parse config file"),
    "submitter, a bad --nats-url": (["submitter", "shell", "--pool", "a", "--nats-url", "x"], "--nats-url"),
    "submitter, a --probe-port out of range": (
        ["submitter", "shell", "--pool", "a", "--probe-port", "70000"],
        "--probe-port",
    ),
    "nats-config --client-port out of range": (
        ["nats-config", "--out", "{a_file}", "--pools", "a", "--client-port", "70000"],
        "'--client-port'",
    ),
    "nats-config --response-expires not a duration": (
        ["nats-config", "--out", "{a_file}", "--pools", "a", "--response-expires", "soon"],
        "'--response-expires'",
    ),
    "controller, an unknown option": (["controller", "render", "--nope"], "No such option"),
    # Each of these was once a traceback, a word-less acceptance, or named what the user never wrote.
    "gateway, a seed file others can read": (
        ["gateway", "--nats-nkey-seed-file", "{open_seed}", "--nats-url", "nats://127.0.0.1:9", "--port", "0"],
        "open.nk: permissions 0644 are too open",
    ),
    "submitter, a seed file others can read": (["submitter", "run", "--config", "{open_seed_site}"], "chmod 600"),
    "gateway, default_pool that is no pool name": (
        ["gateway", "--config", "{spaced_pool}"],
        "(config key default_pool): Value error, invalid pool name 'hpc a'",
    ),
    "gateway --default-pool that is no pool name": (
        ["gateway", "--port", "0", "--default-pool", "hpc a"],
        "--default-pool (config key default_pool): Value error, invalid pool name 'hpc a'",
    ),
    "submitter, a backend key that has no flag": (  # was '--slurm-command-timeout-s', a flag nowhere
        ["submitter", "run", "--config", "{slurm_timeout}"],
        "invalid settings: slurm.command_timeout_s: Input should be greater than 0",
    ),
    "submitter, an unknown runtime": (
        ["submitter", "run", "--config", "{dockerr}"],
        "runtime: unknown value 'dockerr': one of apptainer, singularity, podman, none",
    ),
    "render --build-config, an unknown runtime": (
        ["render", "{pod}", "--build-config", "{dockerr}"],
        "runtime: unknown value 'dockerr': one of",
    ),
    # Unsafe defaults said out loud: a network address without a bearer token runs anyone's pods.
    "up --host 0.0.0.0 without --insecure-no-auth": (["up", "--host", "0.0.0.0"], "--insecure-no-auth"),
    "gateway --host 0.0.0.0 without a token": (["gateway", "--host", "0.0.0.0", "--port", "0"], "--bearer-token-file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2(case: str, files: dict[str, Path], tmp_path: Path) -> None:
    argv, expected = CASES[case]
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    result = run_cli(*args, env={"KUBECONFIG": str(tmp_path / "missing-kubeconfig")})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], lines[0]


def test_debug_env_adds_the_traceback(files: dict[str, Path]) -> None:
    result = run_cli("render", str(files["bad_json"]), env={"INTERLINK_NATS_DEBUG": "1"})
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("interlink-nats: error: not valid JSON")


def test_render_previews_a_pod_with_the_submitters_own_site_file(files: dict[str, Path], tmp_path: Path) -> None:
    """One BuildConfig format: the site file (`runtime: apptainer`, with pool, backend…) is what render takes."""
    from interlink_nats.submitters.settings import SubmitterSettings

    site = tmp_path / "site.yaml"
    site.write_text(
        "pool: hpc\nbackend: shell\nnats_url: [nats://127.0.0.1:4222]\n"
        f"state_dir: {tmp_path / 'state'}\nbuild_config:\n  runtime: apptainer\n"
    )
    assert SubmitterSettings.load(site).read_build_config().runtime.name.endswith("APPTAINER")  # the submitter reads it
    result = run_cli("render", str(files["pod"]), "--build-config", str(site))
    assert result.returncode == 0, result.stderr
    assert "runtime apptainer" in result.stdout
    section = tmp_path / "section.yaml"
    section.write_text("runtime: apptainer\n")  # the section alone, as before
    assert "runtime apptainer" in run_cli("render", str(files["pod"]), "--build-config", str(section)).stdout


def test_an_open_address_needs_a_token_or_the_explicit_flag() -> None:
    from interlink_nats.services.gateway.server import UnsafeListen, refuse_open_without_auth
    from interlink_nats.services.gateway.settings import GatewaySettings

    for host in ("127.0.0.1", "::1", "localhost"):
        refuse_open_without_auth(GatewaySettings(host=host))
    refuse_open_without_auth(GatewaySettings(host="0.0.0.0", insecure_no_auth=True))
    refuse_open_without_auth(GatewaySettings(host="0.0.0.0", bearer_token="t"))
    with pytest.raises(UnsafeListen):
        refuse_open_without_auth(GatewaySettings(host="0.0.0.0"))


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["render", "--help"], "--submit-request"),
        (["submitter", "shell", "--help"], "--nats-url"),
        (["submitter", "slurm", "--help"], "--probe-port"),  # /healthz and /metrics are a flag, not file-only
    ],
)
def test_help_shows_flags_not_python_types(argv: list[str], flag: str) -> None:
    """typer printed ``<bool>`` after every flag and ``<list[str]>`` after repeatable options."""
    result = run_cli(*argv, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if flag in line)
    assert "<bool>" not in line and "list[" not in line, line
    help_line = next(line for line in result.stdout.splitlines() if "--help" in line)  # click adds it per call
    assert "<bool>" not in help_line, help_line


@pytest.mark.parametrize("command", [["nats-config"], ["gateway"], ["submitter", "slurm"], ["controller", "run"]])
def test_help_at_80_columns_shows_every_option_name_whole(command: list[str]) -> None:
    """rich's table cut 7 of nats-config's option names (``--websocket-po…``) at 80 columns."""
    import typer.main

    from interlink_nats.cli import app

    leaf = typer.main.get_command(app)
    for name in command:
        leaf = leaf.commands[name]  # type: ignore[attr-defined]  # typer's groups have them
    result = run_cli(*command, "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    words = set(result.stdout.replace(",", " ").split())
    missing = [opt for param in leaf.params for opt in (*param.opts, *param.secondary_opts) if opt not in words]
    assert not missing, result.stdout


def test_a_gateway_on_a_server_without_jetstream_says_so(tmp_path: Path) -> None:
    """It printed ``ServiceUnavailableError: nats: ServiceUnavailableError: code=None ...``: a bare exception name."""
    from conftest import free_port
    from interlink_nats.services.ops.nats_server import NatsServerProcess

    with NatsServerProcess(jetstream=False, work_dir=tmp_path / "nats") as server:
        result = run_cli("gateway", "--nats-url", server.url, "--port", str(free_port()), "--log-level", "warning")
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("interlink-nats: error: the NATS server has no JetStream"), lines[0]
    assert "-js" in lines[0]


def test_a_jetstream_refusal_is_said_in_its_own_words() -> None:
    """A JetStream that answers but cannot serve (a cluster electing its meta leader) printed nats-py's repr,
    ``ServiceUnavailableError: nats: ServiceUnavailableError: code=503 err_code=10008 description='...'``."""
    from nats.js.errors import ServiceUnavailableError

    from interlink_nats.errors import describe

    line, code = describe(
        ServiceUnavailableError(code=503, err_code=10008, description="JetStream system temporarily unavailable")
    )
    assert (line, code) == ("NATS JetStream answered: JetStream system temporarily unavailable (err_code 10008)", 1)
    without_code = describe(ServiceUnavailableError(code=503, description="JetStream system temporarily unavailable"))
    assert without_code == ("NATS JetStream answered: JetStream system temporarily unavailable", 1), "no 'None'"
