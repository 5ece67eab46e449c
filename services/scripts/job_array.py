"""Which Kubernetes Job a pod belongs to, read from what the Job controller sets on its pods. Pure.

The gateway coalesces the pods of one Job that reach it for one pool close together into one array submission
(docs/gateway.md, "Job arrays"); this is the one place that says which pods those are. Read, in order: the label
``batch.kubernetes.io/controller-uid`` (older clusters: ``controller-uid``), else the pod's owner reference of kind
Job; its name from ``batch.kubernetes.io/job-name`` (``job-name``), else the owner reference; the completion index
of an Indexed Job as the gang reads it (``pod_group.completion_index``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from interlink_nats.kernel.names import is_dns_subdomain, is_label_value, is_pod_uid

from .pod_group import completion_index
from .pod_model import Metadata

__pure__ = True  # no I/O, not even through what it imports (held by tests/test_import_contracts.py)

CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


@dataclass(frozen=True, slots=True)
class JobOfPod:
    """The Job a pod belongs to, and its place in it."""

    uid: str
    name: str
    """Empty when neither a label nor the owner reference names it."""
    index: int | None
    """``batch.kubernetes.io/job-completion-index`` of an Indexed Job's pod; None otherwise."""


def owner_job(refs: Any) -> tuple[str, str] | None:
    """The (name, uid) of the first owner reference of kind Job in API group ``batch``, from the raw
    ``metadata.ownerReferences``; None when there is none, or it is not well formed (a name that is no DNS
    subdomain, a uid that is no UID): only a hint for coalescing, so a malformed one is ignored, never refused."""
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not isinstance(ref, dict) or ref.get("kind") != "Job":
            continue
        api = ref.get("apiVersion")
        if not isinstance(api, str) or not api.startswith("batch/"):
            continue
        name, uid = ref.get("name"), ref.get("uid")
        if is_dns_subdomain(name) and is_pod_uid(uid):
            return name, uid
    return None


def job_of(meta: Metadata) -> JobOfPod | None:
    """The pod's Job, None for a pod that names none. The labels are label values already (checked at the
    door), so every part is safe in a key, a log line and a job directory's name."""
    labels = meta.labels
    uid = next((labels[k] for k in CONTROLLER_UID_LABELS if labels.get(k)), "")
    name = next((labels[k] for k in JOB_NAME_LABELS if labels.get(k)), "")
    if meta.owner_job is not None:
        owner_name, owner_uid = meta.owner_job
        uid = uid or owner_uid
        name = name or owner_name
    if not uid or not is_label_value(uid):
        return None
    return JobOfPod(uid, name, completion_index(meta))
