"""Site policy by pod namespace: which rule of a site's table applies to a pod, who pays for it, and whose
account it runs as.

Pure (no I/O), shared by backends: the htcondor backend maps a namespace to ``accounting_group`` /
``accounting_group_user``, the slurm backend to ``--account`` (the rule's ``group``); every backend that can
switch accounts reads the rule's ``run_as_*`` fields (:meth:`AccountingPolicy.run_as`): the account a
namespace's jobs run as, and which ``securityContext.runAsUser``/``runAsGroup`` values a pod may ask for.

A table maps namespace keys to rules. A key is an exact namespace name or a shell-style pattern
(``*``, ``?``, ``[...]``, matched with :func:`fnmatch.fnmatchcase`). An exact name wins over every
pattern; among patterns the first one written wins; no match gives the table's default. Only a namespace
Kubernetes could have (a DNS label) is matched at all: fnmatch's ``*`` matches anything (``/``, ``$``, a
newline), so ``lab-*`` would take ``lab-x/../team-b`` for one of its own; the matcher refuses such a name
itself (:class:`PolicyError`) rather than trust every caller to have checked it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from interlink_nats.kernel.names import is_dns_label
from interlink_nats.kernel.namespace_keys import check_key, is_pattern, key_matches
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

T = TypeVar("T")

ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}")
"""An accounting group or user: letters, digits, ``_ . @ -`` (HTCondor groups nest with dots). Nothing a
batch system's own language could read as more than a name (no ``$``, quotes, spaces or backslashes)."""


class PolicyError(ValueError):
    """A pod asked for what the site's policy does not allow (the message names the field)."""


DEFAULT_KEY = "default"
"""How a message names the table's default rule."""


def match_namespace_key(table: Mapping[str, T], namespace: str, default: T) -> tuple[str, T]:
    """(key, rule) for ``namespace``: its exact key, else the first matching pattern, else the default.
    PolicyError when ``namespace`` is not a DNS label (no rule applies to a name Kubernetes would refuse)."""
    if not is_dns_label(namespace):
        shown = repr(namespace[:80]) + ("..." if len(namespace) > 80 else "")
        raise PolicyError(f"namespace {shown} is not a DNS label: no site rule applies to it")
    exact = table.get(namespace)
    if exact is not None:
        return namespace, exact
    for key, rule in table.items():
        if is_pattern(key) and key_matches(key, namespace):
            return key, rule
    return DEFAULT_KEY, default


def match_namespace(table: Mapping[str, T], namespace: str, default: T) -> T:
    """The rule for ``namespace``: its exact key, else the first matching pattern, else ``default``."""
    return match_namespace_key(table, namespace, default)[1]


@dataclass(frozen=True, slots=True)
class Account:
    """Who pays for a pod's job: the site's choice, and which of the two a pod may choose itself."""

    group: str = ""
    user: str = ""
    pod_may_set_group: bool = False
    pod_may_set_user: bool = False

    def __post_init__(self) -> None:
        for what, value in (("group", self.group), ("user", self.user)):
            if value and not ACCOUNT_NAME.fullmatch(value):
                raise ValueError(f"accounting {what} {value!r} is not a valid name (letters, digits, _ . @ -)")


def decide_account(rule: Account, *, group: str | None = None, user: str | None = None) -> Account:
    """The account a pod's job runs under: the rule's, with what the pod asked for where the rule allows it."""
    out_group, out_user = rule.group, rule.user
    for field, asked, allowed in (("group", group, rule.pod_may_set_group), ("user", user, rule.pod_may_set_user)):
        if asked is None:
            continue
        if not allowed:
            raise PolicyError(f"accounting {field} is set by the site for this namespace; a pod may not choose it")
        if not ACCOUNT_NAME.fullmatch(asked):
            raise PolicyError(f"accounting {field} {asked!r} is not a valid name (letters, digits, _ . @ -)")
        if field == "group":
            out_group = asked
        else:
            out_user = asked
    return Account(out_group, out_user)


IdRanges = tuple[tuple[int, int], ...]
"""Numeric ids a pod may ask for: inclusive (low, high) ranges."""
_ID_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
ID_MAX = 2**32 - 2
"""The largest uid/gid Linux has (2**32-1 is ``(uid_t) -1``, "no change")."""


def parse_ids(value: object) -> IdRanges:
    """``[1000, "2000-2999"]`` (or one such item) → ranges. Root (0) is never inside a range: a site that
    means to let pods run as root lists ``0`` on its own, so that ``0-65535`` cannot say it by accident."""
    items = value if isinstance(value, list | tuple) else [value]
    out: list[tuple[int, int]] = []
    for item in items:
        m = (
            _ID_RANGE.fullmatch(str(item).strip())
            if isinstance(item, int | str) and not isinstance(item, bool)
            else None
        )
        if m is None:
            raise ValueError(f"{item!r} is neither an id nor a range 'low-high'")
        low = int(m[1])
        high = int(m[2]) if m[2] is not None else low
        if not low <= high <= ID_MAX:
            raise ValueError(f"{item!r}: a range goes from low to high, at most {ID_MAX}")
        if low == 0 and high > 0:
            raise ValueError(f"{item!r} includes root (0): list 0 on its own if pods may run as root")
        out.append((low, high))
    return tuple(out)


