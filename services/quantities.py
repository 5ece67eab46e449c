"""Kubernetes resource quantities ("500m", "2Gi", "1e3") to numbers and back, with no I/O."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


def parse_quantity_decimal(text: str | int | float) -> Decimal:
    """Exact value of a quantity; raises ValueError naming the text when it is not one."""
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the regex already checked
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None
    if exponent:
        return value * (Decimal(10) ** int(exponent[1:]))
    return value * _SUFFIXES[suffix or ""]


def parse_quantity(text: str | int | float) -> float:
    return float(parse_quantity_decimal(text))


def format_quantity(value: float, resource: str = "") -> str:
    """A compact quantity: memory in Mi/Gi when whole, CPUs as cores or millicores, counts as integers."""
    if resource == "memory":
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= factor and value % factor == 0:
                return f"{int(value // factor)}{suffix}"
        return str(int(value))
    if resource == "cpu" and value != int(value):
        return f"{round(value * 1000)}m"
    return str(int(value)) if value == int(value) else str(value)
