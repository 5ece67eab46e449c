"""Level 1: every submit description the htcondor backend writes, parsed back by the REAL ``htcondor2.Submit``.

Each value is compared after the real parser's own macro expansion (``Submit.expand``): what a pod or a site
path says comes back literally — ``$(Cluster)``, quotes, backslashes — or the description is refused with one
line naming the field. No line may swallow another (a trailing ``\\`` joins the next line).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from htcondor_bindings import classad2_fixture, htcondor2_fixture  # noqa: F401 (the fixtures)
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.htcondor.backend import HTCondorConfig
from interlink_nats.submitters.core.backend import JobSpec
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from pydantic import ValidationError

pytestmark = pytest.mark.htcondor

UID = "0b8f2c1e-5d7a-4a7e-9a51-3f0f7f0c2d11"
HOSTILE = ["$(Cluster)", "$ENV(HOME)", 'say "hi"', "ends\\", "back\\slash", "$RANDOM_CHOICE(a,b)", "it's", "a $ b"]


SITE_KEYS = {f.name for f in dataclasses.fields(hs.SubmitSite)}


def job(**kw: Any) -> tuple[JobSpec, hs.SubmitSite]:
    """A pod's job and the site's part of its description: ``kw`` sets either's fields (``pod_commands``: the
    pod's backend flags)."""
    site: dict[str, Any] = {"pool": "grid", **{k: v for k, v in kw.items() if k in SITE_KEYS}}
    spec: dict[str, Any] = {"uid": UID, "job_dir": "/state/jobs/" + UID, "namespace": "ns", "name": "p"}
    spec.update({k: v for k, v in kw.items() if k not in SITE_KEYS})
    spec["backend_flags"] = tuple(spec.pop("pod_commands", ()))
    spec["job_dir"] = Path(spec["job_dir"])
    return JobSpec(script=spec["job_dir"] / "job.sh", **spec), hs.SubmitSite(**site)


def expanded(htcondor2: ModuleType, text: str) -> dict[str, str]:
    """Every command as condor_submit reads it: parsed, then macro-expanded, by the real bindings. The keys
    must be exactly the lines written (``+X`` is ``MY.X``): a swallowed line would be missing."""
    sub = htcondor2.Submit(text)
    written = [m.group(1) for m in re.finditer(r"^([+\w.]+) = ", text, re.MULTILINE)]
    assert sorted(sub.keys()) == sorted("MY." + k[1:] if k.startswith("+") else k for k in written)
    return {k: sub.expand(k) for k in sub}


def test_resources_become_request_commands_in_htcondor_units(htcondor2: ModuleType) -> None:
    req = pb.ResourceRequest(cpu_millis=2500, memory_bytes=100 * 2**20 + 1, gpus=2)
    cmds = expanded(htcondor2, hs.submit_description(*job(resources=req, request_disk="2GB")))
    assert cmds["universe"] == "vanilla"
    assert cmds["request_cpus"] == "3"  # rounded up
    assert cmds["request_memory"] == "101"  # MB (HTCondor's unit), rounded up: never bytes
    assert cmds["request_gpus"] == "2"
    assert cmds["request_disk"] == "2GB"
    assert cmds["MY.InterlinkPodUID"] == f'"{UID}"'
    assert cmds["MY.InterlinkPool"] == '"grid"'
    assert cmds["MY.JobBatchName"] == '"ns/p"'
    assert cmds["executable"] == "job.sh"
    assert cmds["initialdir"] == "/state/jobs/" + UID
    small = expanded(htcondor2, hs.submit_description(*job(resources=pb.ResourceRequest(memory_bytes=64 * 2**20))))
    assert small["request_memory"] == "64"


def test_local_mode_runs_in_place_with_periodic_remove(htcondor2: ModuleType, classad2: ModuleType) -> None:
    req = pb.ResourceRequest(cpu_millis=4000, memory_bytes=8 * 2**30, wall_time=dt.timedelta(seconds=30))
    cmds = expanded(htcondor2, hs.submit_description(*job(resources=req, time_limit_margin=15)))
    assert cmds["should_transfer_files"] == "NO"
    assert cmds["environment"] == f"\"INTERLINK_JOB_DIR='/state/jobs/{UID}'\""
    assert "transfer_output_files" not in cmds
    assert not {"MY.maxMemory", "MY.xcount", "MY.maxWallTime"} & cmds.keys(), "a local schedd has no router"
    assert cmds[f"MY.{hp.TIME_LIMIT_ATTR}"] == "45"
    expr = classad2.ExprTree(cmds["periodic_remove"])
    now = int(__import__("time").time())

    def ad(status: int, ran: int) -> Any:
        return classad2.ClassAd({"JobStatus": status, "JobCurrentStartDate": now - ran, hp.TIME_LIMIT_ATTR: 45})

    assert expr.eval(ad(2, 100)) is True
    assert expr.eval(ad(2, 10)) is False
    assert expr.eval(ad(1, 100)) is False
    assert "periodic_remove" not in expanded(htcondor2, hs.submit_description(*job()))


