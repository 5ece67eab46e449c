"""Pods and job scripts for submitter tests, rendered with the real renderer.

Kept in tests/ (not in ``submitters.testing``) because submitters must not import pod rendering:
the renderer belongs to the gateway side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job


def pod_dict(
    uid: str,
    containers: Mapping[str, str],
    *,
    init: Mapping[str, str] | None = None,
    name: str | None = None,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    active_deadline_seconds: int | None = None,
) -> dict[str, Any]:
    """A minimal Kubernetes pod whose containers run ``sh -c <command>``."""

    def container(n: str, cmd: str) -> dict[str, Any]:
        c: dict[str, Any] = {"name": n, "image": "busybox", "command": ["sh", "-c", cmd]}
        if limits:
            c["resources"] = {"limits": dict(limits)}
        return c

    spec: dict[str, Any] = {"containers": [container(n, c) for n, c in containers.items()]}
    if init:
        spec["initContainers"] = [container(n, c) for n, c in init.items()]
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    meta: dict[str, Any] = {"name": name or f"pod-{uid[:8]}", "namespace": namespace, "uid": uid}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}


def pod_job(uid: str, containers: Mapping[str, str], **kw: Any) -> pb.JobScript:
    """``pod_dict`` rendered for runtime ``none`` (commands run on the host): the real job-directory contract."""
    return render_job(pod_dict(uid, containers, **kw), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
