"""Every CLI error a user can cause is one clear line (exit 2 for bad input), never a traceback.

Each case printed a Python traceback before the CLI got its error boundary (interlink_nats.errors).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
    }
    made["bad_yaml"].write_text("a: [\n")
    made["bad_json"].write_text("{bad\n")
    made["list_json"].write_text("[]\n")
    made["a_file"].write_text("x\n")
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
