"""Values of the wrong JSON type anywhere in a pod or in interLink's data: the renderer either renders the pod or
raises PodRejected naming a field that is in the input, never any other exception (a 500 in the gateway).

Property: take a valid pod (every feature the renderer reads: all volume kinds with and without interLink data,
env valueFrom/envFrom, downward API, annotations, resources, ...), replace a few random nested values with values of
OTHER JSON types (null, bool, int, float, string, list, object), render it for every runtime.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, pod_resources, render_job
from scripts_corpus import (
    CORPUS,
    GPU_BUILDS,
    RENDERS,
    SCALE,
    check_renders_or_names_a_field,
    field_is_in,
    mutated,
    rich_pod,
)


@pytest.mark.parametrize(("index", "bc"), [(k, bc) for k, _, bc in RENDERS], ids=[f"{k}-{n}" for k, n, _ in RENDERS])
def test_corpus_renders(index: int, bc: pb.BuildConfig) -> None:
    """The mutation property below starts from pods that render: otherwise it would test nothing."""
    render_job(copy.deepcopy(CORPUS[index]), bc)


def test_field_paths_resolve() -> None:
    d = rich_pod()
    assert field_is_in(d, 'metadata.annotations["slurm-job.vk.io/mpi-flags"]')
    assert field_is_in(d, "spec.containers[0].volumeMounts[3].mountPropagation")
    assert field_is_in(d, "container[1].configMaps[0].data")
    assert field_is_in(d, "status")
    assert field_is_in(d, "spec.containers[0].command")  # present
    assert field_is_in(d, "spec.containers[1].workingDir")  # absent but in an existing object
    assert field_is_in(d, "spec.containers[1].env.x")  # a required field of an absent object
    assert not field_is_in(d, "spec.containers[1].env[0]")
    assert not field_is_in(d, "spec.containers.name")
    assert not field_is_in(d, "spec.containers[7]")
    assert not field_is_in(d, "spec.volumes[0].configMap.name.x")
    assert not field_is_in(d, "container[9].secrets")


@settings(
    max_examples=600 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mutated(), runtime=st.sampled_from(sorted(GPU_BUILDS)), mask=st.booleans())
def test_values_of_any_json_type_render_or_are_rejected_naming_the_field(
    data: dict[str, Any], runtime: str, mask: bool
) -> None:
    check_renders_or_names_a_field(data, GPU_BUILDS[runtime], mask)


@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
def test_pod_resources_never_crashes(data: dict[str, Any]) -> None:
    if not isinstance(data.get("pod"), dict):
        return
    rejected: PodRejected | None = None
    try:
        pod_resources(data["pod"])
    except PodRejected as e:
        rejected = e
    if rejected is not None:
        assert field_is_in(data, rejected.field), rejected
