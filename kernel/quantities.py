"""Kubernetes resource quantities as exact numbers: parse, compare, format. The one parser of the project.

Pure and exact (``Fraction``), because quotas are compared and capped: a float would turn
``1Ei`` or ``100m`` into rounding noise and make "nothing changed" comparisons flaky. Used by
the renderer (pod requests), the controller (quotas) and the gateway (ping capacity); part of the shared
kernel, so it imports nothing of the project.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    # decimal SI suffixes, 10^-9 … 10^-3 and 10^3 … 10^18 (apimachinery resource/suffix.go)
    **{suffix: Fraction(10) ** power for suffix, power in zip("num", range(-9, 0, 3), strict=True)},
    **{suffix: Fraction(10) ** power for suffix, power in zip("kMGTPE", range(3, 19, 3), strict=True)},
    # binary suffixes, 2^10 … 2^60
    **{
        suffix: Fraction(2) ** power
        for suffix, power in zip(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), range(10, 61, 10), strict=True)
    },
}

_QUANTITY_RE = re.compile(
    r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d+))?"
)


MAX_EXPONENT = 99
"""``1e-999999999`` would keep the exact (Fraction) arithmetic busy for minutes: refused up front."""


class InvalidQuantityError(ValueError):
    """A string that is not a Kubernetes quantity (the API server would reject it too)."""


def parse(value: str | int | float) -> Fraction:
    """The exact value of a quantity such as ``"64"``, ``"256Gi"``, ``"500m"`` or ``"1e3"``."""
    if isinstance(value, bool):
        raise InvalidQuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise InvalidQuantityError(f"invalid quantity {value!r}")
    return _parse_text(value)


@functools.lru_cache(maxsize=8192)
def _parse_text(value: str) -> Fraction:
    """Cached: a controller sees the same few hundred quantity strings on every pass."""
    match = _QUANTITY_RE.fullmatch(value.strip())
    if match is None:
        raise InvalidQuantityError(f"invalid quantity {value[:40]!r}")
    if match["exp"] is not None and abs(int(match["exp"])) > MAX_EXPONENT:
        raise InvalidQuantityError(f"exponent out of range (at most {MAX_EXPONENT}): {value[:40]!r}")
    number = Fraction(match["num"])
    if match["exp"] is not None:
        return number * Fraction(10) ** int(match["exp"])
    return number * _SUFFIXES[match["suffix"] or ""]


def is_valid(value: object) -> bool:
    if not isinstance(value, str | int | float):
        return False
    try:
        parse(value)
    except InvalidQuantityError:
        return False
    return True


def normalize(value: str | int | float) -> str:
    """The string form we write: the input's own spelling when it is one (no churn), else a plain number."""
    if isinstance(value, str):
        parse(value)
        return value.strip()
    return format_fraction(parse(value))


def format_fraction(value: Fraction) -> str:
    """A quantity string for an exact value: integer when whole, else milli-units rounded up."""
    if value.denominator == 1:
        return str(value.numerator)
    millis = -((-value * 1000) // 1)  # ceil, so a cap is never silently lowered below the input
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def minimum(*values: str) -> str:
    """The smallest of the quantities, spelled as given (ties keep the first)."""
    return _extreme(min, "minimum", values)


def maximum(*values: str) -> str:
    """The largest of the quantities, spelled as given (ties keep the first)."""
    return _extreme(max, "maximum", values)


def _extreme(pick: Callable[..., str], name: str, values: tuple[str, ...]) -> str:
    """``min``/``max`` by exact value; both return the first of equal candidates, so ties keep the first."""
    if not values:
        raise ValueError(f"{name}() needs at least one quantity")
    return normalize(pick(values, key=parse))


def format_quantity(value: Fraction | int, resource: str = "") -> str:
    """A compact spelling for display: memory in the largest whole binary unit, CPUs as cores or millicores."""
    value = Fraction(value)
    if resource == "memory" and value.denominator == 1:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            factor = _SUFFIXES[suffix]
            if value >= factor and value % factor == 0:
                return f"{value // factor}{suffix}"
    return format_fraction(value)
