"""Which pod fields the renderer honours, ignores, or accepts only in a harmless form.

Everything not listed here is rejected naming the field: a field silently dropped could change what the user's
code does. docs/pod-support.md lists the same fields (tests/scripts/test_scripts_allowed_fields.py keeps them in step).
"""

from __future__ import annotations

from typing import Any

from . import kubernetes_fields
from .errors import PodRejected
from .fields import get_bool, get_list

SPEC_SUPPORTED = frozenset(
    {
        *("containers", "initContainers", "volumes", "activeDeadlineSeconds", "terminationGracePeriodSeconds"),
        *("resources", "securityContext"),
    }
)
SPEC_IGNORED = frozenset(
    {
        "restartPolicy",
        "dnsPolicy",
        "dnsConfig",
        "schedulerName",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "nodeName",
        "nodeSelector",
        "affinity",
        "tolerations",
        "priority",
        "priorityClassName",
        "preemptionPolicy",
        "enableServiceLinks",
        "imagePullSecrets",
        "hostname",
        "subdomain",
        "setHostnameAsFQDN",
        "topologySpreadConstraints",
        "overhead",
        "runtimeClassName",
        "readinessGates",
        "schedulingGates",
        "shareProcessNamespace",
        "hostAliases",
        "os",
        "hostUsers",
    }
)
SPEC_FALSE_ONLY = frozenset({"hostNetwork", "hostPID", "hostIPC"})
"""Accepted when false: true would share the host's namespaces."""
SPEC_EMPTY_ONLY = frozenset({"ephemeralContainers", "resourceClaims"})
"""Accepted when empty."""
CONTAINER_SUPPORTED = frozenset(
    {
        *("name", "image", "command", "args", "workingDir", "env", "envFrom", "volumeMounts", "resources"),
        *("securityContext", "lifecycle", "livenessProbe", "readinessProbe", "startupProbe"),
    }
)
CONTAINER_IGNORED = frozenset(
    {
        "imagePullPolicy",
        "ports",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "stdin",
        "stdinOnce",
        "tty",
        "resizePolicy",
    }
)
MOUNT_KEYS = frozenset(
    {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation", "recursiveReadOnly"}
)
VOLUME_KINDS = frozenset(
    {"configMap", "secret", "projected", "downwardAPI", "emptyDir", "hostPath", "persistentVolumeClaim", "nfs"}
)
STORAGE_KEYS = {
    "persistentVolumeClaim": frozenset({"claimName", "readOnly"}),
    "nfs": frozenset({"server", "path", "readOnly"}),
}
"""The members of a claim or nfs volume (Kubernetes has no others): the site storage policy maps them."""


def check_keys(
    obj: dict[str, Any], supported: frozenset[str], ignored: frozenset[str], where: str, kubernetes_has: frozenset[str]
) -> None:
    """Reject the first member of ``obj`` that is neither supported nor ignored: "unknown field" when
    Kubernetes has no such member (a typo), "not supported off-cluster" when it is real."""
    for key in obj:
        if key not in supported and key not in ignored:
            raise kubernetes_fields.unhonoured(where, key, kubernetes_has)


def check_spec(spec: dict[str, Any]) -> None:
    """Reject pod-level fields that cannot be honoured off-cluster."""
    for key in spec:
        if key in SPEC_SUPPORTED or key in SPEC_IGNORED:
            continue
        if key in SPEC_FALSE_ONLY:
            if get_bool(spec, key, "spec"):
                raise PodRejected(f"spec.{key}", "cannot share the host's namespaces on a batch site")
        elif key in SPEC_EMPTY_ONLY:
            if get_list(spec, key, "spec"):
                raise PodRejected(f"spec.{key}", "not supported off-cluster")
        else:
            raise kubernetes_fields.unhonoured("spec", key, kubernetes_fields.POD_SPEC)
