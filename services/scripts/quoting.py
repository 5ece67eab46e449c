"""Shell quoting of pod-derived strings: every one becomes a single-quoted word (NUL rejected)."""

from __future__ import annotations

import shlex
from functools import lru_cache

from .errors import PodRejected

MASK = "***"
"""What ``render --mask-secrets`` shows instead of a secret value."""

quote = lru_cache(maxsize=8192)(shlex.quote)
"""shlex.quote, cached: pods of one workload repeat the same strings."""


def quote_field(text: str, where: str) -> str:
    """Quote one pod-derived string; NUL cannot live in a shell word, so it is rejected naming ``where``."""
    if "\x00" in text:
        raise PodRejected(where, "contains a NUL character")
    return quote(text)


@lru_cache(maxsize=1024)
def split_words(text: str) -> tuple[str, ...]:
    """shlex.split, cached: it is slow (~15 us) and annotations repeat across the pods of a workload."""
    return tuple(shlex.split(text))
