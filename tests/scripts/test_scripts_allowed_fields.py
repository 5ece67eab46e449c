"""docs/pod-support.md and the renderer's allow-lists (services/scripts/allowed_fields.py) name the same fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from interlink_nats.services.scripts import allowed_fields as allowed
from interlink_nats.services.scripts import render_job

DOC = Path(__file__).resolve().parents[2] / "docs" / "pod-support.md"


def section(title: str) -> str:
    """The text under heading ``title`` up to the next heading of the same or a higher level."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert match, f"docs/pod-support.md has no section {title!r}"
    level = len(match[1])
    end = re.search(rf"^#{{1,{level}}} ", text[match.end() :], re.MULTILINE)
    return text[match.end() : match.end() + end.start()] if end else text[match.end() :]


def table(text: str, first_header: str) -> list[tuple[str, str]]:
    """(first cell, second cell) of each row of the table whose first column is ``first_header``."""
    rows: list[tuple[str, str]] = []
    inside = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            if inside:
                break
            continue
        if not inside:
            inside = cells[0] == first_header
            continue
        if not set(cells[0]) <= set("-: "):
            rows.append((cells[0], cells[1]))
    assert rows, f"no table with a {first_header!r} column"
    return rows


def field_names(cell: str) -> set[str]:
    """Top-level field names in backticks: `env[].value` is `env`, `metadata.uid` (not a member here) is left out."""
    names = set()
    for quoted in re.findall(r"`([^`]+)`", cell):
        name = re.split(r"[\[]", quoted)[0]
        if re.fullmatch(r"[A-Za-z]+", name):
            names.add(name)
    return names


def classify(rows: list[tuple[str, str]], kinds: dict[str, str]) -> dict[str, set[str]]:
    """Field names by the kind their row's behaviour starts with (``kinds``: prefix -> kind); others 'supported'."""
    out: dict[str, set[str]] = {kind: set() for kind in [*kinds.values(), "supported"]}
    for names_cell, behaviour in rows:
        kind = next((k for prefix, k in kinds.items() if behaviour.startswith(prefix)), "supported")
        out[kind] |= field_names(names_cell)
    return out


def test_pod_level_fields_match() -> None:
    rows = table(section("Pod-level fields"), "field")
    doc = classify(
        rows,
        {"ignored": "ignored", "`false` accepted": "false_only", "rejected when non-empty": "empty_only"},
    )
    assert doc == {
        "supported": allowed.SPEC_SUPPORTED,
        "ignored": allowed.SPEC_IGNORED,
        "false_only": allowed.SPEC_FALSE_ONLY,
        "empty_only": allowed.SPEC_EMPTY_ONLY,
    }


def test_container_fields_match() -> None:
    rows = table(section("Containers"), "field")
    doc = classify(rows, {"ignored": "ignored", "**rejected**": "rejected"})
    assert doc["supported"] == allowed.CONTAINER_SUPPORTED
    assert doc["ignored"] == allowed.CONTAINER_IGNORED
    assert doc["rejected"] >= {"volumeDevices", "restartPolicy"}
    assert not doc["rejected"] & (allowed.CONTAINER_SUPPORTED | allowed.CONTAINER_IGNORED)


def test_volume_kinds_and_mount_fields_match() -> None:
    text = section("Volumes")
    doc = classify(table(text, "volume"), {"**rejected**": "rejected"})
    assert doc["supported"] == allowed.VOLUME_KINDS
    mount_line = re.search(r"^Mount fields: (.*?);", text, re.MULTILINE | re.DOTALL)
    assert mount_line, "the Volumes section lists the mount fields"
    assert field_names(mount_line[1]) == allowed.MOUNT_KEYS


@pytest.mark.parametrize("key", sorted(allowed.CONTAINER_IGNORED))
def test_ignored_container_fields_render(key: str) -> None:
    """What the lists call ignored really is (the other tests only compare names)."""
    pod = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"], key: None}]},
    }
    assert render_job(pod).containers == ["main"]
