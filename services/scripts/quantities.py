"""Kubernetes resource quantities and the pod's total request (pure, works on the pod dict)."""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb

from .errors import PodRejected

GPU_RESOURCE = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
# Resources we understand; anything else would be dropped silently, so it is rejected instead.
IGNORED_RESOURCES = frozenset({"ephemeral-storage"})
KNOWN_RESOURCES = frozenset({CPU, MEMORY, GPU_RESOURCE}) | IGNORED_RESOURCES

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


@lru_cache(maxsize=1024)
def parse_quantity(text: str) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "1Gi", "1e3", 2) into a Decimal; ValueError if malformed."""
    m = _QUANTITY.match(text.strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = m.groups()
    try:
        value = Decimal(number)
        if exponent:
            value = value.scaleb(int(exponent[1:]))
    except InvalidOperation as e:  # pragma: no cover - the regex already guards this
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from e
    value *= _SUFFIXES[suffix or ""]
    if value < 0:
        raise ValueError(f"negative quantity: {text!r}")
    return value


def _quantity(raw: Any, field: str) -> Decimal:
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise PodRejected(field, f"not a quantity: {raw!r}")
    try:
        return parse_quantity(str(raw))
    except ValueError as e:
        raise PodRejected(field, str(e)) from None


def container_resources(container: dict[str, Any], field: str) -> tuple[int, int, int]:
    """(cpu millis, memory bytes, gpus) of one container: max(request, limit) per resource,
    since a limit without a request implies request = limit and the batch system must grant the larger."""
    res = container.get("resources") or {}
    cpu = mem = gpu = Decimal(0)
    for kind in ("requests", "limits"):
        values = res.get(kind) or {}
        for name, raw in values.items():
            f = f'{field}.resources.{kind}["{name}"]'
            if name not in KNOWN_RESOURCES:
                raise PodRejected(f, "unsupported resource (only cpu, memory, nvidia.com/gpu)")
            if name in IGNORED_RESOURCES:
                continue
            q = _quantity(raw, f)
            if name == CPU:
                cpu = max(cpu, q)
            elif name == MEMORY:
                mem = max(mem, q)
            else:
                if q != q.to_integral_value():
                    raise PodRejected(f, "GPU counts must be whole numbers")
                gpu = max(gpu, q)
    return math.ceil(cpu * 1000), math.ceil(mem), int(gpu)


def pod_resources(pod: dict[str, Any]) -> pb.ResourceRequest:
    """What the whole pod needs at once: main containers run concurrently (summed), init containers run
    one at a time (max), the pod needs the larger of the two; activeDeadlineSeconds becomes the wall time."""
    spec = pod.get("spec") or {}
    main = [container_resources(c, f"spec.containers[{i}]") for i, c in enumerate(spec.get("containers") or [])]
    init = [container_resources(c, f"spec.initContainers[{i}]") for i, c in enumerate(spec.get("initContainers") or [])]
    return pod_resources_from(main, init, spec)


def pod_resources_from(
    main: list[tuple[int, int, int]], init: list[tuple[int, int, int]], spec: dict[str, Any]
) -> pb.ResourceRequest:
    """pod_resources from per-container figures already computed (the renderer has them)."""
    summed = [sum(c[k] for c in main) for k in range(3)]
    peak = [max((c[k] for c in init), default=0) for k in range(3)]
    total = [max(a, b) for a, b in zip(summed, peak, strict=True)]
    if spec.get("resources"):  # pod-level resources (Kubernetes >= 1.32) bound the whole pod
        pod_level = container_resources(spec, "spec")
        total = [p if p else t for p, t in zip(pod_level, total, strict=True)]
    req = pb.ResourceRequest(cpu_millis=total[0], memory_bytes=total[1], gpus=total[2])
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        if isinstance(deadline, bool) or not isinstance(deadline, int) or deadline <= 0:
            raise PodRejected("spec.activeDeadlineSeconds", "must be a positive integer")
        req.wall_time = datetime.timedelta(seconds=deadline)
    return req
