"""A pod's HTCondor submit commands read as condor_submit reads them (case-insensitive names, ``+Attr`` is
``MY.Attr``), then a site-changeable allowlist; parsed back by the real ``htcondor2.Submit``."""

from __future__ import annotations

from types import ModuleType

import pytest
from htcondor_bindings import classad2_fixture, htcondor2_fixture  # noqa: F401 (the fixtures)
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.htcondor.backend import HTCondorConfig
from pydantic import ValidationError
from test_htcondor_submit import expanded, job


def test_names_are_compared_and_written_as_condor_submit_knows_them(htcondor2: ModuleType) -> None:
    text = hs.submit_description(*job(pod_commands=["Request_CPUs=2", "RANK = Memory"]))
    assert "request_cpus = 2\n" in text and "rank = Memory\n" in text
    cmds = expanded(htcondor2, text)
    assert cmds["request_cpus"] == "2" and cmds["rank"] == "Memory"
    for custom in ('MY.Owner="root"', '+owner="root"', 'my.AccountingGroup="admin"', "+Interlink_X=1"):
        with pytest.raises(hs.SubmitCommandError, match="is not allowed"):
            hs.submit_description(*job(pod_commands=[custom]))


def test_a_site_allows_more_by_name_and_a_custom_attribute_in_either_spelling(htcondor2: ModuleType) -> None:
    config = HTCondorConfig.model_validate({"allowed_pod_commands": ["requirements", "+Project", "MY.Site"]})
    assert config.allowed_pod_commands == {"requirements", "+project", "+site"}
    flags = ['MY.Project="lhc"', '+site="cern"', "requirements=true"]
    text = hs.submit_description(*job(pod_commands=flags, allowed_pod_commands=config.allowed_pod_commands))
    cmds = expanded(htcondor2, text)
    assert cmds["MY.project"] == '"lhc"' and cmds["MY.site"] == '"cern"' and cmds["requirements"] == "true"
    with pytest.raises(hs.SubmitCommandError, match=r"'request_cpus' is not allowed \(allowed: \+project"):
        hs.submit_description(*job(pod_commands=["request_cpus=64"], allowed_pod_commands=config.allowed_pod_commands))
    for bad, says in (
        (["executable"], "'executable' cannot be allowed"),
        (["+JobBatchName"], "'+JobBatchName' cannot be allowed"),
        (["MY.InterlinkPodUID"], "cannot be allowed"),
        (["accounting_group"], "the accounting policy sets it"),
        (["request cpus"], "is not a submit command name"),
        ("requirements", "must be a list"),
    ):
        with pytest.raises(ValidationError) as err:
            HTCondorConfig.model_validate({"allowed_pod_commands": bad})
        assert says in str(err.value) and "allowed_pod_commands" in str(err.value)
    assert HTCondorConfig().allowed_pod_commands == hs.DEFAULT_POD_COMMANDS
