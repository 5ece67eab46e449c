"""Site policy by pod namespace: which rule of a site's table applies to a pod, and who pays for it.

Pure (no I/O), shared by backends: the htcondor backend maps a namespace to ``accounting_group`` /
``accounting_group_user``; the same table shape serves a Slurm ``--account`` or a runAsUser policy.

A table maps namespace keys to rules. A key is an exact namespace name or a shell-style pattern
(``*``, ``?``, ``[...]``, matched with :func:`fnmatch.fnmatchcase`). An exact name wins over every
pattern; among patterns the first one written wins; no match gives the table's default.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

T = TypeVar("T")

_PATTERN_CHARS = frozenset("*?[")
_KEY = re.compile(r"^[a-z0-9*?\[\]!-]{1,63}$")
ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}$")
"""An accounting group or user: letters, digits, ``_ . @ -`` (HTCondor groups nest with dots). Nothing a
batch system's own language could read as more than a name (no ``$``, quotes, spaces or backslashes)."""


class PolicyError(ValueError):
    """A pod asked for what the site's policy does not allow (the message names the field)."""


def is_pattern(key: str) -> bool:
    return any(c in _PATTERN_CHARS for c in key)


def check_key(key: str) -> str:
    """A table key: a namespace name (RFC 1123 label) or a pattern of one; a clear error otherwise."""
    if not _KEY.match(key):
        raise ValueError(f"namespace key {key!r} is neither a namespace name nor a pattern of one")
    return key


def match_namespace(table: Mapping[str, T], namespace: str, default: T) -> T:
    """The rule for ``namespace``: its exact key, else the first matching pattern, else ``default``."""
    exact = table.get(namespace)
    if exact is not None and not is_pattern(namespace):
        return exact
    for key, rule in table.items():
        if is_pattern(key) and fnmatch.fnmatchcase(namespace, key):
            return rule
    return default


@dataclass(frozen=True, slots=True)
class Account:
    """Who pays for a pod's job: the site's choice, and which of the two a pod may choose itself."""

    group: str = ""
    user: str = ""
    pod_may_set_group: bool = False
    pod_may_set_user: bool = False

    def __post_init__(self) -> None:
        for what, value in (("group", self.group), ("user", self.user)):
            if value and not ACCOUNT_NAME.match(value):
                raise ValueError(f"accounting {what} {value!r} is not a valid name (letters, digits, _ . @ -)")


def decide_account(rule: Account, *, group: str | None = None, user: str | None = None) -> Account:
    """The account a pod's job runs under: the rule's, with what the pod asked for where the rule allows it."""
    out_group, out_user = rule.group, rule.user
    for field, asked, allowed in (("group", group, rule.pod_may_set_group), ("user", user, rule.pod_may_set_user)):
        if asked is None:
            continue
        if not allowed:
            raise PolicyError(f"accounting {field} is set by the site for this namespace; a pod may not choose it")
        if not ACCOUNT_NAME.match(asked):
            raise PolicyError(f"accounting {field} {asked!r} is not a valid name (letters, digits, _ . @ -)")
        if field == "group":
            out_group = asked
        else:
            out_user = asked
    return Account(out_group, out_user)


class AccountRule(BaseModel):
    """One row of the site's accounting table (config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = ""
    user: str = ""
    pod_may_set: frozenset[Literal["group", "user"]] = frozenset()
    """Which of the two a pod may choose itself (its flags ``accounting_group`` / ``accounting_group_user``)."""

    def account(self) -> Account:
        return Account(self.group, self.user, "group" in self.pod_may_set, "user" in self.pod_may_set)

    @field_validator("group", "user")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not ACCOUNT_NAME.match(value):
            raise ValueError(f"{value!r} is not a valid accounting name (letters, digits, _ . @ -)")
        return value


class AccountingPolicy(BaseModel):
    """Who pays, by namespace: ``namespaces`` (exact names and patterns) with a ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: AccountRule = Field(default_factory=AccountRule)
    namespaces: dict[str, AccountRule] = Field(default_factory=dict)

    @field_validator("namespaces")
    @classmethod
    def _keys(cls, value: dict[str, AccountRule]) -> dict[str, AccountRule]:
        for key in value:
            check_key(key)
        return value

    def decide(self, namespace: str, *, group: str | None = None, user: str | None = None) -> Account:
        """The account of a pod in ``namespace`` that asked for ``group``/``user`` (None: it did not)."""
        rule = match_namespace(self.namespaces, namespace, self.default)
        return decide_account(rule.account(), group=group, user=user)
