"""Validate Kueue objects the way an API server with the Kueue webhook would.

- the real v0.19.2 CRD schemas (tests/data/kueue-crds/), made strict: ``additionalProperties: false``
  wherever the schema lists properties and allows no unknown fields, so a renamed field
  (v1beta1 ``cohort`` written to v1beta2) fails instead of being pruned silently;
- the CEL rules of those schemas that matter to generated objects, re-implemented;
- the webhook-only rules from reference/kueue.md §3.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from interlink_nats.kernel import quantities

CRD_DIR = Path(__file__).resolve().parents[1] / "data" / "kueue-crds"
FILES = {"ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml", "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml"}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def schema_for(kind: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRD_DIR / FILES[kind]).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = {"type": "object"}
            return schema
    raise KeyError(f"{kind} {version} not in the CRD")


def _metadata_errors(obj: Mapping[str, Any]) -> list[str]:
    errors = []
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(f"metadata.name {name!r} is not a DNS subdomain")
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(label):
            errors.append(f"label key {key!r} invalid")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            errors.append(f"label value {value!r} invalid")
    for ref in meta.get("ownerReferences") or []:
        for field in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(field):
                errors.append(f"ownerReference without {field}")
    return errors


def _rf_rules(spec: Mapping[str, Any]) -> list[str]:
    errors = []
    for t in spec.get("nodeTaints") or []:
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(f"taint effect {t.get('effect')!r}")
    for t in spec.get("tolerations") or []:
        op = t.get("operator")
        if not t.get("key") and op != "Exists":
            errors.append("toleration with empty key needs operator Exists")
        if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
            errors.append("tolerationSeconds needs effect NoExecute")
        if op is not None and op not in ("Equal", "Exists"):
            errors.append(f"toleration operator {op!r}")
        if op == "Exists" and t.get("value"):
            errors.append("toleration value must be empty with Exists")
        if "effect" in t and t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(f"toleration effect {t['effect']!r}")
    if spec.get("topologyName") and len(spec.get("nodeLabels") or {}) < 1:
        errors.append("topologyName needs nodeLabels")
    return errors


def _cq_rules(spec: Mapping[str, Any], version: str) -> list[str]:
    errors = []
    cohort = spec.get("cohortName" if version == "v1beta2" else "cohort")
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    total_flavors = 0
    for gi, group in enumerate(spec.get("resourceGroups") or []):
        covered = list(group["coveredResources"])
        for r in covered:
            if r in seen_resources:
                errors.append(f"resource {r} in two resource groups")
            seen_resources.add(r)
        for flavor in group["flavors"]:
            total_flavors += 1
            if flavor["name"] in seen_flavors:
                errors.append(f"flavor {flavor['name']} appears twice")
            seen_flavors.add(flavor["name"])
            resources = flavor["resources"]
            if len(resources) != len(covered):  # CEL
                errors.append(f"group {gi} flavor {flavor['name']}: resources count != coveredResources")
            if [r["name"] for r in resources] != covered:  # webhook: same order
                errors.append(f"group {gi} flavor {flavor['name']}: resources not in coveredResources order")
            for r in resources:
                nominal = quantities.parse(r["nominalQuota"])
                if nominal < 0:
                    errors.append(f"{flavor['name']}/{r['name']}: negative nominalQuota")
                for limit in ("borrowingLimit", "lendingLimit"):
                    if limit in r:
                        if not cohort:
                            errors.append(f"{flavor['name']}/{r['name']}: {limit} needs a cohort")
                        if quantities.parse(r[limit]) < 0:
                            errors.append(f"{flavor['name']}/{r['name']}: negative {limit}")
                if "lendingLimit" in r and quantities.parse(r["lendingLimit"]) > nominal:
                    errors.append(f"{flavor['name']}/{r['name']}: lendingLimit > nominalQuota")
    if total_flavors > 256:
        errors.append("more than 256 flavors")
    preemption = spec.get("preemption") or {}
    if preemption.get("reclaimWithinCohort", "Never") == "Never" and (
        preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"
    ):
        errors.append("reclaimWithinCohort=Never with borrowWithinCohort")
    return errors


def validation_errors(obj: Mapping[str, Any]) -> list[str]:
    """Every reason the API server or Kueue's webhook would reject ``obj`` (empty when valid)."""
    group, _, version = obj.get("apiVersion", "").partition("/")
    kind = obj.get("kind", "")
    if group != "kueue.x-k8s.io" or kind not in FILES:
        return [f"not a Kueue ClusterQueue/ResourceFlavor: {obj.get('apiVersion')} {kind}"]
    validator = jsonschema.Draft7Validator(schema_for(kind, version))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(dict(obj))]
    errors += _metadata_errors(obj)
    if errors:
        return errors
    spec = obj.get("spec") or {}
    return _rf_rules(spec) if kind == "ResourceFlavor" else _cq_rules(spec, version)


def assert_valid(obj: Mapping[str, Any]) -> None:
    errors = validation_errors(obj)
    assert not errors, f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: {errors}"
