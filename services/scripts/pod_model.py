"""The pod as the renderer reads it: typed, immutable, already checked (built by :func:`.pod_parse.parse_pod`).

Every rendering step reads this model, never interLink's JSON. The parser checks each field's JSON type and
shape once; what is left to rendering is what depends on the pool (the runtime, its GPUs) or on interLink's
data (a ConfigMap that is missing, a key that is not in it).

Some fields are read today only when rendering needs them (a volume's ``items`` only when interLink sent the
ConfigMap, ``status.podIP`` only when the downward API asks for it): a pod whose unused field has the wrong
type still renders. The model keeps that: such a field holds its value or the :class:`PodRejected` that
reading it raises (:data:`.errors.Checked`), and the step that needs it calls :func:`.errors.checked`. What the
Kubernetes API server checks (:mod:`.pod_rules`) is checked at once: metadata, integers, names.

The classes are frozen for mypy and plain slots dataclasses at run time (:func:`model`). A map of strings
that was valid as sent (labels, annotations) is the input's own dict, not a copy: nothing may change either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

from .errors import Checked
from .fields import member
from .hooks import Lifecycle
from .launch import EnvVar
from .pod_resources import ContainerResources
from .probes import Probe

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def model(cls: type[T]) -> type[T]:
    """A dataclass mypy checks as frozen (nothing assigns a field after parsing) that runs as a plain slots one: a
    frozen dataclass pays one ``object.__setattr__`` per field (twice the cost of building it), a NamedTuple one
    Python-level ``__new__``, and a render builds dozens of these."""
    return dataclass(slots=True)(cls)


# --- interLink's data: the ConfigMaps, Secrets and projected volumes it resolved ------------------------


@model
class DataObject:
    """One ConfigMap/Secret-shaped object interLink sent (``container[1].configMaps[0]``), its data decoded."""

    where: str
    files: Checked[dict[str, bytes]]  # key -> bytes; secret ``data`` and any ``binaryData`` were base64
    text_keys: frozenset[str]  # the keys of ``data`` (the others are in ``binaryData``)

    def key_where(self, key: str) -> str:
        """Path of one key of the object (in ``data``, else ``binaryData``)."""
        return member(f"{self.where}.{'data' if key in self.text_keys else 'binaryData'}", key)


@model
class ClaimObject:
    """What interLink sent of one PersistentVolumeClaim of the pod's namespace (``persistentvolumes``) and the
    PersistentVolume bound to it (``persistentVolumeSources``): only what a site storage rule may match on."""

    storage_class: str = ""
    volume: str = ""  # the PersistentVolume's name
    nfs_server: str = ""
    nfs_path: str = ""


NO_CLAIM_OBJECT = ClaimObject()


@model
class PodData:
    """The objects interLink attached to the pod, merged over its containers, by name."""

    config_maps: dict[str, DataObject]
    secrets: dict[str, DataObject]
    projected: dict[str, DataObject]
    claims: dict[str, ClaimObject]


# --- metadata and status -------------------------------------------------------------------------------


@model
class Metadata:
    """Checked as the API server checks it (:mod:`.pod_rules`): names, label and annotation keys and values."""

    uid: str
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]  # null values are absent
    owner_job: tuple[str, str] | None = None
    """The owner reference of kind Job (``batch/…``), as (name, uid), when it has one and both are well formed."""

    def annotation(self, key: str) -> str | None:
        """An annotation's value, ``None`` when absent."""
        return self.annotations.get(key)


@model
class Status:
    pod_ip: Checked[str]
    host_ip: Checked[str]


# --- containers ----------------------------------------------------------------------------------------


@model
class NotAString:
    """A container ``image`` of another JSON type: each runtime words its own rejection."""

    type_name: str  # Python's name of the parsed JSON value's type (``int``, ``list``)


@model
class EnvFromSource:
    """``envFrom[j]``: every key of a ConfigMap or Secret."""

    where: str  # spec.containers[0].envFrom[1]
    kind: str  # configMapRef or secretRef
    secret: bool
    prefix: str
    name: str
    optional: bool


@model
class FieldRef:
    """``valueFrom.fieldRef``: a downward-API value of the pod."""

    field_path: str
    where: str  # the path of fieldPath


@model
class KeyRef:
    """``valueFrom.configMapKeyRef`` or ``secretKeyRef``: one key of interLink's data."""

    where: str  # spec.containers[0].env[3].valueFrom.secretKeyRef
    secret: bool
    name: str
    key: str | None
    optional: Checked[bool]  # read only when the key is missing


