"""Which member names Kubernetes core/v1 has, so a rejection can tell a typo from a real field.

A name Kubernetes does not have (``comand``) is an *unknown field*: the user mistyped it, and the
API server would have refused it too. A real field the sites cannot honour (``spec.hostAliases``)
is *not supported off-cluster*. The lists follow core/v1 of Kubernetes 1.34.
"""

from __future__ import annotations

from .errors import PodRejected
from .fields import child

POD_SPEC = frozenset(
    {
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig",
        "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork",
        "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets", "initContainers", "nodeName",
        "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName", "readinessGates",
        "resourceClaims", "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
        "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes",
    }
)  # fmt: skip
CONTAINER = frozenset(
    {
        "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name",
        "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules",
        "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath",
        "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir",
    }
)  # fmt: skip
VOLUME_MOUNT = frozenset(
    {"mountPath", "mountPropagation", "name", "readOnly", "recursiveReadOnly", "subPath", "subPathExpr"}
)
VOLUME_SOURCES = frozenset(
    {
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
        "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
        "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
        "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
    }
)  # fmt: skip


def unhonoured(where: str, key: str, kubernetes_has: frozenset[str], what: str = "field") -> PodRejected:
    """The rejection of member ``key`` of the object at ``where``: unknown to Kubernetes, or real but unsupported."""
    if key in kubernetes_has:
        return PodRejected(child(where, key), "not supported off-cluster")
    return PodRejected(child(where, key), f"unknown {what}: Kubernetes has no {what} {key!r} here (a typo?)")
