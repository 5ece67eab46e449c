"""The site's namespace table (submitters/core/site_policy.py): pure, shared by backends (accounting today)."""

from __future__ import annotations

import pytest
from interlink_nats.submitters.core.site_policy import (
    NO_SWITCH,
    Account,
    AccountingPolicy,
    PolicyError,
    RunAs,
    decide_account,
    match_namespace,
    parse_ids,
)
from pydantic import ValidationError


def test_an_exact_name_wins_then_the_first_pattern_written_then_the_default() -> None:
    table = {"team-*": "teams", "team-a": "a", "t*": "t", "[xy]-?": "xy"}
    assert match_namespace(table, "team-a", "default") == "a"
    assert match_namespace(table, "team-b", "default") == "teams"
    assert match_namespace(table, "tools", "default") == "t"
    assert match_namespace(table, "x-1", "default") == "xy"
    assert match_namespace(table, "prod", "default") == "default"


@pytest.mark.parametrize(
    "namespace", ["lab-x/../team-b", "lab-$(id)", "lab-x\nteam-b", "lab-*", "lab-" + "x" * 296, "lab-x\n"]
)
def test_a_namespace_kubernetes_would_refuse_matches_no_rule_and_is_refused(namespace: str) -> None:
    """each matched ``lab-*`` (fnmatch's ``*`` matches anything) and ran as that tenant."""
    rules = {"lab-*": {"run_as_user": "lab", "group": "lab"}}
    policy = AccountingPolicy.model_validate({"default": {"run_as_user": "nobody"}, "namespaces": rules})
    assert policy.run_as("lab-x") == RunAs("lab") and policy.decide("lab-x").group == "lab"
    for match in (
        lambda: match_namespace({"lab-*": "lab", namespace: "exact"}, namespace, "default"),
        lambda: policy.run_as(namespace),
        lambda: policy.decide(namespace),
    ):
        with pytest.raises(PolicyError, match="is not a DNS label: no site rule applies to it"):
            match()


def test_a_pod_chooses_only_what_its_rule_allows_and_only_plain_names() -> None:
    rule = Account("grid", "svc", pod_may_set_user=True)
    assert decide_account(rule) == Account("grid", "svc")
    assert decide_account(rule, user="alice") == Account("grid", "alice")
    with pytest.raises(PolicyError, match="accounting group is set by the site"):
        decide_account(rule, group="admins")
    for bad in ("a b", "$(Owner)", 'x"y', "tail\\", "", "alice\n"):  # '$' let the final newline through
        with pytest.raises(PolicyError, match="not a valid name"):
            decide_account(rule, user=bad)


def test_the_site_table_is_checked_when_the_config_is_read() -> None:
    policy = AccountingPolicy.model_validate({"namespaces": {"lab-*": {"group": "lab", "pod_may_set": ["user"]}}})
    assert policy.decide("lab-1", user="bob") == Account("lab", "bob")
    for key in ("Bad Name", "lab-*\n"):
        with pytest.raises(ValidationError, match="neither a namespace name nor a pattern"):
            AccountingPolicy.model_validate({"namespaces": {key: {}}})
    with pytest.raises(ValidationError, match="not a valid accounting name"):
        AccountingPolicy.model_validate({"default": {"group": "a b"}})
    with pytest.raises(ValidationError):
        AccountingPolicy.model_validate({"default": {"pod_may_set": ["owner"]}})


def test_run_as_ids_come_from_the_namespaces_rule_and_a_pod_asks_only_inside_it() -> None:
    policy = AccountingPolicy.model_validate(
        {
            "default": {"run_as_users": [2000, "3000-3999"]},
            "namespaces": {"team-*": {"run_as_user": "alice", "run_as_group": "lab", "run_as_groups": ["0"]}},
        }
    )
    assert policy.run_as("team-a") == RunAs("alice", "lab")
    assert policy.run_as("team-a", gid=0) == RunAs("alice", "0"), "root listed on its own is allowed"
    assert policy.run_as("other") == NO_SWITCH
    assert policy.run_as("other", uid=3500) == RunAs("3500", "")
    assert policy.switches_accounts
    for namespace, kw, words in (
        (
            "team-a",
            {"uid": 2000},
            "securityContext.runAsUser: 2000 is not allowed in namespace 'team-a' "
            "(site rule 'team-*' allows runAsUser none)",
        ),
        ("other", {"uid": 0}, "(site rule 'default' allows runAsUser 2000, 3000-3999)"),
        ("other", {"gid": 5}, "securityContext.runAsGroup: 5"),
    ):
        with pytest.raises(PolicyError) as err:
            policy.run_as(namespace, **kw)
        assert words in str(err.value)
    assert not AccountingPolicy.model_validate({"namespaces": {"a": {"group": "g"}}}).switches_accounts


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        (["0-65535"], r"includes root \(0\)"),
        (["10-5"], "from low to high"),
        ([2**32], "at most"),
        (["1000;rm"], "neither an id nor a range"),
        ([True], "neither an id nor a range"),
    ],
)
def test_id_ranges_are_checked_when_the_config_is_read(ids: list[object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        AccountingPolicy.model_validate({"default": {"run_as_users": ids}})
    assert parse_ids(["7", 9, "100-200"]) == ((7, 7), (9, 9), (100, 200))


def test_run_as_accounts_are_plain_names() -> None:
    for bad in ("a b", "$(id)", "x;y", "-rf"):
        with pytest.raises(ValidationError, match="not a valid account name"):
            AccountingPolicy.model_validate({"default": {"run_as_user": bad}})


def test_htcondor_refuses_a_policy_that_would_switch_accounts() -> None:
    from interlink_nats.submitters.backends.htcondor.backend import HTCondorConfig

    with pytest.raises(ValidationError, match="the schedd runs a job as the account that submitted it"):
        HTCondorConfig.model_validate({"accounting": {"namespaces": {"a": {"run_as_users": [1000]}}}})
    assert HTCondorConfig.model_validate({"accounting": {"default": {"group": "g"}}}).accounting is not None


def test_the_rules_that_name_no_account_and_those_that_say_root() -> None:
    policy = AccountingPolicy.model_validate(
        {
            "namespaces": {
                "default": {"run_as_user": "web"},  # a namespace named like the default rule is its own row
                "team-*": {"run_as_users": [5000]},
                "ops": {"run_as_user": "root"},
                "lab": {"run_as_user": "lab", "run_as_users": [0]},
            }
        }
    )
    assert policy.rules_without_user() == ["default", "team-*"]
    assert policy.rules_as_root() == ["ops", "lab"]
    assert policy.run_as_rule("team-a", uid=5000) == ("team-*", RunAs("5000"))
