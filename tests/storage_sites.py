"""Site storage policies the tests render and run with (``BuildConfig.storage``, the site file's ``storage``).

Since the site decides which host paths a pod may mount (none by default), a test that mounts a hostPath of
its own says so with :data:`OPEN_HOST_PATHS`: every path, read-write, the behaviour before the policy existed.
"""

from __future__ import annotations

from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb

OPEN_HOST_PATHS = pb.StoragePolicy(host_paths=[pb.HostPathRule(namespace="*", prefix="/", read_only=False)])
OPEN_HOST_PATHS_SECTION: dict[str, Any] = {"host_paths": [{"prefix": "/", "read_only": False}]}
""":data:`OPEN_HOST_PATHS` as a submitter's ``storage`` section."""


def with_open_host_paths(bc: pb.BuildConfig) -> pb.BuildConfig:
    """``bc`` with :data:`OPEN_HOST_PATHS` (a copy)."""
    out = pb.BuildConfig.parse(bytes(bc))
    out.storage = OPEN_HOST_PATHS
    return out
