"""The pod shapes the create and gang benches send: the minimal pod and the one interLink sends."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb


def metadata(i: int, run: str, **extra: object) -> dict[str, object]:
    """Pod ``i`` of a run: a stable UID, so a rep's pods can be found again."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{run}/{i}"))
    return {"name": f"bench-{run}-{i}", "namespace": "bench", "uid": uid, **extra}


def pod_data(i: int, run: str, pool: str = "bench") -> dict[str, object]:
    """The minimal pod: one container, one env var, no volumes."""
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata(i, run),
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "command": ["true"], "env": [{"name": "N", "value": str(i)}]}
                ],
                "tolerations": [{"key": "pool.vk.io", "value": pool, "effect": "NoSchedule"}],
            },
        },
        "container": [{"name": "main", "configMaps": None, "secrets": None, "projectedvolumemaps": None}],
    }


def interlink_pod_data(i: int, run: str, pool: str = "bench") -> dict[str, object]:
    """A pod as interLink sends them: two containers with 15 env vars each, an emptyDir both mount, a configMap
    volume with ``items`` (its data in the ``container`` list, as interLink's ``ExportPodData`` fills it)."""

    def container(name: str, command: list[str]) -> dict[str, object]:
        env = [{"name": f"{name.upper()}_SETTING_{k}", "value": f"value-{k}-{i}"} for k in range(14)]
        env.append({"name": "POD_INDEX", "value": str(i)})
        return {
            "name": name,
            "image": "docker.io/library/busybox:1.36",
            "command": command,
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
            "volumeMounts": [
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "app-config", "mountPath": "/etc/app", "readOnly": True},
            ],
        }

    config_map = {
        "metadata": {"name": "app-config", "namespace": "bench"},
        "data": {"app.conf": "threads=4\nmode=batch\n", "logging.conf": "level=info\n", "unused": "x"},
    }
    return {
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata(i, run, labels={"app": "bench", "kueue.x-k8s.io/queue-name": "user-queue"}),
            "spec": {
                "containers": [container("main", ["true"]), container("sidecar", ["true"])],
                "volumes": [
                    {"name": "scratch", "emptyDir": {}},
                    {
                        "name": "app-config",
                        "configMap": {
                            "name": "app-config",
                            "items": [
                                {"key": "app.conf", "path": "app.conf"},
                                {"key": "logging.conf", "path": "conf.d/logging.conf"},
                            ],
                        },
                    },
                ],
                "restartPolicy": "Never",
                "tolerations": [{"key": "pool.vk.io", "value": pool, "effect": "NoSchedule"}],
            },
        },
        "container": [
            {"name": name, "configMaps": [config_map], "secrets": None, "projectedvolumemaps": None, "emptyDirs": None}
            for name in ("main", "sidecar")
        ],
    }


@dataclass(frozen=True)
class Shape:
    """A pod shape the bench measures, and the pool (its own submitter, its own runtime) it goes to."""

    name: str
    make: Callable[[int, str, str], dict[str, object]]
    runtime: pb.ContainerRuntime

    @property
    def pool(self) -> str:
        return f"bench-{self.runtime.name.lower()}"


SHAPES = {
    shape.name: shape
    for shape in (
        Shape("minimal", pod_data, pb.ContainerRuntime.NONE),
        Shape("interlink", interlink_pod_data, pb.ContainerRuntime.NONE),
        Shape("interlink-apptainer", interlink_pod_data, pb.ContainerRuntime.APPTAINER),
    )
}
