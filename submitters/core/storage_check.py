"""The submitter's own check of a job's storage: each volume the job mounts (``JobScript.storage``) resolved again
with this site's policy (:func:`kernel.storage.resolve`, the gateway's very function, so the words are the
same), and refused unless it maps to the directory the script uses. Any NATS client with the pool's credential
may send a job; a gateway may also render with an announcement older than the site file. Pure.
"""

from __future__ import annotations

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.storage import StorageRefused, request_of, resolve, shown
from interlink_nats.submitters.core.errors import InvalidRequest


def check_storage(job: pb.JobScript, policy: pb.StoragePolicy | None) -> None:
    """InvalidRequest naming the pod field when the site maps a volume of ``job`` nowhere, or elsewhere."""
    namespace = job.pod.namespace if job.pod is not None else ""
    for i, mount in enumerate(job.storage):
        try:
            resolved = resolve(policy, namespace, request_of(mount))
        except StorageRefused as exc:
            raise InvalidRequest(str(exc)) from None
        if resolved.path != mount.site_path:
            raise InvalidRequest(
                f"{mount.field}: the site maps it to {resolved.path!r}, not {shown(mount.site_path)} "
                f"(storage[{i}]: the gateway rendered the job with another storage policy than this site's)"
            )
        if resolved.read_only and not mount.read_only:
            raise InvalidRequest(f"{mount.field}: the site mounts it read-only only (storage[{i}] asks to write)")
