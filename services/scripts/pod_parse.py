"""interLink's JSON -> :class:`.pod_model.Pod`: the one place that reads the pod dict, checking each field once.

A value of the wrong JSON type, or a field that cannot be honoured off-cluster, raises :class:`PodRejected`
naming its path (the typed reads of :mod:`.fields`, the rules of :mod:`.allowed_fields`). A field that
rendering reads only on demand is parsed into its value or its rejection (:data:`.errors.Checked`), so
parsing accepts exactly the pods rendering accepts.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_dns_label

from . import kubernetes_fields, pod_annotations, pod_rules
from .allowed_fields import CONTAINER_IGNORED, CONTAINER_SUPPORTED, MOUNT_KEYS, check_keys, check_spec
from .claim_objects import claim_objects
from .errors import Checked, PodRejected, on_demand
from .fields import (
    absolute_path,
    as_list,
    as_obj,
    as_str,
    child,
    get_bool,
    get_int,
    get_list,
    get_obj,
    get_opt_str,
    get_str,
    member,
    str_map,
    wrong_type,
)
from .hooks import parse_lifecycle
from .job_array import owner_job
from .launch import EnvVar
from .pod_model import (
    Container,
    DataObject,
    EnvEntry,
    EnvFromSource,
    FieldRef,
    KeyRef,
    Metadata,
    NotAString,
    Pod,
    PodData,
    PodSpec,
    Status,
    Toleration,
    VolumeMount,
    VolumeSpec,
)
from .pod_resources import (
    CPU,
    GPU_RESOURCE,
    IGNORED_RESOURCES,
    KNOWN_RESOURCES,
    MEMORY,
    NO_RESOURCES,
    ContainerResources,
    pod_resources_from,
    resource_units,
)
from .probes import PROBES, parse_probes
from .run_as import run_as_request
from .volume_parse import parse_volume

__all__ = ["parse_pod", "pod_resources"]

_PROBE_KEYS = frozenset(name for name, _ in PROBES)


def _str_on_demand(obj: dict[str, Any], key: str, where: str) -> Checked[str]:
    """:func:`.fields.get_str` on demand (a string or absent: no try block, for the fields every pod has)."""
    value = obj.get(key)
    if type(value) is str:
        return value
    return on_demand(get_str, obj, key, where)


def _int_on_demand(obj: dict[str, Any], key: str, where: str) -> Checked[int | None]:
    """:func:`.fields.get_int` on demand (no try block for an integer or an absent field)."""
    value = obj.get(key)
    if value is None or type(value) is int:
        return value
    return on_demand(get_int, obj, key, where)


def parse_pod(pod_data: Any) -> Pod:
    """interLink's RetrievedPodData (>= 0.5: an object; <= 0.4: a one-element list) or a bare pod, checked: the
    API server's rules first (:mod:`.pod_rules`), so nothing reads a name or label Kubernetes would refuse."""
    raw_pod, wrapper = _unwrap(pod_data)
    entries = wrapper.get("container")
    meta = as_obj(raw_pod.get("metadata"), "metadata")
    spec = as_obj(raw_pod.get("spec"), "spec")
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise PodRejected("metadata.uid", "the pod UID is required (it names the job directory)")
    name, namespace = get_str(meta, "name", "metadata"), get_str(meta, "namespace", "metadata")
    pod_rules.check_names(name, namespace)
    labels = str_map(meta.get("labels"), "metadata.labels")
    pod_rules.check_labels(labels, "metadata.labels")
    metadata = Metadata(
        uid,
        name,
        namespace,
        labels,
        _annotations(as_obj(meta.get("annotations"), "metadata.annotations")),
        owner_job(meta.get("ownerReferences")),
    )
    check_spec(spec)
    data = _interlink_data(entries)
    holders = [(wrapper, ""), *((e, f"container[{k}]") for k, e in enumerate(entries or ()) if isinstance(e, dict))]
    data.claims.update(claim_objects(holders, namespace))
    return Pod(metadata, _pod_spec(spec, data), _status(raw_pod), data)


