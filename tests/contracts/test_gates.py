"""Gates every change passes, run with the tests so CI runs them: ``mypy --strict`` (pydantic plugin) and
``ruff format --check``. A failure lists ``path:line: message`` against the repository, ready to fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "interlink_nats"
BIN = Path(sys.executable).parent


def package_tree(root: Path, into: Path) -> dict[Path, Path]:
    """The import layout (``interlink_nats.services`` …) as symlinks to the mapped folders of ``package-dir``.

    mypy finds modules by path and cannot follow setuptools' editable-install finder, so it gets the
    layout it would see in a wheel; returns link → real folder, to name errors by repository path.
    """
    mapping: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    links: dict[Path, Path] = {}
    top = into / PACKAGE
    top.mkdir(parents=True, exist_ok=True)
    for entry in (root / mapping[PACKAGE]).iterdir():
        if entry.name != "__pycache__":
            links[top / entry.name] = entry
    for name, folder in mapping.items():
        if name != PACKAGE:
            links[into.joinpath(*name.split("."))] = root / folder
    for link, target in links.items():
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
    for stale in top.iterdir():  # a module that was moved or removed since the last run
        if stale.is_symlink() and stale not in links:
            stale.unlink()
    return links


def repository_paths(output: str, links: dict[Path, Path], tree: Path) -> list[str]:
    """mypy's error lines with each tree path replaced by the repository path it stands for."""
    by_length = sorted(links.items(), key=lambda item: -len(str(item[0])))
    lines = []
    for line in output.splitlines():
        if ": error:" not in line and ": note:" not in line:
            continue
        path = line.split(":", 1)[0]
        absolute = (tree / path).absolute() if not os.path.isabs(path) else Path(path)
        for link, target in by_length:
            if absolute == link or link in absolute.parents:
                path = str((target / absolute.relative_to(link)).relative_to(ROOT))
                break
        lines.append(path + line[len(line.split(":", 1)[0]) :])
    return lines


def test_mypy_strict_reports_no_error() -> None:
    cache = ROOT / ".mypy_cache"
    tree = cache / "package-tree"
    links = package_tree(ROOT, tree)
    result = subprocess.run(
        [
            str(BIN / "python"),
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "-p",
            PACKAGE,
        ],
        cwd=tree,
        env={**os.environ, "MYPYPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = repository_paths(result.stdout, links, tree)
    report = "\n".join(errors or [result.stdout, result.stderr])
    assert result.returncode == 0 and not errors, f"mypy --strict found errors (path:line):\n{report}"


def test_ruff_format_has_nothing_to_change() -> None:
    result = subprocess.run(
        [str(BIN / "ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    unformatted = re.findall(r"^Would reformat: (.+)$", result.stdout, flags=re.MULTILINE)
    assert result.returncode == 0, "run `ruff format` on:\n" + "\n".join(unformatted or [result.stdout, result.stderr])


def test_import_linter_keeps_every_contract(tmp_path: Path) -> None:
    """The layers of ``[tool.importlinter]`` in pyproject.toml: which package may import which.

    import-linter (grimp) walks the package's folder, so it gets the same symlinked tree as mypy; its
    cache is off, since the tree is new each run.
    """
    tree = tmp_path / "tree"
    package_tree(ROOT, tree)
    result = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"import-linter found broken contracts:\n{result.stdout}\n{result.stderr}"
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout)
    assert kept and int(kept.group(1)) >= 5, f"import-linter checked too few contracts:\n{result.stdout}"


MAX_MODULE_LINES = 500
"""A hand-written module past this many lines holds more than one room's worth: split it."""


def test_no_hand_written_module_is_over_500_lines() -> None:
    folders = ("interlink_nats", "kernel", "services", "submitters", "controller", "proto")
    hand_written = [p for folder in folders for p in (ROOT / folder).rglob("*.py")]
    assert len(hand_written) > 50, f"too few modules found below {ROOT}"
    lengths = {p.relative_to(ROOT): len(p.read_text().splitlines()) for p in hand_written}
    too_long = {str(p): n for p, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not too_long, f"over {MAX_MODULE_LINES} lines: {too_long}"
