"""Every benchmark still starts: ``bench/X.py --help`` exits 0, and what it imports inside its functions exists.

Why: no test runs the benchmarks (they take minutes and print figures, never assert them), so a rename could break
them all unseen: a bench named ``array.py`` shadowed the standard library's ``array`` for every script in bench/,
and a moved test harness left one without its imports.
"""

from __future__ import annotations

import ast
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


_FIND_IMPORTS = """
import contextlib, importlib.util, io, os, runpy, sys
script, names = sys.argv[1], sys.argv[2:]
sys.argv = [script, "--help"]
sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python bench/X.py` starts
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
print(" ".join(n for n in names if n not in sys.builtin_module_names and importlib.util.find_spec(n) is None))
"""
"""Runs a bench's top (``--help``: its sys.path as it sets it up), then looks for each name it imports anywhere."""


def _imported_top_names(script: Path) -> list[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return sorted(names)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_import_of_a_benchmark_can_be_found(script: Path) -> None:
    """Imports inside functions too, on the path the bench sets up at its top: ``--help`` runs only the top, and
    poll.py's HTCondor stand-in, imported where its figures start, was missing after tests/ moved into folders."""
    result = subprocess.run(
        [sys.executable, "-c", _FIND_IMPORTS, str(script), *_imported_top_names(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    missing = result.stdout.split()
    assert not missing, f"{script.name} imports what is nowhere on its path: {missing}"