def describe_ids(ranges: IdRanges) -> str:
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges) or "none"


def ids_allow(ranges: IdRanges, value: int) -> bool:
    return any(lo <= value <= hi for lo, hi in ranges)


@dataclass(frozen=True, slots=True)
class RunAs:
    """The account a job runs as, as the site's rule decided it: a name or a number, as text each;
    empty: the submitter's own user (and that user's primary group)."""

    user: str = ""
    group: str = ""


NO_SWITCH = RunAs()

ROOT_NAMES = frozenset({"root", "0"})
"""How a rule says its namespaces run as root: ``run_as_user: root`` (or ``0``), never by leaving it empty."""


def decide_run_as(
    key: str,
    namespace: str,
    rule: AccountRule,
    *,
    uid: int | None,
    gid: int | None,
) -> RunAs:
    """The account a pod in ``namespace`` runs as (``key`` names the rule that matched it): the rule's, or
    the ``securityContext`` ids the pod asked for where the rule allows them; anything else is refused."""
    user, group = rule.run_as_user, rule.run_as_group
    for field, asked, allowed in (("runAsUser", uid, rule.run_as_users), ("runAsGroup", gid, rule.run_as_groups)):
        if asked is None:
            continue
        if not ids_allow(allowed, asked):
            raise PolicyError(
                f"securityContext.{field}: {asked} is not allowed in namespace {namespace!r} "
                f"(site rule {key!r} allows {field} {describe_ids(allowed)})"
            )
        if field == "runAsUser":
            user = str(asked)
        else:
            group = str(asked)
    return RunAs(user, group)


class AccountRule(BaseModel):
    """One row of the site's accounting table (config): who pays, and whose account the jobs run as."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = ""
    """HTCondor ``accounting_group``; Slurm ``--account``."""
    user: str = ""
    """HTCondor ``accounting_group_user``."""
    pod_may_set: frozenset[Literal["group", "user"]] = frozenset()
    """Which of the two a pod may choose itself (its flags ``accounting_group`` / ``accounting_group_user``,
    Slurm ``--account``)."""
    run_as_user: str = ""
    """The account (name or uid) the namespace's jobs run as; empty: the submitter's own, except on a root
    submitter whose table switches accounts, which then refuses the job (root only when a rule says ``root``)."""
    run_as_group: str = ""
    """Its group (name or gid); empty: the account's primary group."""
    run_as_users: IdRanges = ()
    """``securityContext.runAsUser`` values a pod may ask for (ids and ``low-high`` ranges); none by default."""
    run_as_groups: IdRanges = ()
    """``securityContext.runAsGroup`` values a pod may ask for."""

    def account(self) -> Account:
        return Account(self.group, self.user, "group" in self.pod_may_set, "user" in self.pod_may_set)

    @field_validator("group", "user", "run_as_user", "run_as_group")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        """Who pays and whom a job runs as: both are names a batch command receives, in one safe alphabet."""
        if value and not ACCOUNT_NAME.fullmatch(value):
            what = "account" if info.field_name in ("run_as_user", "run_as_group") else "accounting"
            raise ValueError(f"{value!r} is not a valid {what} name (letters, digits, _ . @ -)")
        return value

    @field_validator("run_as_users", "run_as_groups", mode="before")
    @classmethod
    def _ids(cls, value: object) -> IdRanges:
        return parse_ids(value)


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

    def run_as(self, namespace: str, *, uid: int | None = None, gid: int | None = None) -> RunAs:
        """The account a pod in ``namespace`` that asked for ``runAsUser``/``runAsGroup`` runs as."""
        return self.run_as_rule(namespace, uid=uid, gid=gid)[1]

    def run_as_rule(self, namespace: str, *, uid: int | None = None, gid: int | None = None) -> tuple[str, RunAs]:
        """:meth:`run_as` with the key of the rule that decided it (``default`` for the default)."""
        key, rule = match_namespace_key(self.namespaces, namespace, self.default)
        return key, decide_run_as(key, namespace, rule, uid=uid, gid=gid)

    def rules_without_user(self) -> list[str]:
        """Keys of the rules that name no account to run as (``run_as_user`` empty): a root submitter whose
        table switches accounts refuses their pods, unless a pod asks for an id its rule allows."""
        return [key for key, rule in self._rules() if not rule.run_as_user]

    def rules_as_root(self) -> list[str]:
        """Keys of the rules that say root out loud: ``run_as_user: root`` (or ``0``), or ``0`` among the ids a pod
        may ask for."""
        return [k for k, r in self._rules() if r.run_as_user in ROOT_NAMES or ids_allow(r.run_as_users, 0)]

    def _rules(self) -> list[tuple[str, AccountRule]]:
        """Every rule with its key, the default first (a namespace may be called ``default`` too)."""
        return [(DEFAULT_KEY, self.default), *self.namespaces.items()]

    @property
    def switches_accounts(self) -> bool:
        """Whether some rule runs jobs as another account, or lets pods ask for one."""
        rules = (self.default, *self.namespaces.values())
        return any(r.run_as_user or r.run_as_group or r.run_as_users or r.run_as_groups for r in rules)
