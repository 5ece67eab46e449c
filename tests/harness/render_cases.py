"""Small pods for the renderer's unit tests (``test_scripts_render*``): containers, interLink data, a rejection."""

from __future__ import annotations

from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_job
from storage_sites import OPEN_HOST_PATHS

RT = pb.ContainerRuntime
NONE = pb.BuildConfig(runtime=RT.NONE, storage=OPEN_HOST_PATHS)
APPTAINER = pb.BuildConfig(runtime=RT.APPTAINER, storage=OPEN_HOST_PATHS)


def ctr(name: str = "main", **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["true"], **kw}


def data(
    containers: list[dict[str, Any]] | None = None,
    *,
    volumes: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    entries: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "annotations": annotations or {}},
            "spec": {
                "containers": containers or [ctr()],
                "initContainers": init or [],
                "volumes": volumes or [],
                **spec,
            },
        },
        "container": entries or [],
    }


def rejected(d: dict[str, Any], bc: pb.BuildConfig = APPTAINER) -> PodRejected:
    with pytest.raises(PodRejected) as e:
        render_job(d, bc)
    assert e.value.field in str(e.value)
    assert isinstance(e.value, ValueError)
    return e.value
