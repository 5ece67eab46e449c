"""The site's namespace table (submitters/core/site_policy.py): pure, shared by backends (accounting today)."""

from __future__ import annotations

import pytest
from interlink_nats.submitters.core.site_policy import (
    Account,
    AccountingPolicy,
    PolicyError,
    decide_account,
    match_namespace,
)
from pydantic import ValidationError


def test_an_exact_name_wins_then_the_first_pattern_written_then_the_default() -> None:
    table = {"team-*": "teams", "team-a": "a", "t*": "t", "[xy]-?": "xy"}
    assert match_namespace(table, "team-a", "default") == "a"
    assert match_namespace(table, "team-b", "default") == "teams"
    assert match_namespace(table, "tools", "default") == "t"
    assert match_namespace(table, "x-1", "default") == "xy"
    assert match_namespace(table, "prod", "default") == "default"


def test_a_pod_chooses_only_what_its_rule_allows_and_only_plain_names() -> None:
    rule = Account("grid", "svc", pod_may_set_user=True)
    assert decide_account(rule) == Account("grid", "svc")
    assert decide_account(rule, user="alice") == Account("grid", "alice")
    with pytest.raises(PolicyError, match="accounting group is set by the site"):
        decide_account(rule, group="admins")
    for bad in ("a b", "$(Owner)", 'x"y', "tail\\", ""):
        with pytest.raises(PolicyError, match="not a valid name"):
            decide_account(rule, user=bad)


def test_the_site_table_is_checked_when_the_config_is_read() -> None:
    policy = AccountingPolicy.model_validate({"namespaces": {"lab-*": {"group": "lab", "pod_may_set": ["user"]}}})
    assert policy.decide("lab-1", user="bob") == Account("lab", "bob")
    with pytest.raises(ValidationError, match="neither a namespace name nor a pattern"):
        AccountingPolicy.model_validate({"namespaces": {"Bad Name": {}}})
    with pytest.raises(ValidationError, match="not a valid accounting name"):
        AccountingPolicy.model_validate({"default": {"group": "a b"}})
    with pytest.raises(ValidationError):
        AccountingPolicy.model_validate({"default": {"pod_may_set": ["owner"]}})
