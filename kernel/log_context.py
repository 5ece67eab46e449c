"""Structured log fields (pod UID, namespace, pool, job id) that follow a request through its awaits.

An edge (the gateway's HTTP handler, the submitter's RPC handler) binds the fields once with
:func:`log_fields`; every log record emitted while handling that request, in any module, carries them,
and the JSON formatter writes them as fields, so a log shipper can filter by pod without parsing text.
A ``contextvars`` variable, because asyncio copies the context into each task it starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

FIELDS = ("pod_uid", "namespace", "pod", "pool", "job_id", "masterqueue")
"""The names a formatter may write; anything else passed to log_fields is rejected (typos stay visible)."""

_current: ContextVar[dict[str, str]] = ContextVar("log_fields", default={})  # noqa: B039 - never mutated


@contextlib.contextmanager
def log_fields(**fields: str | None) -> Iterator[None]:
    """Add ``fields`` (None values are left out) to every log record emitted inside the block."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields {sorted(unknown)}; known: {FIELDS}")
    token = _current.set({**_current.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _current.reset(token)


def bind(**fields: str | None) -> None:
    """Add fields for the rest of the current task (e.g. the job id once the backend gave one)."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields {sorted(unknown)}; known: {FIELDS}")
    _current.set({**_current.get(), **{k: v for k, v in fields.items() if v}})


def current() -> dict[str, str]:
    return _current.get()
