"""interlink-nats: run Kubernetes pods on remote batch sites through NATS, governed by Kueue.

Subpackages (each folder at the repository's top level is one of them):
- ``interlink_nats.gen``: generated protobuf contracts (never edited by hand).
- ``interlink_nats.services``: RPC over NATS, the gateway, pod → script building.
- ``interlink_nats.submitters``: the submitter runtime and one module per backend.
- ``interlink_nats.controller``: kueue-nats, MasterQueue → Kueue objects.
"""

import re
from importlib.metadata import PackageNotFoundError, version

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
)
UNKNOWN_VERSION = "0.0.0+unknown"


def semver(raw: str | None) -> str:
    """A version NATS micro accepts (``$SRV.INFO`` needs semver); other PEP 440 forms become build metadata."""
    if raw and _SEMVER.fullmatch(raw):
        return raw
    if not raw:
        return UNKNOWN_VERSION
    return "0.0.0+" + ".".join(part for part in re.split(r"[^0-9A-Za-z-]+", raw) if part)


def installed_version(distribution: str = "interlink-nats") -> str:
    """The installed package's version as semver; ``0.0.0+unknown`` from a bare checkout (no metadata)."""
    try:
        return semver(version(distribution))
    except PackageNotFoundError:
        return UNKNOWN_VERSION


__version__ = installed_version()
