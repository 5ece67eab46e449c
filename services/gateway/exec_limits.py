"""What a job's ``exec`` can take, checked at ``/create`` instead of failing at run time.

A container's environment reaches its process as ``exec env -- NAME=value …`` (or through a runtime's
command line), so it meets the kernel's exec limits: ``E2BIG`` ("Argument list too long") after the pod
was accepted, queued and started. Linux caps one argument string at 128 KiB (``MAX_ARG_STRLEN``) and a
whole exec at about 2 MiB by default; a runtime may pass the environment as one string, so the
per-container total is held to the smaller cap.
"""

from __future__ import annotations

from typing import Any

EXEC_ENV_LIMIT = 128 * 1024 - 4096
"""Bytes of ``NAME=value`` strings one container may carry (MAX_ARG_STRLEN less room for the command)."""


def env_bytes(container: dict[str, Any]) -> int:
    """Bytes the container's literal ``env`` entries take as ``NAME=value`` strings (with their NULs)."""
    env = container.get("env")
    if not isinstance(env, list):  # malformed: the pod's own validation names the field
        return 0
    total = 0
    for entry in env:
        if isinstance(entry, dict):
            name, value = entry.get("name"), entry.get("value")
            total += len(str(name or "").encode()) + len(str(value or "").encode()) + 2
    return total


def oversized_env(spec: dict[str, Any]) -> tuple[str, str, int] | None:
    """``(field path, container name, bytes)`` of the first container whose env cannot be exec'ed, else None."""
    for kind in ("initContainers", "containers"):
        containers = spec.get(kind)
        if not isinstance(containers, list):  # malformed: the pod's own validation names the field
            continue
        for index, container in enumerate(containers):
            if isinstance(container, dict):
                size = env_bytes(container)
                if size > EXEC_ENV_LIMIT:
                    return f"pod.spec.{kind}[{index}].env", str(container.get("name") or index), size
    return None