def _status(raw_pod: dict[str, Any]) -> Status:
    """The IPs the downward API may ask for (status is otherwise not read)."""
    try:
        status = as_obj(raw_pod.get("status"), "status")
    except PodRejected as e:
        return Status(e, e)
    return Status(_str_on_demand(status, "podIP", "status"), _str_on_demand(status, "hostIP", "status"))


def _unwrap(pod_data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Accept interLink >= 0.5 (object), <= 0.4 (one-element list) and a bare pod: (the pod, the request)."""
    if isinstance(pod_data, list):
        if len(pod_data) != 1:
            raise PodRejected("pod", "expected one pod")
        pod_data = pod_data[0]
    if not isinstance(pod_data, dict):
        raise PodRejected("pod", "expected an object")
    if "pod" in pod_data:
        pod = pod_data["pod"]
        if not isinstance(pod, dict):
            raise wrong_type("pod", "an object", pod)
        return pod, pod_data
    return pod_data, {}


def _annotations(annotations: dict[str, Any]) -> dict[str, str]:
    """The string values (null is absent, as in Kubernetes), the keys and size checked."""
    pod_rules.check_annotations(annotations)
    strings = annotations
    for key, value in annotations.items():
        if type(value) is not str:
            if value is not None:
                raise wrong_type(pod_annotations.field(key), "a string", value)
            if strings is annotations:
                strings = {k: v for k, v in annotations.items() if v is not None}
    return strings


def _pod_spec(spec: dict[str, Any], data: PodData) -> PodSpec:
    volumes: list[VolumeSpec] = []
    volume_names: set[str] = set()
    for i, raw in enumerate(as_list(spec.get("volumes"), "spec.volumes")):
        vol = parse_volume(i, as_obj(raw, f"spec.volumes[{i}]"), data)
        if vol.name in volume_names:
            raise PodRejected(f"spec.volumes[{i}].name", f"duplicate volume name {vol.name!r}")
        volume_names.add(vol.name)
        volumes.append(vol)
    names: set[str] = set()
    raw_init = get_list(spec, "initContainers", "spec")
    raw_main = get_list(spec, "containers", "spec")
    if not raw_main:
        raise PodRejected("spec.containers", "a pod needs at least one container")
    init: list[Container] = []
    for i, c in enumerate(raw_init):
        where = f"spec.initContainers[{i}]"
        if isinstance(c, dict) and c.get("restartPolicy") is not None:
            raise PodRejected(f"{where}.restartPolicy", "sidecar containers are not supported")
        init.append(_container(c, where, names, volume_names, init=True))
    main = [_container(c, f"spec.containers[{i}]", names, volume_names) for i, c in enumerate(raw_main)]
    raw_all = [(c.where, raw) for c, raw in zip((*init, *main), (*raw_init, *raw_main), strict=True)]
    return PodSpec(
        tuple(init),
        tuple(main),
        tuple(volumes),
        on_demand(_pod_level_resources, spec) if spec.get("resources") is not None else None,
        pod_rules.seconds(
            get_int(spec, "activeDeadlineSeconds", "spec"), "spec.activeDeadlineSeconds", 1, pod_rules.INT32_MAX
        ),
        pod_rules.seconds(
            get_int(spec, "terminationGracePeriodSeconds", "spec"),
            "spec.terminationGracePeriodSeconds",
            0,
            pod_rules.INT64_MAX,
        ),
        _str_on_demand(spec, "nodeName", "spec"),
        _str_on_demand(spec, "serviceAccountName", "spec"),
        run_as_request(spec, raw_all),
        _tolerations(spec),
        _node_selector(spec),
    )


def _tolerations(spec: dict[str, Any]) -> tuple[Toleration, ...]:
    """``spec.tolerations`` as the API server checks them (a key a qualified name, a value a label value, none
    with ``Exists``): one of them may name the pod's pool. Every pod Kueue admits has two or three."""
    out: list[Toleration] = []
    for i, raw in enumerate(get_list(spec, "tolerations", "spec")):
        t = raw if type(raw) is dict else as_obj(raw, f"spec.tolerations[{i}]")
        key, operator, value, effect = t.get("key"), t.get("operator"), t.get("value"), t.get("effect")
        if type(key) is not str or type(operator) is not str or type(value) is not str or type(effect) is not str:
            where = f"spec.tolerations[{i}]"  # some absent (null is ""), or of another type (a 400)
            key, operator, value = (get_str(t, name, where) for name in ("key", "operator", "value"))
            get_str(t, "effect", where)
        if "tolerationSeconds" in t:
            get_int(t, "tolerationSeconds", f"spec.tolerations[{i}]")
        pod_rules.check_toleration(key, operator, value, i)
        out.append(Toleration(i, key, operator, value))
    return tuple(out)


def _node_selector(spec: dict[str, Any]) -> dict[str, str]:
    """``spec.nodeSelector``: checked as labels are."""
    selector = str_map(spec.get("nodeSelector"), "spec.nodeSelector")
    pod_rules.check_labels(selector, "spec.nodeSelector")
    return selector


def pod_resources(pod: dict[str, Any]) -> pb.ResourceRequest:
    """What the whole pod needs at once (:func:`.pod_resources.pod_resources_from`), from the pod dict's
    containers and spec alone (no metadata needed)."""
    spec = as_obj(pod.get("spec"), "spec")
    main = [
        _resources(as_obj(c, f"spec.containers[{i}]"), f"spec.containers[{i}]")[0]
        for i, c in enumerate(get_list(spec, "containers", "spec"))
    ]
    init = [
        _resources(as_obj(c, f"spec.initContainers[{i}]"), f"spec.initContainers[{i}]")[0]
        for i, c in enumerate(get_list(spec, "initContainers", "spec"))
    ]
    return pod_resources_from(
        main, init, on_demand(_pod_level_resources, spec), _int_on_demand(spec, "activeDeadlineSeconds", "spec")
    )


def _pod_level_resources(spec: dict[str, Any]) -> ContainerResources | None:
    return _resources(spec, "spec")[0] if get_obj(spec, "resources", "spec") else None


# --- interLink's data --------------------------------------------------------------------------------------


def _interlink_data(entries: Any) -> PodData:
    """Index interLink's per-container data (``RetrievedPodData.container``) by object name; a later object of the
    same name wins (each container's entry repeats the pod's objects), and only the winners are decoded."""
    found: tuple[dict[str, tuple[dict[str, Any], str]], ...] = ({}, {}, {})
    for k, entry in enumerate(as_list(entries, "container")):
        ew = f"container[{k}]"
        entry = as_obj(entry, ew)
        for key, target in zip(("configMaps", "secrets", "projectedvolumemaps"), found, strict=True):
            lw = f"{ew}.{key}"
            for j, obj in enumerate(get_list(entry, key, ew)):
                ow = f"{lw}[{j}]"
                obj = as_obj(obj, ow)
                name = get_opt_str(get_obj(obj, "metadata", ow), "name", ow + ".metadata")
                if name is not None:
                    target[name] = (obj, ow)
    config_maps, secrets, projected = (
        {name: _data_object(obj, where, secret) for name, (obj, where) in objects.items()}
        for objects, secret in zip(found, (False, True, False), strict=True)
    )
    return PodData(config_maps, secrets, projected, {})


def _data_object(obj: dict[str, Any], where: str, secret: bool) -> DataObject:
    text = obj.get("data")
    text_keys = frozenset(text) if isinstance(text, dict) else frozenset()
    return DataObject(where, on_demand(_object_files, obj, where, secret), text_keys)


def _object_files(obj: dict[str, Any], where: str, secret: bool) -> dict[str, bytes]:
    """Key -> bytes of a ConfigMap/Secret-shaped object (secret ``data`` and any ``binaryData`` are base64)."""
    files: dict[str, bytes] = {}
    for key, value in get_obj(obj, "data", where).items():
        if value is None:
            value = ""
        elif not isinstance(value, str):
            as_str(value, member(where + ".data", key))
        if secret:
            try:
                files[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise PodRejected(member(where + ".data", key), "secret data is not valid base64") from None
        else:
            files[key] = value.encode("utf-8", "surrogatepass")
    for key, value in get_obj(obj, "binaryData", where).items():
        kw = member(where + ".binaryData", key)
        try:
            files[key] = base64.b64decode(as_str(value, kw), validate=True)
        except (binascii.Error, ValueError):
            raise PodRejected(kw, "not valid base64") from None
    return files


# --- containers --------------------------------------------------------------------------------------------


def _container(raw: Any, where: str, names: set[str], volume_names: set[str], init: bool = False) -> Container:
    c = as_obj(raw, where)
    check_keys(c, CONTAINER_SUPPORTED, CONTAINER_IGNORED, where, kubernetes_fields.CONTAINER)
    name: Any = c.get("name")
    if not is_dns_label(name):
        raise PodRejected(where + ".name", f"container names must be DNS labels: {name!r}")
    if name in names:
        raise PodRejected(where + ".name", f"duplicate container name {name!r}")
    names.add(name)
    resources, gpu_kind = _resources(c, where)
    env_from = tuple([_env_from(ref, f"{where}.envFrom[{j}]") for j, ref in enumerate(get_list(c, "envFrom", where))])
    env = _env(c, where)
    command, args = _words(c, "command", where), _words(c, "args", where)
    workdir = get_str(c, "workingDir", where)
    if workdir:
        absolute_path(workdir, where + ".workingDir")
    mounts: list[VolumeMount] = []
    targets: set[str] = set()
    for j, m in enumerate(get_list(c, "volumeMounts", where)):
        mount = _mount(m, f"{where}.volumeMounts[{j}]", volume_names)
        target = mount.mount_path.rstrip("/")
        if target in targets:
            raise PodRejected(mount.where + ".mountPath", f"{mount.mount_path!r} is mounted twice")
        targets.add(target)
        mounts.append(mount)
    image = c.get("image")
    if image is not None and not isinstance(image, str):
        image = NotAString(type(image).__name__)
    if c.get("ports") is not None:
        pod_rules.check_ports(c, where)
    lifecycle = parse_lifecycle(c, where, init) if "lifecycle" in c else None
    probes = parse_probes(c, where, init) if _PROBE_KEYS.intersection(c) else ()
    return Container(
        where, name, image, command, args, workdir, env_from, env, tuple(mounts), resources, gpu_kind, lifecycle, probes
    )


def _words(c: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    """``command`` or ``args``: strings only."""
    words = get_list(c, key, where)
    for k, w in enumerate(words):
        if not isinstance(w, str):
            raise wrong_type(f"{where}.{key}[{k}]", "a string", w)
    return tuple(words)


def _env_from(raw: Any, where: str) -> EnvFromSource:
    ref = as_obj(raw, where)
    prefix = get_str(ref, "prefix", where)
    if prefix and not pod_rules.is_env_var_name(prefix):
        raise PodRejected(f"{where}.prefix", f"must be printable ASCII other than '=' (Kubernetes' rule): {prefix!r}")
    if "configMapRef" in ref:
        kind, secret = "configMapRef", False
    elif "secretRef" in ref:
        kind, secret = "secretRef", True
    else:
        raise PodRejected(where, "envFrom needs configMapRef or secretRef")
    src = get_obj(ref, kind, where)
    name = as_str(src.get("name"), f"{where}.{kind}.name")
    pod_rules.check_object_name(name, f"{where}.{kind}.name")
    return EnvFromSource(where, kind, secret, prefix, name, get_bool(src, "optional", f"{where}.{kind}"))


def _env(c: dict[str, Any], where: str) -> tuple[EnvVar | EnvEntry, ...]:
    """A container's ``env`` (the hottest loop of a parse: a path is built only for a rejection or a valueFrom)."""
    entries: list[EnvVar | EnvEntry] = []
    for j, raw in enumerate(get_list(c, "env", where)):
        var = raw if type(raw) is dict else as_obj(raw, f"{where}.env[{j}]")
        name = var.get("name")
        # pod_rules.is_env_var_name inlined: this loop runs for every variable of every pod
        if type(name) is not str or not name or not name.isascii() or not name.isprintable() or "=" in name:
            if not isinstance(name, str):
                raise wrong_type(f"{where}.env[{j}].name", "a string", name)
            raise PodRejected(
                f"{where}.env[{j}].name",
                f"invalid environment variable name {name!r}: printable ASCII other than '=' (Kubernetes' rule)",
            )
        value_from = var.get("valueFrom")
        if value_from is not None:
            ew = f"{where}.env[{j}].valueFrom"
            entries.append(EnvEntry(name, "", _value_from(as_obj(value_from, ew), ew)))
            continue
        value = var.get("value")
        if type(value) is not str:
            value = get_str(var, "value", f"{where}.env[{j}]")
        entries.append(EnvEntry(name, value, None) if "$" in value else EnvVar(name, value, False, j))
    return tuple(entries)


def _value_from(ref: dict[str, Any], where: str) -> FieldRef | KeyRef:
    if "fieldRef" in ref:
        fw = where + ".fieldRef.fieldPath"
        return FieldRef(as_str(get_obj(ref, "fieldRef", where).get("fieldPath"), fw), fw)
    for kind, secret in (("configMapKeyRef", False), ("secretKeyRef", True)):
        if kind in ref:
            kw = f"{where}.{kind}"
            src = get_obj(ref, kind, where)
            name, key = get_str(src, "name", kw), get_opt_str(src, "key", kw)
            pod_rules.check_object_name(name, kw + ".name")
            return KeyRef(kw, secret, name, key, on_demand(get_bool, src, "optional", kw))
    if not ref:
        raise PodRejected(where, "empty valueFrom")
    raise PodRejected(child(where, next(iter(ref))), "unresolved valueFrom is not supported")


def _mount(raw: Any, where: str, volume_names: set[str]) -> VolumeMount:
    m = as_obj(raw, where)
    check_keys(m, MOUNT_KEYS, frozenset(), where, kubernetes_fields.VOLUME_MOUNT)
    name = get_str(m, "name", where)
    if name not in volume_names:
        raise PodRejected(where + ".name", f"no volume named {name!r} in spec.volumes")
    path = absolute_path(m.get("mountPath"), where + ".mountPath")
    sub, sub_expr = get_str(m, "subPath", where), get_str(m, "subPathExpr", where)
    if get_opt_str(m, "mountPropagation", where) not in (None, "None", "HostToContainer"):
        raise PodRejected(where + ".mountPropagation", "only None/HostToContainer propagation is possible")
    if get_opt_str(m, "recursiveReadOnly", where) == "Enabled":
        # A read-only bind does not reach the mounts below it; "IfPossible" and "Disabled" are honest.
        raise PodRejected(where + ".recursiveReadOnly", "Enabled cannot be guaranteed off-cluster; use IfPossible")
    return VolumeMount(where, name, path, sub, sub_expr, get_bool(m, "readOnly", where))


def _units(raw: Any, where: str, kind: str, name: str) -> int:
    """Quantity ``where.kind[name]`` in the job's units (the path is only built for a rejection)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise PodRejected(member(f"{where}.{kind}", name), f"not a quantity: {raw!r}")
    try:
        return resource_units(name, raw if type(raw) is str else str(raw))
    except ValueError as e:
        raise PodRejected(member(f"{where}.{kind}", name), str(e)) from None


def _resources(container: dict[str, Any], where: str) -> tuple[ContainerResources, str]:
    """(cpu millis, memory bytes, gpus) of one container (or the pod), and where its GPUs are asked: max(request,
    limit) per resource, since a limit without a request implies request = limit and the batch system must grant
    the larger."""
    res = get_obj(container, "resources", where)
    if not res:
        return NO_RESOURCES, "requests"  # most containers of batch pods
    rw = where + ".resources"
    for key in res:
        if key not in ("requests", "limits"):
            raise PodRejected(child(rw, key), "unsupported here (only requests and limits of cpu, memory, GPUs)")
    cpu = mem = gpu = 0
    for kind in ("requests", "limits"):
        values = get_obj(res, kind, rw)
        for name, raw in values.items():
            if name not in KNOWN_RESOURCES:
                raise PodRejected(
                    member(f"{rw}.{kind}", name), "unsupported resource (only cpu, memory, nvidia.com/gpu)"
                )
            if name in IGNORED_RESOURCES:
                continue
            units = _units(raw, rw, kind, name)
            if name == CPU:
                cpu = max(cpu, units)
            elif name == MEMORY:
                mem = max(mem, units)
            else:
                gpu = max(gpu, units)
    gpu_kind = "limits" if GPU_RESOURCE in (res.get("limits") or ()) else "requests"
    return ContainerResources(cpu, mem, gpu), gpu_kind
