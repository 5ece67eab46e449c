"""Helpers for tests and benchmarks of submitters (shipped in the library, like grpclib.testing).

``pod_job`` renders a real pod with the real renderer (runtime ``none``: commands run on the
host), so tests exercise the same job-directory contract as production.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.submitters.settings import SubmitterSettings

T = TypeVar("T")


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
    from interlink_nats.services.scripts import render_job

    return render_job(pod_dict(uid, containers, **kw), pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))


def settings_for(
    state_dir: Path, nats_url: str | Sequence[str], *, pool: str = "test", backend: str = "shell", **kw: Any
) -> SubmitterSettings:
    urls = [nats_url] if isinstance(nats_url, str) else list(nats_url)
    kw.setdefault("poll_interval", 0.2)
    return SubmitterSettings.load(None, pool=pool, backend=backend, nats_url=urls, state_dir=state_dir, **kw)


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 20.0,  # noqa: ASYNC109 - a polling budget, not a cancellation scope
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Await ``check()`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