@model
class EnvEntry:
    """``env[j]`` whose value rendering works out: a value from elsewhere, or a literal with ``$(VAR)`` to expand
    (a literal without one is parsed into the :class:`.launch.EnvVar` the container gets)."""

    name: str
    value: str  # when value_from is None
    value_from: FieldRef | KeyRef | None


@model
class VolumeMount:
    where: str
    name: str
    mount_path: str
    sub_path: str
    sub_path_expr: str
    read_only: bool


@model
class Container:
    where: str  # spec.initContainers[0], spec.containers[1]
    name: str
    image: str | NotAString | None
    command: tuple[str, ...]
    args: tuple[str, ...]
    working_dir: str
    env_from: tuple[EnvFromSource, ...]
    env: tuple[EnvVar | EnvEntry, ...]
    volume_mounts: tuple[VolumeMount, ...]
    resources: ContainerResources
    gpu_kind: str  # where the GPUs are asked (limits or requests), for a rejection
    lifecycle: Lifecycle | None  # postStart/preStop hooks (main containers only)
    probes: tuple[Probe, ...]  # startup, readiness, liveness (main containers only)


# --- volumes -------------------------------------------------------------------------------------------


@model
class KeyToPath:
    """``items[j]`` of a ConfigMap or Secret: one key to one file (path and mode are read only for a key it has)."""

    where: str
    key: str
    path: Checked[str]
    mode: Checked[int | None]


@model
class DownwardItem:
    """``items[j]`` of a downwardAPI volume or projection."""

    where: str
    path: str
    field_path: str
    mode: int | None


@model
class EmptyDir:
    pass


@model
class HostPath:
    path: str
    path_type: str  # "" or one of Kubernetes' hostPath types


@model
class ObjectVolume:
    """A configMap or secret volume."""

    secret: bool
    name_key: str  # name or secretName
    object_name: str
    optional: bool
    default_mode: int
    items: Checked[tuple[KeyToPath, ...]]  # empty: every key (or interLink sent no such object: not read)


@model
class ObjectProjection:
    """A configMap or secret source of a projected volume."""

    where: str
    kind: str
    object_name: str
    optional: bool
    items: Checked[tuple[KeyToPath, ...]]


@model
class DownwardProjection:
    items: tuple[DownwardItem, ...]


ProjectionSource = ObjectProjection | DownwardProjection
"""A projected volume's source (service account tokens are left out: the job has no API server to use them)."""


@model
class ProjectedVolume:
    default_mode: int
    sources: Checked[tuple[ProjectionSource, ...]]  # empty when interLink resolved the volume (projectedvolumemaps)


@model
class DownwardVolume:
    default_mode: int
    items: Checked[tuple[DownwardItem, ...]]  # empty when interLink resolved the volume (projectedvolumemaps)


@model
class ClaimVolume:
    """A persistentVolumeClaim volume: the site maps the claim (``storage.claims``)."""

    claim: str
    read_only: bool


@model
class NfsVolume:
    """An nfs volume: the site maps the export (``storage.nfs``)."""

    server: str
    path: str
    read_only: bool


VolumeSource = EmptyDir | HostPath | ObjectVolume | ProjectedVolume | DownwardVolume | ClaimVolume | NfsVolume


@model
class VolumeSpec:
    """``spec.volumes[index]``."""

    index: int
    name: str
    kind: str  # the source's member name (configMap, hostPath, ...)
    where: str  # the source's path: spec.volumes[2].configMap
    source: VolumeSource


# --- the pod -------------------------------------------------------------------------------------------


@model
class Toleration:
    """``spec.tolerations[index]``, read for routing (Kueue injects ``pool.vk.io=<pool>``)."""

    index: int
    key: str
    operator: str
    value: str

    @property
    def where(self) -> str:
        return f"spec.tolerations[{self.index}]"


@model
class PodSpec:
    init_containers: tuple[Container, ...]
    containers: tuple[Container, ...]
    volumes: tuple[VolumeSpec, ...]
    # Read after the containers' resources are added up (an error there is reported first).
    resources: Checked[ContainerResources | None]  # pod-level resources (Kubernetes >= 1.32)
    active_deadline_seconds: int | None
    termination_grace_period_seconds: int | None
    node_name: Checked[str]
    service_account_name: Checked[str]
    run_as: tuple[int | None, int | None]  # securityContext (runAsUser, runAsGroup): the submitter decides
    tolerations: tuple[Toleration, ...]
    node_selector: dict[str, str]


@model
class Pod:
    metadata: Metadata
    spec: PodSpec
    status: Status
    data: PodData