def test_remote_mode_spools_and_writes_the_ce_routers_attributes(htcondor2: ModuleType) -> None:
    """htcondor-ce config/01-ce-router-defaults.conf: RequestMemory from maxMemory (else 2000), RequestCpus from
    xcount, BatchRuntime from maxWallTime (minutes, else ROUTED_JOB_MAX_TIME); PeriodicRemove deleted."""
    req = pb.ResourceRequest(cpu_millis=4000, memory_bytes=8 * 2**30, wall_time=dt.timedelta(seconds=61))
    cmds = expanded(htcondor2, hs.submit_description(*job(spool=True, resources=req, time_limit_margin=60)))
    assert cmds["should_transfer_files"] == "YES"
    assert cmds["transfer_output_files"] == "containers", "only containers/ (the deadline marker is inside it)"
    assert cmds["when_to_transfer_output"] == "ON_EXIT_OR_EVICT"
    assert "environment" not in cmds
    assert (cmds["request_memory"], cmds["MY.maxMemory"]) == ("8192", "8192")
    assert (cmds["request_cpus"], cmds["MY.xcount"]) == ("4", "4")
    assert cmds["MY.maxWallTime"] == "3", "121 s is 3 minutes, rounded up"
    assert "periodic_remove" not in cmds, "a CE's router deletes it; maxWallTime does its work there"
    # A pod that asks through its flags (with a unit) gets the same at a CE.
    flags = expanded(htcondor2, hs.submit_description(*job(spool=True, pod_commands=["request_memory=8GB"])))
    assert flags["MY.maxMemory"] == "8192"
    assert "MY.maxWallTime" not in flags, "no deadline: the CE's own ROUTED_JOB_MAX_TIME applies"


@pytest.mark.parametrize("value", HOSTILE)
def test_names_and_paths_from_outside_come_back_literally(
    htcondor2: ModuleType, classad2: ModuleType, value: str
) -> None:
    base = "/state/jobs/" + value.replace("\\", "_")  # a path with a trailing backslash is refused below
    for spool in (False, True):
        text = hs.submit_description(*job(namespace=value, name=value, uid=value, job_dir=base, spool=spool))
        cmds = expanded(htcondor2, text)
        assert classad2.ExprTree(cmds["MY.JobBatchName"]).eval() == f"{value}/{value}"
        assert classad2.ExprTree(cmds["MY.InterlinkPodUID"]).eval() == value
        assert cmds["initialdir"] == base
        if not spool:
            env = cmds["environment"][1:-1].replace('""', '"')
            assert env == f"INTERLINK_JOB_DIR='{base.replace(chr(39), chr(39) * 2)}'"


@pytest.mark.parametrize(
    ("where", "flags", "site", "field"),
    [
        ("pod", ["request_disk=10 \\", "request_cpus=4"], {}, "'request_disk' ends in a backslash"),
        ("pod", ["requirements=true \\  "], {}, "'requirements' ends in a backslash"),
        ("pod", ["requirements=$(Cluster) > 0"], {}, r"'requirements' may not use \$ macros"),
        ("pod", ['rank="$$(Memory)"'], {}, r"'rank' may not use \$ macros"),
        ("pod", ["request_memory=8Gi"], {}, "'request_memory': '8Gi' is not a quantity"),
        ("pod", ["request_disk=lots"], {}, "'request_disk': 'lots' is not a quantity"),
        ("pod", ["request_cpus=2*2"], {}, "'request_cpus': '2\\*2' is not a whole number"),
        ("site", [], {"requirements": "true \\"}, "site submit command 'requirements' ends in a backslash"),
        ("site", [], {"+Project": '"a"\nqueue 5'}, "control character"),
    ],
)
def test_values_that_would_bend_the_description_are_refused_naming_the_field(
    where: str, flags: list[str], site: dict[str, str], field: str
) -> None:
    with pytest.raises(hs.SubmitCommandError, match=field):
        hs.submit_description(*job(pod_commands=flags, site_commands=site))


