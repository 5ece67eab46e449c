"""A pool's flavor table (``build_config.flavors``), checked and read the same way by the submitter that
announces it and by ``interlink-nats render --build-config`` — and its figures read by the renderer.

Kept on the dict form (the kernel knows no generated code): a site's table is checked before the generated
``BuildConfig`` parses it, so a mistake is named as ``flavors.<name>.<key>`` rather than as a bare proto field.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from . import quantities

FLAVORS = "flavors"
DEFAULT_FLAVOR = "default_flavor"
KEYS = {
    "description": str,
    "cpu_default": str,
    "memory_default": str,
    "backend_flags": list,
    "gpu": bool,
}
"""A flavor's keys (snake_case; proto3 JSON's camelCase is accepted too) and the type each holds."""

_SLURM_MEMORY = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMGT])$")
"""The SLURM plugin's MemoryDefault form ("16G"): K, M, G, T are powers of 1024, as in ``sbatch --mem``."""


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def memory_bytes(text: str) -> int:
    """Bytes of a flavor's ``memory_default``: "16G" (SLURM plugin, 1024-based) or a Kubernetes quantity."""
    match = _SLURM_MEMORY.match(text.strip())
    if match:
        return math.ceil(Fraction(match["num"]) * (1 << 10 * ("KMGT".index(match["unit"]) + 1)))
    value = quantities.parse(text)
    if value < 0:
        raise ValueError(f"negative quantity: {text!r}")
    return math.ceil(value)


def cpu_millis(text: str) -> int:
    """Millicores of a flavor's ``cpu_default`` ("4", "500m")."""
    value = quantities.parse(text)
    if value < 0:
        raise ValueError(f"negative quantity: {text!r}")
    return math.ceil(value * 1000)


def _check_flavor(name: str, flavor: object) -> None:
    where = f"{FLAVORS}.{name}"
    if not isinstance(flavor, dict):
        raise ValueError(f"{where}: must be a mapping of {', '.join(KEYS)}")
    for key, value in flavor.items():
        kind = KEYS.get(_snake(str(key)))
        if kind is None:
            raise ValueError(f"{where}.{key}: unknown key; a flavor has {', '.join(KEYS)}")
        if not isinstance(value, kind) or (kind is str and isinstance(value, bool)):
            raise ValueError(f"{where}.{key}: must be a {kind.__name__}")
        # The backend checks each flag as it checks a pod's (sbatch options, HTCondor ``name=value``) on submit.
        if isinstance(value, list) and not all(isinstance(f, str) and f.strip() for f in value):
            raise ValueError(f"{where}.{key}: every flag must be a non-empty string")
    for key, read in (("cpu_default", cpu_millis), ("memory_default", memory_bytes)):
        text = flavor.get(key, flavor.get(key.replace("_d", "D")))
        if text:
            try:
                read(text)
            except ValueError as exc:
                raise ValueError(f"{where}.{key}: {exc}") from None


def check_flavors(data: dict[str, Any]) -> None:
    """Raise ValueError naming the key (``flavors.gpu.cpu_default: …``) of a BuildConfig dict's flavor table
    that the renderer could not use: unknown keys, bad quantities or flags, a default that names no flavor."""
    table = data.get(FLAVORS) or {}
    if not isinstance(table, dict):
        raise ValueError(f"{FLAVORS}: must be a mapping of flavor names to flavors")
    for name, flavor in table.items():
        _check_flavor(str(name), flavor)
    default = data.get(DEFAULT_FLAVOR, data.get("defaultFlavor"))
    if default and default not in table:
        names = ", ".join(sorted(table)) or "none"
        raise ValueError(f"{DEFAULT_FLAVOR}: {default!r} is not a flavor of this pool (flavors: {names})")
