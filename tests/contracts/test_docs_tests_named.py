"""The docs name the tests that hold their claims (docs/security.md's threat model above all): every test file and
test named in a doc exists, so a renamed or removed test cannot leave a claim standing on nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md"))  # docs/backends/ too: one page per backend
# `tests/test_x.py::test_name` or `tests/test_x.py`, and a following `::other` that names a test of the same file.
_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)((?:::[\w\[\]-]+)?)`((?:,?\s*`::[\w\[\]-]+`)*)")
_SIBLING = re.compile(r"`::([\w\[\]-]+)`")


def _tests_in(path: Path) -> set[str]:
    """The test functions of a file, at module level or in classes (a parametrised id is its function's)."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def _references(doc: Path) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for match in _REFERENCE.finditer(doc.read_text()):
        file, first, rest = match.group(1), match.group(2), match.group(3)
        found.append((file, first[2:] if first else None))
        found += [(file, name) for name in _SIBLING.findall(rest)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT / "docs")) for d in DOCS])
def test_every_test_a_doc_names_exists(doc: Path) -> None:
    missing = []
    for file, name in _references(doc):
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif name is not None and name.split("[", 1)[0] not in _tests_in(path):
            missing.append(f"{file}::{name}")
    assert not missing, f"{doc.relative_to(ROOT)} names tests that do not exist: {missing}"


def test_the_threat_model_names_a_test_for_every_claim() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text[text.index("## A hostile tenant") : text.index("## What a pod may say")]
    rows = [line for line in section.splitlines() if line.startswith("| **")]
    assert len(rows) >= 10
    for row in rows:
        assert "`tests/" in row.rsplit("|", 2)[1], f"a claim without a test: {row[:80]}"
