"""What every rendering step of one pod reads: the pod, interLink's data, the pool's BuildConfig, the runtime."""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb

from . import pod_annotations
from .runtimes import Runtime
from .sources import PodData, PodView


@dataclass(slots=True)
class RenderContext(PodView):
    data: PodData
    bc: pb.BuildConfig
    runtime: Runtime
    mask: bool  # secrets replaced for display: the script is then not runnable

    def annotation(self, key: str) -> str | None:
        return pod_annotations.value(self.annotations, key)
