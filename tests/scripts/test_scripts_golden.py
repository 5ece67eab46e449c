"""Golden scripts: one per runtime and one per volume kind (tests/golden/*.sh).

Regenerate after an intended change with ``UPDATE_GOLDEN=1 .venv/bin/pytest tests/scripts/test_scripts_golden.py``
and review the diff: it is the exact shell every site will run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from golden_cases import CASES
from interlink_nats.services.scripts import render_job

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


"""The golden site: what is below /srv (the corpus's hostPaths) read-write, claims of namespace ns on Lustre (made
by the job), and the NFS export nfs1.example.org:/export where the site mounts it."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    data, bc = CASES[case]
    script = render_job(data, bc).script
    path = GOLDEN / f"{case}.sh"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(script)
    assert path.exists(), f"missing {path}; run with UPDATE_GOLDEN=1"
    assert script == path.read_text(), f"{case} differs from {path}; review and run with UPDATE_GOLDEN=1"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_render_is_deterministic() -> None:
    data, bc = CASES["runtime-apptainer"]
    assert render_job(data, bc).script == render_job(data, bc).script


def test_golden_dir_has_no_stale_files() -> None:
    assert {p.stem for p in GOLDEN.glob("*.sh")} <= set(CASES)
