"""What a configuration reload (SIGHUP) does, decided without I/O: the diff of two settings.

A daemon re-reads its file on HUP and asks :func:`plan_reload` which of the changed keys it can apply while
running (``live``: a key, or a section all of whose keys are) and which need a restart (everything else:
the NATS URL, the pool, the backend, the state dir…). The thin apply step then takes :func:`merged`
(the old settings with only the live keys from the new), so a key that needs a restart keeps its old
value and the log says so, as nats-server and sshd do. Secret values are compared, never printed:
the plan holds key names only. (The credential files in use are checked again by
``nats_connection.credential_problem``: I/O, kept out of here.)
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

Settings = TypeVar("Settings", bound=BaseModel)


@dataclass(frozen=True)
class ReloadPlan:
    """The dotted keys that changed: applied now, or kept at their old value until a restart."""

    live: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()

    def summary(self) -> str:
        """The one log line's text after ``reloaded <file>: ``."""
        if not self.live and not self.restart:
            return "nothing changed"
        parts = []
        if self.live:
            parts.append(f"applied {', '.join(self.live)}")
        if self.restart:
            parts.append(f"{', '.join(self.restart)} changed but need a restart (the old values stay)")
        return "; ".join(parts)


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every field of nested models; anything else is one leaf."""
    if isinstance(value, BaseModel):
        for key in type(value).model_fields:
            yield from _leaves(getattr(value, key), f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


def changed_keys(old: BaseModel, new: BaseModel) -> list[str]:
    """The dotted keys whose values differ (a section missing on one side counts as each of its keys)."""
    before, after = dict(_leaves(old, "")), dict(_leaves(new, ""))
    keys = sorted(before.keys() | after.keys())
    return [key for key in keys if before.get(key, _MISSING) != after.get(key, _MISSING)]


_MISSING = object()


def _covering(key: str, live: Collection[str]) -> str | None:
    return next((item for item in live if key == item or key.startswith(item + ".")), None)


def plan_reload(old: BaseModel, new: BaseModel, *, live: Collection[str]) -> ReloadPlan:
    """Which changed keys ``live`` (keys or sections applied while running, each named once as given) covers,
    and which need a restart."""
    changed = changed_keys(old, new)
    applied = {key: _covering(key, live) for key in changed}
    return ReloadPlan(
        live=tuple(dict.fromkeys(item for item in applied.values() if item is not None)),
        restart=tuple(key for key, item in applied.items() if item is None),
    )


def merged(old: Settings, new: BaseModel, keys: Collection[str]) -> Settings:
    """``old`` with the values of ``keys`` (dotted) taken from ``new``; nothing else of ``new``."""
    update: dict[str, Any] = {}
    for head in {key.split(".", 1)[0] for key in keys}:
        rest = [key.split(".", 1)[1] for key in keys if key.startswith(head + ".")]
        mine, theirs = getattr(old, head), getattr(new, head)
        if rest and isinstance(mine, BaseModel) and isinstance(theirs, BaseModel) and head not in keys:
            update[head] = merged(mine, theirs, rest)
        else:
            update[head] = theirs
    return old.model_copy(update=update)


def refusal(exc: Exception) -> str:
    """Why a re-read file is refused, as one line naming the keys as the file spells them."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
    return str(exc) or type(exc).__name__
