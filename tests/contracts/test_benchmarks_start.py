"""Every benchmark still starts: ``bench/X.py --help`` exits 0.

Why: no test runs the benchmarks (they take minutes and print figures, never assert them), so a rename could break
them all unseen: a bench named ``array.py`` shadowed the standard library's ``array`` for every script in bench/,
and a moved test harness left one without its imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_bench_holds_the_benchmarks() -> None:
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_starts_and_explains_itself(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120, cwd=BENCH.parent
    )
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-2000:]
