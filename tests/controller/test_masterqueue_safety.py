"""MasterQueue safety: a typo never widens what a MasterQueue selects, bad reports are named in warnings.

Before: `natsFlavor: {pols: [a]}` was accepted and selected every pool; a report of `cpu: "lots"` became a
quota of 0 and a pool name that is not a DNS label was dropped, both without a word.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from interlink_nats.controller import listening, model, reconcile
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import ManualClock
from test_controller_reconcile import SOURCE, mq_body

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "masterqueues.vk.io.yaml"


def flavor_body(**nats: Any) -> dict[str, Any]:
    return mq_body(flavors=[{"name": "hpc", "natsFlavor": nats, "nominalQuota": {"cpu": "10"}}])


def test_a_typo_in_natsflavor_is_rejected_naming_the_field() -> None:
    with pytest.raises(model.MasterQueueError) as caught:
        model.parse_masterqueue(flavor_body(pols=["a"]))
    problems = "\n".join(caught.value.problems)
    assert "spec.flavors[0].natsFlavor.pols: unknown field" in problems
    assert "set pools or poolRegExp" in problems


def test_a_flavor_naming_no_pools_selects_none() -> None:
    with pytest.raises(model.MasterQueueError, match="would select every pool"):
        model.parse_masterqueue(flavor_body(virtualNode="vk"))


@pytest.mark.parametrize(
    ("where", "edit"),
    [
        ("spec.flavor", lambda b: b["spec"].__setitem__("flavor", [])),
        ("spec.flavors[0].nominalquota", lambda b: b["spec"]["flavors"][0].__setitem__("nominalquota", {})),
        (
            "spec.flavors[0].canLendTo[0].limit",
            lambda b: b["spec"]["flavors"][0]["canLendTo"][0].__setitem__("limit", 1),
        ),
    ],
)
def test_unknown_fields_at_every_level_are_rejected(where: str, edit: Any) -> None:
    body = copy.deepcopy(mq_body())
    edit(body)
    with pytest.raises(model.MasterQueueError, match=re.escape(f"{where}: unknown field")):
        model.parse_masterqueue(body)


def _crd_properties(*path: str) -> set[str]:
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = schema["properties"]["spec"]
    for step in path:
        node = node["items"] if step == "[]" else node["properties"][step]
    return set(node["properties"])


def test_the_parser_knows_exactly_the_fields_the_crd_declares() -> None:
    assert _crd_properties() == model.SPEC_FIELDS
    assert _crd_properties("flavors", "[]") == model.FLAVOR_FIELDS
    assert _crd_properties("flavors", "[]", "canLendTo", "[]") == model.LENDING_FIELDS
    assert _crd_properties("flavors", "[]", "natsFlavor") == model.NATS_FLAVOR_FIELDS
    assert _crd_properties("flavors", "[]", "natsFlavor", "natsSecretRef") == model.SECRET_REF_FIELDS
    assert _crd_properties("flavors", "[]", "natsFlavor", "capacityPolicy") == set(model.CAPACITY_POLICY_FIELDS)


def test_the_crd_requires_exactly_one_selector() -> None:
    text = CRD.read_text()
    assert "rule: has(self.pools) != has(self.poolRegExp)" in text
    assert "x-kubernetes-preserve-unknown-fields" not in text.split("natsFlavor:")[1].split("localFlavor")[0]


def test_unparsable_quantity_and_invalid_pool_name_are_warned_by_name() -> None:
    store = listening.ReportStore(clock=ManualClock(start=1000.0))
    lots = pb.ResourceReport(pool="pa", capacity={"cpu": "lots", "memory": "8Gi"})
    assert store.accept(SOURCE, bytes(lots))
    assert store.accept(SOURCE, bytes(pb.ResourceReport(pool="P_Bad", capacity={"cpu": "4"})))
    mq = model.parse_masterqueue(flavor_body(poolRegExp="^[pP]", virtualNode="vk"))
    desired = reconcile.reconcile(mq, store.view(), now=1000.0)
    assert "pool pa: reported cpu='lots' is not a Kubernetes quantity; counted as 0" in desired.warnings
    assert "pool 'P_Bad': not a DNS label; ignored" in desired.warnings
    assert [p.pool for p in desired.pools] == ["pa"]