def test_paths_and_names_that_cannot_be_written_are_refused() -> None:
    with pytest.raises(hs.SubmitCommandError, match="job directory ends in a backslash"):
        hs.submit_description(*job(job_dir="/state/jobs/x\\"))
    with pytest.raises(hs.SubmitCommandError, match=r"pod name: .*control character"):
        hs.submit_description(*job(name="a\nqueue 9"))
    # The expander rescans after each $(DOLLAR) and skips $$(: these have no literal form.
    for value in ("a$(DOLLAR)b", "$$(Memory)", "x$$", "$( dollar )"):
        with pytest.raises(hs.SubmitCommandError, match=r"pod name contains \$\$ or \$\(DOLLAR\)"):
            hs.submit_description(*job(name=value))
        with pytest.raises(hs.SubmitCommandError, match=r"job directory contains \$\$ or \$\(DOLLAR\)"):
            hs.submit_description(*job(job_dir="/jobs/" + value))
    with pytest.raises(hs.SubmitCommandError, match="site request_disk 'lots' is not a quantity"):
        hs.submit_description(*job(request_disk="lots"))
    with pytest.raises(ValidationError, match="request_disk 'ten' is not a quantity"):
        HTCondorConfig(request_disk="ten")
    assert HTCondorConfig(request_disk="2 GB").request_disk == "2 GB"


def test_site_commands_are_added_and_reserved_ones_refused_by_name(htcondor2: ModuleType) -> None:
    site = {"+ProjectName": '"atlas"', "requirements": '(OpSysAndVer == "AlmaLinux9")', "accounting_group": "grid"}
    cmds = expanded(htcondor2, hs.submit_description(*job(site_commands=site)))
    assert cmds["MY.ProjectName"] == '"atlas"'
    assert cmds["requirements"] == '(OpSysAndVer == "AlmaLinux9")'
    for bad in ("executable", "+InterlinkPodUID", "MY.InterlinkPool", "transfer_output_files", "queue"):
        with pytest.raises(hs.SubmitCommandError, match=bad.replace("+", r"\+")):
            hs.submit_description(*job(site_commands={bad: "x"}))
    with pytest.raises(hs.SubmitCommandError, match="control character"):
        hs.submit_description(*job(site_commands={"requirements": "true\nexecutable = /bin/evil"}))


def test_pod_commands_are_limited_to_placement_and_resources(htcondor2: ModuleType) -> None:
    cmds = expanded(htcondor2, hs.submit_description(*job(pod_commands=['requirements=(Arch == "X86_64")'])))
    assert cmds["requirements"] == '(Arch == "X86_64")'
    with pytest.raises(hs.SubmitCommandError, match="'environment' is not allowed"):
        hs.submit_description(*job(pod_commands=["environment=A=1"]))
    with pytest.raises(hs.SubmitCommandError, match="AccountingGroup' is not allowed"):
        hs.submit_description(*job(pod_commands=['+AccountingGroup="admin"']))
    with pytest.raises(hs.SubmitCommandError, match="name=value"):
        hs.submit_description(*job(pod_commands=["--mem"]))


POLICY = AccountingPolicy.model_validate(
    {
        "default": {"group": "group_grid"},
        "namespaces": {
            "physics-*": {"group": "group_physics", "user": "physics", "pod_may_set": ["user"]},
            "physics-admin": {"group": "group_admin", "user": "admin"},
        },
    }
)


def test_who_pays_is_the_sites_table_and_a_pod_chooses_only_where_allowed(htcondor2: ModuleType) -> None:
    def account(namespace: str, *flags: str) -> tuple[str | None, str | None]:
        text = hs.submit_description(*job(namespace=namespace, accounting=POLICY, pod_commands=list(flags)))
        cmds = expanded(htcondor2, text)
        return cmds.get("accounting_group"), cmds.get("accounting_group_user")

    assert account("physics-admin") == ("group_admin", "admin"), "an exact name wins over a pattern"
    assert account("physics-lhc") == ("group_physics", "physics")
    assert account("physics-lhc", "accounting_group_user=alice") == ("group_physics", "alice")
    assert account("default-ns") == ("group_grid", None)
    with pytest.raises(hs.SubmitCommandError, match="accounting group is set by the site"):
        account("physics-lhc", "accounting_group=group_admin")
    with pytest.raises(hs.SubmitCommandError, match="accounting user is set by the site"):
        account("physics-admin", "accounting_group_user=alice")
    with pytest.raises(hs.SubmitCommandError, match=r"accounting user 'a\(Cluster\)' is not a valid name"):
        account("physics-lhc", "accounting_group_user=a(Cluster)")
    # Without a table a pod chooses nothing (the site's own submit commands still may set them).
    with pytest.raises(hs.SubmitCommandError, match="accounting is site policy"):
        hs.submit_description(*job(pod_commands=["accounting_group_user=alice"]))
