"""What every rendering step of one pod reads: the parsed pod, interLink's data, the pool's BuildConfig, the runtime."""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb

from .pod_model import Pod, PodData
from .runtimes import Runtime


@dataclass(slots=True)
class RenderContext:
    pod: Pod
    data: PodData
    bc: pb.BuildConfig
    runtime: Runtime
    mask: bool  # secrets replaced for display: the script is then not runnable

    def annotation(self, key: str) -> str | None:
        return self.pod.metadata.annotation(key)
