"""Site storage policies the tests render and run with (``BuildConfig.storage``, the site file's ``storage``).

Since the site decides which host paths a pod may mount (none by default), a test that mounts a hostPath of
its own says so with :data:`OPEN_HOST_PATHS`: every path, read-write, the behaviour before the policy existed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
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


STRINGS_ROOT = Path(tempfile.gettempdir()) / f"interlink-nats-storage-{os.getpid()}"
"""Where the pod-string runs' claims and NFS export live (a test process's own directory)."""
atexit.register(shutil.rmtree, STRINGS_ROOT, ignore_errors=True)  # named for this process: gone with it
STRINGS_NFS_SERVER = "ok-1"
STRINGS_SITE = pb.StoragePolicy(
    claims=[
        pb.ClaimRule(
            namespace="*", path=f"{STRINGS_ROOT}/claims/{{namespace}}/{{claim}}", create=True, create_mode=0o700
        )
    ],
    host_paths=OPEN_HOST_PATHS.host_paths,
    nfs_exports=[pb.NfsExportRule(namespace="*", server=STRINGS_NFS_SERVER, path="/", site_path=f"{STRINGS_ROOT}/nfs")],
)
"""The pod-string runs' site: every claim below :data:`STRINGS_ROOT` (made by the job), the NFS export
``ok-1:/`` there too, and every hostPath."""
