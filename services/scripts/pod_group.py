"""Which pod group (gang) a pod belongs to, read from the labels and annotations Kueue's plain pod groups use.

Pure: the gateway holds a group's members until all have arrived and submits them as one job; the renderer
passes the gang's peers (``layout.GROUP_ENV``) into every container of a member. Both read the group here, so
they never disagree about which pods are members. JobSet and MPIJob pods are read the same way: Kueue's label and
annotation set on their pod template (docs/pod-support.md, "Pod groups").
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import LABEL_VALUE_MAX, is_label_value
from interlink_nats.kernel.pod_limits import GROUP_SIZE_MAX

from .errors import PodRejected
from .fields import member
from .pod_model import Metadata

GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
FAILURE_POLICY_ANNOTATION = "interlink-nats.io/gang-failure-policy"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""A label (Kubernetes ≥ 1.28) and an annotation on Indexed Job and JobSet pods: a member's rank key."""

FAILURE_POLICIES = {"FailGang": pb.GangFailurePolicy.FAIL_GANG, "Continue": pb.GangFailurePolicy.CONTINUE}


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """What one member pod declares of its pod group (its labels and annotations): the gateway's `PodGroup` is
    the group those members form."""

    name: str
    total: int
    failure_policy: pb.GangFailurePolicy
    index: int | None
    """The pod's completion index when it has one: members are ranked by it, then by pod name."""


def _label_field(key: str) -> str:
    return member("metadata.labels", key)


def _annotation_field(key: str) -> str:
    return member("metadata.annotations", key)


def pod_group(meta: Metadata) -> PodGroupSpec | None:
    """The pod's group, ``None`` for a pod in no group; :class:`PodRejected` naming the label or annotation
    that is malformed or missing (a group name without a count, or a count without a name)."""
    total_text = meta.annotation(GROUP_TOTAL_ANNOTATION)
    labels = meta.labels
    name = labels.get(GROUP_NAME_LABEL)  # a label value (:mod:`.pod_rules`): no '/', newline or NUL, ≤ 63
    if name is None and total_text is None:
        return None
    if name is None:
        raise PodRejected(
            _label_field(GROUP_NAME_LABEL),
            f"required with the annotation {GROUP_TOTAL_ANNOTATION}: the pod group's name",
        )
    if total_text is None:
        raise PodRejected(
            _annotation_field(GROUP_TOTAL_ANNOTATION),
            f"required with the label {GROUP_NAME_LABEL}: how many pods the group has",
        )
    if not name:
        raise PodRejected(_label_field(GROUP_NAME_LABEL), "must not be empty")
    if not is_label_value(name):  # as the API server refuses it: the name reaches keys, logs and the submitters
        raise PodRejected(
            _label_field(GROUP_NAME_LABEL),
            f"must be a Kubernetes label value (at most {LABEL_VALUE_MAX} letters, digits, '-', '_' or '.', "
            f"beginning and ending with a letter or digit), got {str(name)[:80]!r}",
        )
    total = _count(total_text, _annotation_field(GROUP_TOTAL_ANNOTATION), minimum=1)
    if total > GROUP_SIZE_MAX:
        raise PodRejected(_annotation_field(GROUP_TOTAL_ANNOTATION), f"at most {GROUP_SIZE_MAX}, got {total}")
    policy_text = meta.annotation(FAILURE_POLICY_ANNOTATION)
    policy = pb.GangFailurePolicy.FAIL_GANG
    if policy_text is not None:
        found = FAILURE_POLICIES.get(policy_text)
        if found is None:
            allowed = " or ".join(FAILURE_POLICIES)
            raise PodRejected(_annotation_field(FAILURE_POLICY_ANNOTATION), f"must be {allowed}, got {policy_text!r}")
        policy = found
    return PodGroupSpec(name, total, policy, _completion_index(meta, labels))


def completion_index(meta: Metadata) -> int | None:
    """The pod's ``batch.kubernetes.io/job-completion-index`` (a :class:`PodRejected` naming it when malformed)."""
    return _completion_index(meta, meta.labels)


def _completion_index(meta: Metadata, labels: dict[str, str]) -> int | None:
    """The label first (newer Kubernetes), else the annotation; both are set by the Job controller."""
    text = labels.get(COMPLETION_INDEX)
    where = _label_field(COMPLETION_INDEX)
    if text is None:
        text = meta.annotation(COMPLETION_INDEX)
        where = _annotation_field(COMPLETION_INDEX)
    return None if text is None else _count(text, where, minimum=0)


def _count(text: str, where: str, *, minimum: int) -> int:
    """A decimal integer ≥ ``minimum``; digits only, so ``+1``, `` 1`` or ``1e3`` are refused, not read."""
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise PodRejected(where, f"must be an integer of at least {minimum}, got {text!r}")
    value = int(text)
    if value < minimum:
        raise PodRejected(where, f"must be an integer of at least {minimum}, got {text!r}")
    return value
