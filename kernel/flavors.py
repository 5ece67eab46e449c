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

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

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

_SLURM_MEMORY = re.compile(r"(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMGT])")
"""The SLURM plugin's MemoryDefault form ("16G"): K, M, G, T are powers of 1024, as in ``sbatch --mem``."""


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def memory_bytes(text: str) -> int:
    """Bytes of a flavor's ``memory_default``: "16G" (SLURM plugin, 1024-based) or a Kubernetes quantity."""
    match = _SLURM_MEMORY.fullmatch(text.strip())
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


PLUGIN_KEYS = {
    "CPUDefault": "is cpu_default here",
    "MemoryDefault": "is memory_default here",
    "SlurmFlags": "is backend_flags here",
    "Description": "is description here",
    "Name": "is the flavor's key here",
    "UID": "has no place here: the site's namespace mapping says whose account a pod runs as",
}
"""The SLURM plugin's flavor keys, so a table copied as-is is refused with what to write instead."""
QUANTITIES = {"cpu_default": cpu_millis, "memory_default": memory_bytes}


def _check_flavor(name: str, flavor: object) -> dict[str, Any]:
    """``flavor`` with snake_case keys and whole-number quantities as text (YAML reads ``cpu_default: 4`` as 4)."""
    where = f"{FLAVORS}.{name}"
    if not isinstance(flavor, dict):
        raise ValueError(f"{where}: must be a mapping of {', '.join(KEYS)}")
    out: dict[str, Any] = {}
    for key, value in flavor.items():
        field = _snake(str(key))
        kind = KEYS.get(field)
        if kind is None:
            why = (
                f"the SLURM plugin's {key} {PLUGIN_KEYS[key]}"
                if key in PLUGIN_KEYS
                else f"a flavor has {', '.join(KEYS)}"
            )
            raise ValueError(f"{where}.{key}: unknown key; {why}")
        if field in QUANTITIES and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, kind):
            raise ValueError(f"{where}.{key}: must be a {kind.__name__}")
        # The backend checks each flag as it checks a pod's (sbatch options, HTCondor ``name=value``) on submit.
        if isinstance(value, list) and not all(isinstance(f, str) and f.strip() for f in value):
            raise ValueError(f"{where}.{key}: every flag must be a non-empty string")
        if field in QUANTITIES and value:
            try:
                QUANTITIES[field](str(value))
            except ValueError as exc:
                raise ValueError(f"{where}.{key}: {exc}") from None
        out[field] = value
    return out


def check_flavors(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its flavor table checked and normalized; ValueError naming the key (``flavors.gpu.cpu_default:
    …``) the renderer could not use: unknown keys, bad quantities or flags, a default that names no flavor."""
    table = data.get(FLAVORS)
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise ValueError(f"{FLAVORS}: must be a mapping of flavor names to flavors")
    checked = {str(name): _check_flavor(str(name), flavor) for name, flavor in table.items()}
    default = data.get(DEFAULT_FLAVOR, data.get("defaultFlavor"))
    if default and default not in checked:
        names = ", ".join(sorted(checked)) or "none"
        raise ValueError(f"{DEFAULT_FLAVOR}: {default!r} is not a flavor of this pool (flavors: {names})")
    return {**data, FLAVORS: checked} if FLAVORS in data else data
