"""The one BuildConfig file format: what a submitter's site file holds is what ``render`` previews.

A site admin writes ``build_config: {runtime: apptainer, ...}`` in the submitter's site file; the
renderer's ``--build-config`` takes that very file (or just the section). Both sides turn the
document into proto3-JSON names here, then parse it with the generated ``BuildConfig`` themselves
(the kernel knows no generated code; submitters and the renderer must not import each other).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .flavors import check_flavors

SITE_SECTION = "build_config"
"""The key of the BuildConfig in a submitter's site file."""

LEGACY_SECTIONS = ("slurm", "shell")
"""Backend sections a site file wrote at the top of ``build_config`` before ``backends`` held them; still read,
moved under ``backends`` (the generated fields of those names are deprecated; ``kernel.backend_options``)."""

_SITE_KEYS = frozenset({"pool", "backend", "nats", "nats_url", "state_dir"})
"""Keys only a site file has: a document with one of them is a site file, not a bare BuildConfig."""


def build_config_section(document: dict[str, Any]) -> dict[str, Any]:
    """The BuildConfig in ``document``: its ``build_config`` section if it is a site file, else all of it."""
    if SITE_SECTION in document or _SITE_KEYS & document.keys():
        section = document.get(SITE_SECTION) or {}
        if not isinstance(section, dict):
            raise ValueError(f"{SITE_SECTION} must be a mapping, not {type(section).__name__}")
        return section
    return document


def proto_names(data: dict[str, Any], runtimes: Collection[str] = ()) -> dict[str, Any]:
    """``data`` with a short runtime name (``apptainer``) spelled as its enum (``CONTAINER_RUNTIME_APPTAINER``),
    a backend section written the old way (``slurm:`` beside ``runtime:``) moved under ``backends``, and its
    flavor table checked first (ValueError naming the key), as the generated parser names no flavor.

    ``runtimes``: the enum's short names (the caller has the generated code); another runtime is refused
    naming them as a site file spells them, not as ``Unknown value CONTAINER_RUNTIME_DOCKERR``."""
    fixed = check_flavors(dict(data))
    for name in LEGACY_SECTIONS:
        if name in fixed:
            backends = fixed.get("backends") or {}
            if not isinstance(backends, dict):
                raise ValueError(f"backends must be a mapping, not {type(backends).__name__}")
            if name in backends:
                raise ValueError(f"{name} is set twice: as {name} and as backends.{name} (keep backends.{name})")
            fixed["backends"] = {**backends, name: fixed.pop(name)}
    runtime = fixed.get("runtime")
    if isinstance(runtime, str) and not runtime.upper().startswith("CONTAINER_RUNTIME_"):
        if runtimes and runtime.lower() not in runtimes:
            raise ValueError(f"runtime: unknown value {runtime!r}: one of {', '.join(runtimes)}")
        fixed["runtime"] = f"CONTAINER_RUNTIME_{runtime.upper()}"
    return fixed
