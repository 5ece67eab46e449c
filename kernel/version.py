"""The installed interlink-nats version, for the processes that announce it (RPC discovery, BuildConfig).

Always semver: NATS micro's ``$SRV.INFO`` requires it, also from a bare checkout (no package metadata).
"""

import re
from importlib.metadata import PackageNotFoundError, version

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
)
UNKNOWN_VERSION = "0.0.0+unknown"


def semver(raw: str | None) -> str:
    """``raw`` if it is semver; other PEP 440 forms (``0.1.dev3+gabc``) become build metadata of 0.0.0."""
    if raw and _SEMVER.fullmatch(raw):
        return raw
    if not raw:
        return UNKNOWN_VERSION
    return "0.0.0+" + ".".join(part for part in re.split(r"[^0-9A-Za-z-]+", raw) if part)


def installed_version(distribution: str = "interlink-nats") -> str:
    """The installed package's version as semver; ``0.0.0+unknown`` without package metadata."""
    try:
        return semver(version(distribution))
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def release_version(distribution: str = "interlink-nats") -> str:
    """The version as built (PEP 440, from the git tag: ``0.2.0``, ``0.2.1.dev3+gabc1234``), for people."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown (not installed: run from a source tree)"


__version__ = installed_version()
