"""The pure reconcile: unit cases, property tests, and every output checked against Kueue's CRDs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interlink_nats.controller import model, offline, reconcile
from interlink_nats.controller.cli import InvalidManifest, app
from interlink_nats.kernel import quantities
from kueue_validation import assert_valid, validation_errors
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_MQ = ROOT / "deploy" / "examples" / "masterqueue.yaml"
EXAMPLE_REPORTS = ROOT / "deploy" / "examples" / "reports.json"
SOURCE = model.NatsSource(model.DEFAULT_NATS_CONNECTOR, model.DEFAULT_NATS_SUBJECT)


def mq_body(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "vk.io/v1",
        "kind": "MasterQueue",
        "metadata": {"name": "mq", "uid": "uid-1"},
        "spec": {
            "template": {"cohort": "co"},
            "flavors": [
                {
                    "name": "hpc",
                    "natsFlavor": {"virtualNode": "vk", "poolRegExp": "^p", "poolTimeout": 10},
                    "nominalQuota": {"cpu": "100", "memory": "1Ti"},
                    "canLendTo": [{"queue": "borrower", "lendingLimit": {"cpu": "8"}}],
                }
            ],
        },
    }
    base["spec"].update(spec)
    return base


def report(pool: str, received_at: float = 1000.0, **capacity: str) -> model.PoolReport:
    return model.PoolReport(pool=pool, capacity=capacity or {"cpu": "64", "memory": "256Gi"}, received_at=received_at)


def by_kind(desired: reconcile.Desired) -> tuple[dict[str, dict], dict[str, dict]]:
    return (
        {f["metadata"]["name"]: f for f in desired.flavors},
        {q["metadata"]["name"]: q for q in desired.cluster_queues},
    )


def test_one_flavor_per_pool_pinned_to_the_virtual_node_with_the_pool_toleration() -> None:
    mq = model.parse_masterqueue(mq_body())
    desired = reconcile.reconcile(mq, {SOURCE: {"p1": report("p1"), "x": report("x")}})
    flavors, _ = by_kind(desired)
    assert list(flavors) == ["mq-hpc-p1"]
    spec = flavors["mq-hpc-p1"]["spec"]
    assert spec["nodeLabels"] == {"kubernetes.io/hostname": "vk"}
    no_schedule = {"key": "virtual-node.interlink/no-schedule", "value": "true", "effect": "NoSchedule"}
    assert spec["nodeTaints"][0] == no_schedule
    assert spec["tolerations"] == [{"key": "pool.vk.io", "operator": "Equal", "value": "p1", "effect": "NoSchedule"}]
    assert flavors["mq-hpc-p1"]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_master_quota_is_min_of_reported_and_nominal_and_lender_limit_is_set() -> None:
    mq = model.parse_masterqueue(mq_body(coveredResources=["cpu", "memory", "example.com/fpga"]))
    desired = reconcile.reconcile(mq, {SOURCE: {"p1": report("p1", cpu="500", memory="2Gi")}})
    _, queues = by_kind(desired)
    master = queues["mq"]["spec"]
    assert master["cohortName"] == "co"
    group = master["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "example.com/fpga"]
    assert group["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "100", "lendingLimit": "8"},
        {"name": "memory", "nominalQuota": "2Gi", "lendingLimit": "2Gi"},
        {"name": "example.com/fpga", "nominalQuota": "0", "lendingLimit": "0"},
    ]
    borrower = queues["borrower"]["spec"]
    assert borrower["cohortName"] == "co"
    assert borrower["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "cpu",
        "nominalQuota": "0",
        "borrowingLimit": "8",
    }


def test_timed_out_pool_leaves_the_queues_but_keeps_its_flavor_until_retention_ends() -> None:
    mq = model.parse_masterqueue(mq_body())
    reports = {SOURCE: {"p1": report("p1", received_at=1000.0), "p2": report("p2", received_at=1015.0)}}
    at_20 = reconcile.reconcile(mq, reports, now=1020.0)
    flavors, queues = by_kind(at_20)
    assert set(flavors) == {"mq-hpc-p1", "mq-hpc-p2"}
    assert [f["name"] for f in queues["mq"]["spec"]["resourceGroups"][0]["flavors"]] == ["mq-hpc-p2"]
    assert {p.pool: p.state for p in at_20.pools} == {"p1": "TimedOut", "p2": "Live"}
    later = reconcile.reconcile(mq, reports, now=1015.0 + 10 + model.DEFAULT_FLAVOR_RETENTION + 1)
    assert later.flavors == []
    assert later.cluster_queues[0]["spec"]["resourceGroups"] == []


def test_explicit_pools_keep_their_order_and_regexp_pools_are_sorted() -> None:
    body = mq_body()
    body["spec"]["flavors"][0]["natsFlavor"] = {"pools": ["zeta", "alpha"]}
    desired = reconcile.reconcile(
        model.parse_masterqueue(body), {SOURCE: {p: report(p) for p in ("alpha", "zeta", "other")}}
    )
    assert [f["name"] for f in desired.cluster_queues[0]["spec"]["resourceGroups"][0]["flavors"]] == [
        "mq-hpc-zeta",
        "mq-hpc-alpha",
    ]


def test_more_than_64_pools_are_excluded_with_a_warning() -> None:
    mq = model.parse_masterqueue(mq_body())
    desired = reconcile.reconcile(mq, {SOURCE: {f"p{i:03}": report(f"p{i:03}") for i in range(70)}})
    assert len(desired.flavors) == 64
    assert sum(p.state == "Excluded" for p in desired.pools) == 6
    assert desired.warnings
    for obj in desired.objects():
        assert_valid(obj)


def test_v1beta1_uses_cohort_and_legacy_template_values_are_translated() -> None:
    body = mq_body(
        template={
            "cohort": "co",
            "stopPolicy": "StopAndHold",
            "admissionChecks": ["prov"],
            "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
        }
    )
    mq = model.parse_masterqueue(body)
    beta1 = reconcile.reconcile(mq, {SOURCE: {"p1": report("p1")}}, "v1beta1")
    beta2 = reconcile.reconcile(mq, {SOURCE: {"p1": report("p1")}}, "v1beta2")
    s1, s2 = beta1.cluster_queues[0]["spec"], beta2.cluster_queues[0]["spec"]
    assert (s1["cohort"], s1.get("cohortName"), s1["admissionChecks"]) == ("co", None, ["prov"])
    assert (s2["cohortName"], s2.get("cohort")) == ("co", None)
    assert s2["admissionChecksStrategy"] == {"admissionChecks": [{"name": "prov"}]}
    assert s2["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"
    assert s1["stopPolicy"] == s2["stopPolicy"] == "HoldAndDrain"
    for obj in beta1.objects() + beta2.objects():
        assert_valid(obj)


def test_invalid_masterqueue_reports_every_problem_with_its_path() -> None:
    body = mq_body(template={})
    body["spec"]["flavors"].append({"name": "bad", "localFlavor": {}, "natsFlavor": {"poolRegExp": "("}})
    with pytest.raises(model.MasterQueueError) as err:
        model.parse_masterqueue(body)
    text = str(err.value)
    assert "spec.template.cohort" in text
    assert "spec.flavors[1]: set exactly one" in text
    assert "poolRegExp" in text


def test_reported_labels_and_taints_are_kept_only_when_valid() -> None:
    mq = model.parse_masterqueue(mq_body())
    rep = model.PoolReport(
        pool="p1",
        capacity={"cpu": "1"},
        received_at=0,
        labels={"site": "infn", "bad label": "x", "gpu": "True", "nl": "v\n", "k\n": "v"},
        taints=(model.Taint("maint", "yes", "NoSchedule"), model.Taint("x", "y", "Sometimes")),
    )
    desired = reconcile.reconcile(mq, {SOURCE: {"p1": rep}})
    rf = desired.flavors[0]
    assert rf["metadata"]["labels"]["site"] == "infn"
    assert "bad label" not in rf["metadata"]["labels"]
    assert "nl" not in rf["metadata"]["labels"] and "k\n" not in rf["metadata"]["labels"]  # '$' let both through
    assert {"key": "maint", "value": "yes", "effect": "NoSchedule"} in rf["spec"]["nodeTaints"]
    assert len(rf["spec"]["nodeTaints"]) == 2
    assert_valid(rf)


# -- validator sanity: it must catch what a real API server + webhook would reject --------------------


def test_validator_rejects_unknown_fields_and_webhook_rules() -> None:
    mq = model.parse_masterqueue(mq_body())
    queue = reconcile.reconcile(mq, {SOURCE: {"p1": report("p1")}}).cluster_queues[0]
    bad = copy.deepcopy(queue)
    bad["spec"]["cohort"] = "co"  # v1beta1 name in a v1beta2 object
    assert any("cohort" in e for e in validation_errors(bad))
    bad = copy.deepcopy(queue)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"].reverse()
    assert validation_errors(bad)
    bad = copy.deepcopy(queue)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = "1000"
    assert any("lendingLimit > nominalQuota" in e for e in validation_errors(bad))
    bad = copy.deepcopy(queue)
    del bad["spec"]["cohortName"]
    assert any("needs a cohort" in e for e in validation_errors(bad))


# -- property tests ------------------------------------------------------------------------------------

RESOURCE_NAMES = ["cpu", "memory", "pods", "nvidia.com/gpu", "example.com/fpga", "ephemeral-storage"]
quantity_texts = st.one_of(
    st.integers(0, 10**6).map(str),
    st.builds(lambda n, s: f"{n}{s}", st.integers(0, 4096), st.sampled_from(["Ki", "Mi", "Gi", "Ti", "m", "k", "M"])),
)
pool_names = st.from_regex(r"^[a-z][a-z0-9]{0,6}$", fullmatch=True)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], dict[model.NatsSource, dict[str, model.PoolReport]], float]:
    covered = draw(st.lists(st.sampled_from(RESOURCE_NAMES), min_size=1, max_size=5, unique=True))
    groups = []
    sources = [SOURCE, model.NatsSource("nats://other:4222", "site.resources")]
    for i in range(draw(st.integers(1, 3))):
        quota = draw(st.dictionaries(st.sampled_from(RESOURCE_NAMES), quantity_texts, max_size=4))
        lend = draw(
            st.lists(
                st.builds(
                    lambda q, limit: {"queue": q, "lendingLimit": limit},
                    st.sampled_from(["b1", "b2"]),
                    st.dictionaries(st.sampled_from(RESOURCE_NAMES), quantity_texts, max_size=3),
                ),
                max_size=2,
                unique_by=lambda d: d["queue"],
            )
        )
        if draw(st.booleans()):
            groups.append({"name": f"local{i}", "localFlavor": {}, "nominalQuota": quota, "canLendTo": lend})
        else:
            src = draw(st.sampled_from(sources))
            nats: dict[str, Any] = {"natsConnector": src.connector, "natsSubject": src.subject, "poolTimeout": 30}
            if draw(st.booleans()):
                nats["pools"] = draw(st.lists(pool_names, max_size=5, unique=True))
            else:
                nats["poolRegExp"] = draw(st.sampled_from(["", "^a", "[0-9]", "^[a-m]"]))
            groups.append({"name": f"g{i}", "natsFlavor": nats, "nominalQuota": quota, "canLendTo": lend})
    body = mq_body(coveredResources=covered, flavors=groups)
    reports = {
        src: {
            p: model.PoolReport(pool=p, capacity=cap, received_at=t)
            for p, cap, t in draw(
                st.lists(
                    st.tuples(
                        pool_names,
                        st.dictionaries(st.sampled_from(RESOURCE_NAMES), quantity_texts, max_size=5),
                        st.floats(0, 100),
                    ),
                    max_size=8,
                    unique_by=lambda x: x[0],
                )
            )
        }
        for src in sources
    }
    return body, reports, draw(st.floats(0, 200))


def _q(value: str) -> Any:
    return quantities.parse(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(reconcile.KUEUE_VERSIONS))
def test_reconcile_invariants(scenario: Any, version: str) -> None:
    body, reports, now = scenario
    mq = model.parse_masterqueue(body)
    desired = reconcile.reconcile(mq, reports, version, now=now)
    flavors = {f["metadata"]["name"] for f in desired.flavors}
    local = {g.name for g in mq.flavors if g.is_local}
    groups = {g.name: g for g in mq.flavors}
    status = {p.flavor: p for p in desired.pools}
    cohort_key = "cohortName" if version == "v1beta2" else "cohort"
    queues = {q["metadata"]["name"]: q for q in desired.cluster_queues}
    master_limits: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in desired.objects():
        assert_valid(obj)
    for name, queue in queues.items():
        spec = queue["spec"]
        assert spec[cohort_key] == "co"  # lending and borrowing stay in the MasterQueue's cohort
        for group in spec["resourceGroups"]:
            assert group["coveredResources"] == list(mq.covered_resources)
            for flavor in group["flavors"]:
                assert flavor["name"] in flavors | local  # every flavor used exists (or is the local one)
                assert [r["name"] for r in flavor["resources"]] == list(mq.covered_resources)
                for r in flavor["resources"]:
                    if name == mq.name:
                        master_limits[(flavor["name"], r["name"])] = r
                        nominal = _q(r["nominalQuota"])
                        if flavor["name"] in local:
                            assert nominal == _q(groups[flavor["name"]].nominal_quota.get(r["name"], "0"))
                        else:
                            pool = status[flavor["name"]]
                            assert pool.state == "Live"
                            assert nominal <= max(_q(pool.capacity.get(r["name"], "0")), 0)
                            cap = groups[pool.group].nominal_quota.get(r["name"])
                            if cap is not None:
                                assert nominal <= _q(cap)
                        assert _q(r["lendingLimit"]) <= nominal
                    else:
                        assert _q(r["nominalQuota"]) == 0
    for name, queue in queues.items():
        if name == mq.name:
            continue
        assert any(name == t.queue for g in mq.flavors for t in g.can_lend_to)
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    lender = master_limits[(flavor["name"], r["name"])]  # borrowers only borrow what the master lists
                    assert _q(r["borrowingLimit"]) <= _q(lender["lendingLimit"]) <= _q(lender["nominalQuota"])


@given(st.lists(quantity_texts, min_size=1, max_size=5))
def test_quantity_minimum_is_the_smallest_value(values: list[str]) -> None:
    smallest = quantities.minimum(*values)
    assert all(quantities.parse(smallest) <= quantities.parse(v) for v in values)
    assert smallest in values


def test_quantity_parsing_examples() -> None:
    assert quantities.parse("1Ki") == 1024
    assert quantities.parse("500m") * 2 == 1
    assert quantities.parse("1e3") == 1000
    assert quantities.parse("1.5Gi") == 3 * 2**29
    with pytest.raises(quantities.InvalidQuantityError):
        quantities.parse("12 apples")


# -- the render CLI on the shipped examples -------------------------------------------------------------


@pytest.mark.parametrize("version", reconcile.KUEUE_VERSIONS)
def test_render_cli_prints_valid_kueue_objects_for_the_examples(version: str) -> None:
    result = CliRunner().invoke(
        app, ["render", "--masterqueue", str(EXAMPLE_MQ), "--reports", str(EXAMPLE_REPORTS), "--kueue-api", version]
    )
    assert result.exit_code == 0, result.output
    objects = list(yaml.safe_load_all(result.stdout))
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("ResourceFlavor", "interlink-hpc-cineca-leonardo"),
        ("ResourceFlavor", "interlink-hpc-infn-cnaf"),
        ("ClusterQueue", "interlink"),
        ("ClusterQueue", "interlink-shared"),
    ]
    for obj in objects:
        assert obj["apiVersion"] == f"kueue.x-k8s.io/{version}"
        assert_valid(obj)


def test_render_rejects_an_invalid_masterqueue(tmp_path: Path) -> None:
    bad = tmp_path / "mq.yaml"
    bad.write_text(yaml.safe_dump(mq_body(template={})))
    reports = tmp_path / "r.json"
    reports.write_text(json.dumps([]))
    result = CliRunner().invoke(app, ["render", "-m", str(bad), "-r", str(reports)])
    assert isinstance(result.exception, InvalidManifest)  # the CLI's error boundary prints it: one line, exit 2
    assert result.exception.exit_code == 2
    assert "spec.template.cohort" in str(result.exception)


def test_reports_file_accepts_a_list_an_envelope_or_one_report() -> None:
    one = {"pool": "a", "capacity": {"cpu": "1"}}
    for text in (json.dumps([one]), json.dumps({"reports": [one]}), json.dumps(one)):
        assert list(offline.load_reports(text, received_at=1.0)) == ["a"]


def test_masterqueue_crd_example_fits_the_crd_schema() -> None:
    crd = yaml.safe_load((ROOT / "deploy" / "crds" / "masterqueues.vk.io.yaml").read_text())
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["mq"]
    assert version["subresources"] == {"status": {}}
    import jsonschema
    from kueue_validation import _strict

    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load(EXAMPLE_MQ.read_text()))
