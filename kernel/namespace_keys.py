"""How a site rule names the namespaces it applies to: an exact namespace name, or a shell-style pattern of one.

One matcher for every site table (accounts, storage): a key is ``team-a`` or ``lab-*`` (``*``, ``?``, ``[...]``,
:func:`fnmatch.fnmatchcase`); an exact key wins over every pattern, and among patterns the first one written wins.
Only a DNS label (a namespace Kubernetes could have) is ever matched: fnmatch's ``*`` matches ``/``, ``$`` or a
newline, so ``lab-*`` would otherwise take ``lab-x/../team-b`` for one of its own. Pure.
"""

from __future__ import annotations

import fnmatch
import re

from interlink_nats.kernel.names import is_dns_label

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

_PATTERN_CHARS = frozenset("*?[")
_KEY = re.compile(r"[a-z0-9*?\[\]!-]{1,63}")


def is_pattern(key: str) -> bool:
    return any(c in _PATTERN_CHARS for c in key)


def check_key(key: str) -> str:
    """A table key: a namespace name (RFC 1123 label) or a pattern of one; a clear error otherwise."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"namespace key {key!r} is neither a namespace name nor a pattern of one")
    return key


def key_matches(key: str, namespace: str) -> bool:
    """Whether ``key`` (exact or pattern) takes ``namespace``; never for a name that is not a DNS label."""
    if not is_dns_label(namespace):
        return False
    return key == namespace or (is_pattern(key) and fnmatch.fnmatchcase(namespace, key))
