"""Pod + interLink data + BuildConfig -> one self-contained bash script (pure: no I/O at render time).

Works on the pod dict as interLink sends it (no proto conversion: that costs more than the whole
render). Everything that is not supported is rejected with :class:`PodRejected` naming the field;
nothing is dropped silently except the fields listed as ignored in docs/pod-support.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources as importlib_resources
from typing import Any

import jinja2
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.names import is_dns_label

from . import kubernetes_fields
from .errors import PodRejected
from .fields import as_list as _list
from .fields import as_obj as _dict
from .fields import as_str as _str
from .fields import child, get_bool, get_int, get_list, get_obj, get_opt_str, get_str, member, str_map, wrong_type
from .pod_resources import GPU_RESOURCE, container_resources, pod_resources_from

RT = pb.ContainerRuntime

# --- annotations ---------------------------------------------------------------------------------
ANN_PREFIX = "slurm-job.vk.io/"
ANN_FLAGS = ANN_PREFIX + "flags"
ANN_PRE_EXEC = ANN_PREFIX + "pre-exec"
ANN_SING_COMMANDS = ANN_PREFIX + "singularity-commands"
ANN_SING_MOUNTS = ANN_PREFIX + "singularity-mounts"
ANN_SING_OPTIONS = ANN_PREFIX + "singularity-options"
ANN_IMAGE_ROOT = ANN_PREFIX + "image-root"
ANN_MPI_FLAGS = ANN_PREFIX + "mpi-flags"

# --- pod fields ----------------------------------------------------------------------------------
SPEC_SUPPORTED = frozenset(
    {"containers", "initContainers", "volumes", "activeDeadlineSeconds", "terminationGracePeriodSeconds", "resources"}
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
        "securityContext",
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
SPEC_EMPTY_ONLY = frozenset({"ephemeralContainers", "resourceClaims"})
CONTAINER_SUPPORTED = frozenset(
    {"name", "image", "command", "args", "workingDir", "env", "envFrom", "volumeMounts", "resources"}
)
CONTAINER_IGNORED = frozenset(
    {
        "imagePullPolicy",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "securityContext",
        "stdin",
        "stdinOnce",
        "tty",
        "resizePolicy",
    }
)
MOUNT_KEYS = frozenset(
    {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation", "recursiveReadOnly"}
)
VOLUME_KINDS = frozenset({"configMap", "secret", "projected", "downwardAPI", "emptyDir", "hostPath"})
DEFAULT_GRACE_SECONDS = 30
HOSTPATH_TESTS = {"Directory": "d", "File": "f", "Socket": "S", "CharDevice": "c", "BlockDevice": "b"}

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")

RUNTIME_NAMES = {RT.APPTAINER: "apptainer", RT.SINGULARITY: "singularity", RT.PODMAN: "podman", RT.NONE: "none"}
ENV_PREFIX = {RT.APPTAINER: "APPTAINERENV_", RT.SINGULARITY: "SINGULARITYENV_"}
CACHE_ENV = {RT.APPTAINER: "APPTAINER_CACHEDIR", RT.SINGULARITY: "SINGULARITY_CACHEDIR"}

MASK = "***"
quote = lru_cache(maxsize=8192)(shlex.quote)
"""shlex.quote, cached: pods of one workload repeat the same strings."""


def _q(text: str, where: str) -> str:
    """Quote one pod-derived string; NUL cannot live in a shell word, so it is rejected."""
    if "\x00" in text:
        raise PodRejected(where, "contains a NUL character")
    return quote(text)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (kubelet semantics): ``$$`` is ``$``, unknown references stay."""
    if "$" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    start = 0
    while i < n:
        if text[i] == "$" and i + 1 < n:
            out.append(text[start:i])
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
            elif nxt == "(":
                end = text.find(")", i + 2)
                if end == -1:
                    out.append("$(")
                    i += 2
                else:
                    name = text[i + 2 : end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
            else:
                out.append(text[i : i + 2])
                i += 2
            start = i
        else:
            i += 1
    out.append(text[start:])
    return "".join(out)


def _rel_path(value: object, where: str) -> str:
    """A relative file path below a volume: no absolute paths, no '..', no empty components."""
    path = _str(value, where)
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in path:
        raise PodRejected(where, f"must be a relative path without '..': {path!r}")
    return path


def _abs_path(value: object, where: str) -> str:
    path = _str(value, where)
    if not path.startswith("/") or "\x00" in path or ".." in path.split("/"):
        raise PodRejected(where, f"must be an absolute path without '..': {path!r}")
    return path


# --- interLink data ------------------------------------------------------------------------------


@dataclass(slots=True)
class Source:
    """One ConfigMap/Secret-shaped object interLink sent, with its path in the data (for rejections)."""

    obj: dict[str, Any]
    where: str  # e.g. container[1].configMaps[0]
    secret: bool  # Secret: ``data`` is base64
    files: dict[str, bytes] | None = None  # decoded on first use, then shared by every reference

    def key_where(self, key: str) -> str:
        """Path of one key of the object (in ``data``, else ``binaryData``)."""
        part = "data" if key in get_obj(self.obj, "data", self.where) else "binaryData"
        return member(f"{self.where}.{part}", key)


@dataclass(slots=True)
class PodData:
    """The objects interLink attached to the pod, merged over its containers, by name."""

    config_maps: dict[str, Source] = field(default_factory=dict)
    secrets: dict[str, Source] = field(default_factory=dict)
    projected: dict[str, Source] = field(default_factory=dict)


def _pod_data(entries: Any) -> PodData:
    data = PodData()
    for k, entry in enumerate(_list(entries, "container")):
        ew = f"container[{k}]"
        entry = _dict(entry, ew)
        for key, target, secret in (
            ("configMaps", data.config_maps, False),
            ("secrets", data.secrets, True),
            ("projectedvolumemaps", data.projected, False),
        ):
            lw = f"{ew}.{key}"
            for j, obj in enumerate(get_list(entry, key, ew)):
                ow = f"{lw}[{j}]"
                obj = _dict(obj, ow)
                name = get_opt_str(get_obj(obj, "metadata", ow), "name", ow + ".metadata")
                if name is not None:
                    target[name] = Source(obj, ow, secret)
    return data


def _object_files(src: Source) -> dict[str, bytes]:
    """Key -> bytes of a ConfigMap/Secret-shaped object (secret ``data`` and any ``binaryData`` are base64)."""
    if src.files is not None:
        return src.files
    files: dict[str, bytes] = {}
    where, secret = src.where, src.secret
    for key, value in get_obj(src.obj, "data", where).items():
        if value is None:
            value = ""
        elif not isinstance(value, str):
            _str(value, member(where + ".data", key))
        if secret:
            try:
                files[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise PodRejected(member(where + ".data", key), "secret data is not valid base64") from None
        else:
            files[key] = value.encode("utf-8", "surrogatepass")
    for key, value in get_obj(src.obj, "binaryData", where).items():
        kw = member(where + ".binaryData", key)
        try:
            files[key] = base64.b64decode(_str(value, kw), validate=True)
        except (binascii.Error, ValueError):
            raise PodRejected(kw, "not valid base64") from None
    src.files = files
    return files


# --- plan ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class VolumeFile:
    path: str  # relative to the job dir
    content: bytes
    mode: int
    secret: bool


@dataclass(slots=True)
class Volume:
    """A pod volume materialised for the job: a dir under volumes/, or a host path."""

    name: str
    kind: str
    index: int
    host_path: str | None = None  # hostPath: the path on the host
    read_only: bool = False  # configMap, secret, projected, downwardAPI are always read-only
    files: list[VolumeFile] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    dir_mode: int = 0o700
    host_lines: list[str] = field(default_factory=list)

    @property
    def rel_dir(self) -> str:
        return f"{layout.VOLUMES_DIR}/{self.name}"


@dataclass(slots=True)
class Context:
    pod: dict[str, Any]
    meta: dict[str, Any]
    spec: dict[str, Any]
    annotations: dict[str, Any]
    data: PodData
    bc: pb.BuildConfig
    runtime: RT
    mask: bool


def _ann(ctx: Context, key: str) -> str | None:
    """An annotation's value (a string, as everywhere in metadata), ``None`` when absent."""
    value = ctx.annotations.get(key)
    if value is None or type(value) is str:
        return value
    return _str(value, _ann_field(key))


def _downward_value(ctx: Context, field_path: str, where: str) -> str:
    """Resolve a downward-API fieldRef from the pod itself."""
    name = field_path.partition(".")[2]
    if field_path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return get_str(ctx.meta, name, "metadata")
    if field_path in ("spec.nodeName", "spec.serviceAccountName"):
        return get_str(ctx.spec, name, "spec")
    if field_path in ("status.podIP", "status.hostIP"):
        value = get_str(_dict(ctx.pod.get("status"), "status"), name, "status")
        if not value and name == "podIP":
            value = _ann(ctx, "interlink.eu/pod-ip") or ""
        return value
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = str_map(ctx.meta.get(name), field_path)
        return "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items()))
    m = _FIELD_PATH.match(field_path)
    if m:
        return str_map(ctx.meta.get(m.group(1)), "metadata." + m.group(1)).get(m.group(2), "")
    raise PodRejected(where, f"unsupported fieldPath {field_path!r}")


def _mode(raw: Any, where: str, default: int) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 0o777:
        raise PodRejected(where, "mode must be an integer between 0 and 0777")
    return raw


def _keyed_files(
    vol: Volume,
    src: Source,
    items: list[Any],
    where: str,
    mode: int,
    secret: bool,
    optional: bool,
    base: str = "",
) -> None:
    """Add a ConfigMap/Secret's keys (all, or ``items`` key->path with per-item mode) to a volume."""
    files = _object_files(src)
    if items:
        for j, item in enumerate(items):
            iw = f"{where}.items[{j}]"
            item = _dict(item, iw)
            key = _str(item.get("key"), iw + ".key")
            if key not in files:
                if optional:
                    continue
                raise PodRejected(iw + ".key", f"key {key!r} not found in the data sent by interLink")
            path = _rel_path(item.get("path"), iw + ".path")
            _add_file(vol, base + path, files[key], _mode(item.get("mode"), iw + ".mode", mode), secret)
    else:
        for key, content in files.items():
            _add_file(vol, base + _rel_path(key, src.key_where(key)), content, mode, secret)


def _add_file(vol: Volume, path: str, content: bytes, mode: int, secret: bool) -> None:
    if secret:
        mode &= 0o700  # secrets never get group/other bits, whatever defaultMode says
    vol.files.append(VolumeFile(f"{vol.rel_dir}/{path}", content, mode, secret))
    if "/" in path:
        vol.dirs.append(f"{vol.rel_dir}/{path.rsplit('/', 1)[0]}")


def _volume(ctx: Context, index: int, raw: dict[str, Any]) -> Volume:
    where = f"spec.volumes[{index}]"
    name = raw.get("name")
    if not is_dns_label(name):
        raise PodRejected(where + ".name", f"volume names must be DNS labels: {name!r}")
    kinds = [k for k in raw if k != "name"]
    if len(kinds) != 1:
        raise PodRejected(where, "a volume needs exactly one source")
    kind = kinds[0]
    if kind not in VOLUME_KINDS:
        if kind in kubernetes_fields.VOLUME_SOURCES:
            raise PodRejected(child(where, kind), f"volume type {kind!r} is not supported off-cluster")
        raise kubernetes_fields.unhonoured(where, kind, kubernetes_fields.VOLUME_SOURCES, "volume type")
    src = _dict(raw[kind], f"{where}.{kind}")
    kw = f"{where}.{kind}"
    vol = Volume(name=name, kind=kind, index=index)
    if kind == "emptyDir":
        vol.dir_mode = 0o777  # like Kubernetes; the job dir (0700) keeps other users out
        return vol
    if kind == "hostPath":
        path = _abs_path(src.get("path"), kw + ".path")
        vol.host_path = path
        htype = get_str(src, "type", kw)
        qp = _q(path, kw + ".path")
        if htype == "DirectoryOrCreate":
            vol.host_lines.append(f"mkdir -p -- {qp} || __setup_failed {_q('cannot create hostPath ' + path, kw)}")
        elif htype == "FileOrCreate":
            parent = path.rsplit("/", 1)[0] or "/"
            vol.host_lines.append(
                f"mkdir -p -- {_q(parent, kw)} && touch -- {qp} || __setup_failed {_q('cannot create ' + path, kw)}"
            )
        elif htype in HOSTPATH_TESTS:
            vol.host_lines.append(f"__need {HOSTPATH_TESTS[htype]} {qp} {htype}")
        elif htype:
            raise PodRejected(kw + ".type", f"unknown hostPath type {htype!r}")
        return vol
    vol.read_only = True
    if kind == "configMap":
        cm_name = _str(src.get("name"), kw + ".name")
        optional = get_bool(src, "optional", kw)
        obj = ctx.data.config_maps.get(cm_name)
        mode = _mode(src.get("defaultMode"), kw + ".defaultMode", 0o644)
        vol.dir_mode = 0o755
        if obj is None:
            if optional:
                return vol
            raise PodRejected(kw + ".name", f"interLink sent no data for configMap {cm_name!r}")
        _keyed_files(vol, obj, get_list(src, "items", kw), kw, mode, False, optional)
        return vol
    if kind == "secret":
        s_name = _str(src.get("secretName"), kw + ".secretName")
        optional = get_bool(src, "optional", kw)
        obj = ctx.data.secrets.get(s_name)
        mode = _mode(src.get("defaultMode"), kw + ".defaultMode", 0o600)
        if obj is None:
            if optional:
                return vol
            raise PodRejected(kw + ".secretName", f"interLink sent no data for secret {s_name!r}")
        _keyed_files(vol, obj, get_list(src, "items", kw), kw, mode, True, optional)
        return vol
    # projected and downwardAPI: interLink resolves them into projectedvolumemaps[volume name], keyed by path.
    mode = _mode(src.get("defaultMode"), kw + ".defaultMode", 0o600)
    obj = ctx.data.projected.get(name)
    if obj is not None:
        for path, content in _object_files(obj).items():
            _add_file(vol, _rel_path(path, obj.key_where(path)), content, mode, True)
        return vol
    if kind == "downwardAPI":
        _downward_items(ctx, vol, get_list(src, "items", kw), kw, mode)
        return vol
    for j, source in enumerate(get_list(src, "sources", kw)):
        _projected_source(ctx, vol, _dict(source, f"{kw}.sources[{j}]"), f"{kw}.sources[{j}]", mode)
    return vol


def _downward_items(ctx: Context, vol: Volume, items: list[Any], where: str, mode: int, base: str = "") -> None:
    for j, item in enumerate(items):
        iw = f"{where}.items[{j}]"
        item = _dict(item, iw)
        path = _rel_path(item.get("path"), iw + ".path")
        if "fieldRef" not in item:
            raise PodRejected(iw, "only fieldRef items are supported (resourceFieldRef is not)")
        fp = _str(get_obj(item, "fieldRef", iw).get("fieldPath"), iw + ".fieldRef.fieldPath")
        value = _downward_value(ctx, fp, iw + ".fieldRef.fieldPath")
        _add_file(vol, base + path, value.encode(), _mode(item.get("mode"), iw + ".mode", mode), True)


def _projected_source(ctx: Context, vol: Volume, source: dict[str, Any], where: str, mode: int) -> None:
    """Best effort when interLink sent no projectedvolumemaps (e.g. the VK disables projected volumes):
    resolve what the pod and the attached data allow; the SA token and kube-root-ca.crt are left out."""
    if "serviceAccountToken" in source:
        return
    if "downwardAPI" in source:
        dw = where + ".downwardAPI"
        _downward_items(ctx, vol, get_list(get_obj(source, "downwardAPI", where), "items", dw), dw, mode)
        return
    for kind, pool in (("configMap", ctx.data.config_maps), ("secret", ctx.data.secrets)):
        if kind in source:
            kw = f"{where}.{kind}"
            src = get_obj(source, kind, where)
            obj_name = _str(src.get("name"), kw + ".name")
            optional = get_bool(src, "optional", kw)
            obj = pool.get(obj_name)
            if obj is None:
                if optional or obj_name == "kube-root-ca.crt":
                    return
                raise PodRejected(kw + ".name", f"interLink sent no data for {kind} {obj_name!r}")
            _keyed_files(vol, obj, get_list(src, "items", kw), kw, mode, True, optional)
            return
    if not source:
        raise PodRejected(where, "empty projected volume source")
    raise PodRejected(child(where, next(iter(source))), "unsupported projected volume source")


@dataclass(slots=True)
class Mount:
    volume: Volume
    mount_path: str
    sub_path: str
    read_only: bool


@dataclass(slots=True)
class ContainerPlan:
    index: int
    name: str
    qname: str
    init: bool
    body: list[str]
    gpus: int = 0
    resources: tuple[int, int, int] = (0, 0, 0)


def _env(ctx: Context, c: dict[str, Any], where: str) -> tuple[list[tuple[str, str, bool]], dict[str, str]]:
    """(name, value, is_secret) in Kubernetes order (envFrom, then env; later wins) and the final map."""
    out: list[tuple[str, str, bool]] = []
    values: dict[str, str] = {}
    for j, ref in enumerate(get_list(c, "envFrom", where)):
        rw = f"{where}.envFrom[{j}]"
        ref = _dict(ref, rw)
        prefix = get_str(ref, "prefix", rw)
        if "configMapRef" in ref:
            pool, secret, kind = ctx.data.config_maps, False, "configMapRef"
        elif "secretRef" in ref:
            pool, secret, kind = ctx.data.secrets, True, "secretRef"
        else:
            raise PodRejected(rw, "envFrom needs configMapRef or secretRef")
        src = get_obj(ref, kind, rw)
        obj_name = _str(src.get("name"), f"{rw}.{kind}.name")
        optional = get_bool(src, "optional", f"{rw}.{kind}")
        obj = pool.get(obj_name)
        if obj is None:
            if optional:
                continue
            raise PodRejected(f"{rw}.{kind}", f"interLink sent no data for {obj_name!r} to resolve envFrom")
        for key, content in _object_files(obj).items():
            try:
                text = content.decode()
            except UnicodeDecodeError:
                raise PodRejected(f"{rw}.{kind}", f"key {key!r} is not UTF-8 text") from None
            if secret and ctx.mask:
                text = MASK
            out.append((prefix + key, text, secret))
            values[prefix + key] = text
    for j, var in enumerate(get_list(c, "env", where)):
        vw = f"{where}.env[{j}]"
        var = _dict(var, vw)
        name = var.get("name")
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise PodRejected(vw + ".name", f"invalid environment variable name {name!r}")
        secret = False
        if var.get("valueFrom") is not None:
            ew = vw + ".valueFrom"
            value, secret = _value_from(ctx, _dict(var["valueFrom"], ew), ew)
            if value is None:
                continue
            if secret and ctx.mask:
                value = MASK  # masked at the source so $(VAR) expansions cannot reveal it
        else:
            value = get_str(var, "value", vw)
            if "$" in value:
                value = expand(value, values)
        out.append((name, value, secret))
        values[name] = value
    return out, values


def _value_from(ctx: Context, ref: dict[str, Any], where: str) -> tuple[str | None, bool]:
    """Resolve an env valueFrom the VK left unresolved, when the pod or interLink data allow it."""
    if "fieldRef" in ref:
        fp = _str(get_obj(ref, "fieldRef", where).get("fieldPath"), where + ".fieldRef.fieldPath")
        return _downward_value(ctx, fp, where + ".fieldRef.fieldPath"), False
    for kind, pool, secret in (
        ("configMapKeyRef", ctx.data.config_maps, False),
        ("secretKeyRef", ctx.data.secrets, True),
    ):
        if kind in ref:
            kw = f"{where}.{kind}"
            src = get_obj(ref, kind, where)
            obj = pool.get(get_str(src, "name", kw))
            files = _object_files(obj) if obj is not None else {}
            key = get_opt_str(src, "key", kw)
            if key is not None and key in files:
                try:
                    return files[key].decode(), secret
                except UnicodeDecodeError:
                    raise PodRejected(kw, "value is not UTF-8 text") from None
            if get_bool(src, "optional", kw):
                return None, secret
            raise PodRejected(f"{where}.{kind}", "unresolved valueFrom: interLink sent no value for it")
    if not ref:
        raise PodRejected(where, "empty valueFrom")
    raise PodRejected(child(where, next(iter(ref))), "unresolved valueFrom is not supported")


def _argv(c: dict[str, Any], key: str, where: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """(expanded word, quoted word) of command or args; NUL rejected with the word's index."""
    out = []
    for k, w in enumerate(get_list(c, key, where)):
        if not isinstance(w, str):
            raise PodRejected(f"{where}.{key}[{k}]", "expected a string")
        if "$" in w:
            w = expand(w, env)
        out.append((w, _q(w, f"{where}.{key}[{k}]")))
    return out


def _check_keys(
    obj: dict[str, Any], supported: frozenset[str], ignored: frozenset[str], where: str, kubernetes_has: frozenset[str]
) -> None:
    for key in obj:
        if key not in supported and key not in ignored:
            raise kubernetes_fields.unhonoured(where, key, kubernetes_has)


def _words(text: str, key: str) -> list[str]:
    """The shell words of annotation ``key`` (a string: read with :func:`_ann`)."""
    try:
        return list(_split(text))
    except ValueError as e:
        raise PodRejected(_ann_field(key), f"cannot split into shell words: {e}") from None


@lru_cache(maxsize=1024)
def _split(text: str) -> tuple[str, ...]:
    """shlex.split is slow (~15 us) and annotations repeat across the pods of a workload."""
    return tuple(shlex.split(text))


def _ann_field(key: str) -> str:
    return member("metadata.annotations", key)


def _mounts(
    ctx: Context,
    c: dict[str, Any],
    where: str,
    volumes: dict[str, Volume],
    env: dict[str, str],
    used: dict[str, Volume],
    extra_host: list[str],
) -> list[Mount]:
    mounts: list[Mount] = []
    binds = ctx.runtime != RT.NONE
    for j, m in enumerate(get_list(c, "volumeMounts", where)):
        mw = f"{where}.volumeMounts[{j}]"
        m = _dict(m, mw)
        _check_keys(m, MOUNT_KEYS, frozenset(), mw, kubernetes_fields.VOLUME_MOUNT)
        vol_name = get_str(m, "name", mw)
        vol = volumes.get(vol_name)
        if vol is None:
            raise PodRejected(mw + ".name", f"no volume named {vol_name!r} in spec.volumes")
        path = _abs_path(m.get("mountPath"), mw + ".mountPath")
        if binds and ("," in path or ":" in path):
            raise PodRejected(mw + ".mountPath", "',' and ':' cannot be expressed in a bind mount")
        sub = get_str(m, "subPath", mw)
        sub_expr = get_str(m, "subPathExpr", mw)
        if sub_expr:
            sub = expand(sub_expr, env)
        if sub:
            sub = _rel_path(sub, mw + ".subPath")
            if binds and ("," in sub or ":" in sub):
                raise PodRejected(mw + ".subPath", "',' and ':' cannot be expressed in a bind mount")
        if get_opt_str(m, "mountPropagation", mw) not in (None, "None", "HostToContainer"):
            raise PodRejected(mw + ".mountPropagation", "only None/HostToContainer propagation is possible")
        if get_opt_str(m, "recursiveReadOnly", mw) == "Enabled":
            # A read-only bind does not reach the mounts below it; "IfPossible" and "Disabled" are honest.
            raise PodRejected(mw + ".recursiveReadOnly", "Enabled cannot be guaranteed off-cluster; use IfPossible")
        if any(x.mount_path.rstrip("/") == path.rstrip("/") for x in mounts):
            raise PodRejected(mw + ".mountPath", f"{path!r} is mounted twice")
        if sub and vol.kind == "emptyDir":  # Kubernetes creates a missing subPath in an emptyDir
            extra_host.append(f"mkdir -p -- {quote(f'{vol.rel_dir}/{sub}')}")
        if binds and vol.host_path is not None and ("," in vol.host_path or ":" in vol.host_path):
            raise PodRejected(mw + ".name", "a hostPath with ',' or ':' cannot be expressed in a bind mount")
        used[vol.name] = vol
        mounts.append(Mount(vol, path, sub, get_bool(m, "readOnly", mw) or vol.read_only))
    mounts.sort(key=lambda x: x.mount_path.count("/"))
    return mounts


def _bind_source(mount: Mount) -> tuple[str, bool]:
    """(source, under job dir?) of a mount: host path, or a dir below volumes/."""
    if mount.volume.host_path is not None:
        base = mount.volume.host_path.rstrip("/") or ""
        return (f"{base}/{mount.sub_path}" if mount.sub_path else mount.volume.host_path), False
    base = mount.volume.rel_dir
    return (f"{base}/{mount.sub_path}" if mount.sub_path else base), True


def _image(ctx: Context, c: dict[str, Any], where: str) -> tuple[str | None, str]:
    """(local image file to try first, image reference otherwise)."""
    image = c.get("image")
    if not isinstance(image, str) or not image.strip():
        raise PodRejected(where + ".image", "an image is required for this runtime")
    if image.startswith("/") or _SCHEME.match(image):
        remote = image
    else:
        prefix = _ann(ctx, ANN_IMAGE_ROOT)
        if prefix is None:
            prefix = ctx.bc.image_prefix or ("docker://" if ctx.runtime in ENV_PREFIX else "")
        remote = prefix + image
    local = None
    if ctx.bc.image_dir and ctx.runtime in ENV_PREFIX and not image.startswith("/"):
        bare = _SCHEME.sub("", image)
        local = ctx.bc.image_dir.rstrip("/") + "/" + bare.replace(":", "_").replace("/", "_")
    return local, remote


def _container(
    ctx: Context,
    c: Any,
    index: int,
    init: bool,
    where: str,
    volumes: dict[str, Volume],
    used: dict[str, Volume],
    names: set[str],
    extra: dict[str, list[str]],
) -> ContainerPlan:
    c = _dict(c, where)
    _check_keys(c, CONTAINER_SUPPORTED, CONTAINER_IGNORED, where, kubernetes_fields.CONTAINER)
    name = c.get("name")
    if not is_dns_label(name):
        raise PodRejected(where + ".name", f"container names must be DNS labels: {name!r}")
    if name in names:
        raise PodRejected(where + ".name", f"duplicate container name {name!r}")
    names.add(name)
    res = container_resources(c, where)
    env_list, env_map = _env(ctx, c, where)
    command_words = _argv(c, "command", where, env_map)  # (word, shell-quoted word)
    raw_command = [w for w, _ in command_words]
    command = [qw for _, qw in command_words]
    args = [qw for _, qw in _argv(c, "args", where, env_map)]
    workdir = get_str(c, "workingDir", where)
    if workdir:
        _abs_path(workdir, where + ".workingDir")
    mounts = _mounts(ctx, c, where, volumes, env_map, used, extra["host"])
    mpi = [] if init else extra["mpi"]
    q = quote
    masked = "'***'"

    def env_word(prefix: str, k: int, n: str, v: str, secret: bool) -> str:
        if ctx.mask and secret:
            return _q(prefix + n + "=", f"{where}.env") + masked
        return _q(f"{prefix}{n}={v}", f"{where}.env[{k}]")

    body: list[str] = []
    rt = ctx.runtime
    if res[2] and rt != RT.NONE and not ctx.bc.gpu_support:
        kind = "limits" if GPU_RESOURCE in (c["resources"].get("limits") or ()) else "requests"  # checked: objects
        raise PodRejected(member(f"{where}.resources.{kind}", GPU_RESOURCE), "this pool offers no GPUs to the runtime")
    if rt == RT.NONE:
        if not command:
            raise PodRejected(where + ".command", "runtime 'none' runs the command on the host: it is required")
        if "=" in raw_command[0]:
            raise PodRejected(where + ".command[0]", "a program name with '=' cannot be run through env(1)")
        root = f"{layout.ROOTFS_DIR}/{name}"
        cwd = root + workdir.rstrip("/") if workdir else root
        for m in mounts:
            src, under_job = _bind_source(m)
            target = root + m.mount_path.rstrip("/")
            parent = target.rsplit("/", 1)[0]
            qsrc = f'"$__job_dir"/{q(src)}' if under_job else _q(src, where)
            extra["host"].append(f"mkdir -p -- {_q(parent, where)} && ln -sfn -- {qsrc} {_q(target, where)}")
        extra["host"].append(f"mkdir -p -- {_q(cwd, where + '.workingDir')}")  # after the links: may be inside
        body.append(f'cd -- "$__job_dir"/{_q(cwd, where)} || exit 126')
        words = [*map(q, mpi), "env", "--"]
        words += [env_word("", k, n, v, s) for k, (n, v, s) in enumerate(env_list)]
        words.append(f'"{layout.ROOTFS_ENV}=$__job_dir/"{q(root)}')
        words += command
        words += args
    else:
        local, remote = _image(ctx, c, where)
        qremote = _q(remote, where + ".image")
        if local is not None:
            qlocal = _q(local, where + ".image")
            body.append(f"if [ -e {qlocal} ]; then __img={qlocal}; else __img={qremote}; fi")
            img = '"$__img"'
        else:
            img = qremote
        words = list(map(q, mpi))
        if rt == RT.PODMAN:
            words += [extra["exe"][0], "run", "--rm", *extra["runtime_flags"]]
            if res[2]:
                words += ["--device", "nvidia.com/gpu=all"]
            for k, (n, v, s) in enumerate(env_list):
                words += ["--env", env_word("", k, n, v, s)]
            for b in extra["binds"]:
                words += ["-v", b]
            for m in mounts:
                src, under_job = _bind_source(m)
                spec = f"{src}:{m.mount_path}" + (":ro" if m.read_only else "")
                words += ["-v", (f'"$__job_dir"/{q(spec)}' if under_job else _q(spec, where))]
            if workdir:
                words += ["--workdir", _q(workdir, where + ".workingDir")]
            if command:
                words += ["--entrypoint", quote(json.dumps(raw_command, ensure_ascii=False))]
            words.append(img)
            words += args
        else:
            prefix = ENV_PREFIX[rt]
            if env_list:
                words += ["env", "--"]
                for k, (n, v, s) in enumerate(env_list):
                    if not _IDENTIFIER.match(n):
                        rt_name = RUNTIME_NAMES[rt]
                        raise PodRejected(f"{where}.env[{k}].name", f"{rt_name} needs identifier names: {n!r}")
                    words.append(env_word(prefix, k, n, v, s))
            words += [extra["exe"][0], *extra["global"], "exec" if command else "run", *extra["runtime_flags"]]
            if res[2]:
                words.append("--nv")
            words += extra["options"]
            for b in extra["binds"]:
                words += ["--bind", b]
            for m in mounts:
                src, under_job = _bind_source(m)
                spec = f"{src}:{m.mount_path}" + (":ro" if m.read_only else "")
                words += ["--bind", (f'"$__job_dir"/{q(spec)}' if under_job else _q(spec, where))]
            if workdir:
                words += ["--pwd", _q(workdir, where + ".workingDir")]
            words.append(img)
            words += command
            words += args
    body.append("exec " + " ".join(words))
    return ContainerPlan(index, name, q(name), init, body, res[2], res)


# --- rendering -----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    """Compiled once per process; templates ship as package data."""
    text = importlib_resources.files(__package__).joinpath("templates/job.sh.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        comment_start_string="<#",
        comment_end_string="#>",  # bash uses {# (${#array[@]})
        keep_trailing_newline=True,
    )
    return env.from_string(text)


def _file_line(f: VolumeFile, mask: bool) -> str:
    qpath = quote(f.path)
    if mask and f.secret:
        return f"__t {qpath} '<masked secret: {len(f.content)} bytes>'"
    if b"\x00" not in f.content:
        try:
            return f"__t {qpath} {quote(f.content.decode('utf-8'))}"
        except UnicodeDecodeError:
            pass
    return f"__b {qpath} {base64.b64encode(f.content).decode('ascii')}"


def _unwrap(pod_data: Any) -> tuple[dict[str, Any], Any]:
    """Accept interLink >= 0.5 (object), <= 0.4 (one-element list) and a bare pod."""
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
        return pod, pod_data.get("container")
    return pod_data, None


def render_job(
    pod_data: dict[str, Any], build_config: pb.BuildConfig | None = None, *, mask_secrets: bool = False
) -> pb.JobScript:
    """Render interLink's RetrievedPodData (or a bare pod) for a pool; raise PodRejected for what
    cannot run faithfully. ``mask_secrets`` replaces secret contents for display (the script is then not runnable)."""
    pod, entries = _unwrap(pod_data)
    bc = build_config if build_config is not None else pb.BuildConfig()
    runtime = bc.runtime if bc.runtime != RT.UNSPECIFIED else RT.APPTAINER
    meta = _dict(pod.get("metadata"), "metadata")
    spec = _dict(pod.get("spec"), "spec")
    annotations = _dict(meta.get("annotations"), "metadata.annotations")
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise PodRejected("metadata.uid", "the pod UID is required (it names the job directory)")
    pod_name, pod_namespace = get_str(meta, "name", "metadata"), get_str(meta, "namespace", "metadata")
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
    ctx = Context(pod, meta, spec, annotations, _pod_data(entries), bc, runtime, mask_secrets)

    volumes: dict[str, Volume] = {}
    for i, raw in enumerate(_list(spec.get("volumes"), "spec.volumes")):
        vol = _volume(ctx, i, _dict(raw, f"spec.volumes[{i}]"))
        if vol.name in volumes:
            raise PodRejected(f"spec.volumes[{i}].name", f"duplicate volume name {vol.name!r}")
        volumes[vol.name] = vol

    extra: dict[str, list[str]] = {
        "host": [],
        "exe": [quote(bc.executable or RUNTIME_NAMES[runtime])],
        "runtime_flags": [quote(f) for f in bc.runtime_flags],
        "binds": [quote(b) for b in bc.binds],
        "mpi": [],
        "global": [],
        "options": [],
    }
    mpi = _ann(ctx, ANN_MPI_FLAGS)
    if mpi is not None and mpi.strip() != "true":
        extra["mpi"] = _words(mpi, ANN_MPI_FLAGS)
    if runtime in ENV_PREFIX:
        for key, slot in ((ANN_SING_COMMANDS, "global"), (ANN_SING_OPTIONS, "options"), (ANN_SING_MOUNTS, "options")):
            value = _ann(ctx, key)
            if value is not None:
                extra[slot] += [quote(w) for w in _words(value, key)]
    flags = _ann(ctx, ANN_FLAGS)
    backend_flags = _words(flags, ANN_FLAGS) if flags is not None else []

    used: dict[str, Volume] = {}
    names: set[str] = set()
    plans: list[ContainerPlan] = []
    raw_init = get_list(spec, "initContainers", "spec")
    raw_main = get_list(spec, "containers", "spec")
    if not raw_main:
        raise PodRejected("spec.containers", "a pod needs at least one container")
    for i, c in enumerate(raw_init):
        if isinstance(c, dict) and c.get("restartPolicy") is not None:
            raise PodRejected(f"spec.initContainers[{i}].restartPolicy", "sidecar containers are not supported")
        plans.append(_container(ctx, c, len(plans), True, f"spec.initContainers[{i}]", volumes, used, names, extra))
    for i, c in enumerate(raw_main):
        plans.append(_container(ctx, c, len(plans), False, f"spec.containers[{i}]", volumes, used, names, extra))

    resources = pod_resources_from(
        [p.resources for p in plans if not p.init], [p.resources for p in plans if p.init], spec
    )

    # Materialise only the volumes some container mounts.
    dirs: list[str] = []
    files: list[str] = []
    modes: dict[str, list[str]] = {}
    host_lines: list[str] = []
    for vol in sorted(used.values(), key=lambda v: v.index):
        host_lines += vol.host_lines
        if vol.host_path is not None:
            continue
        dirs.append(quote(vol.rel_dir))
        dirs += [quote(d) for d in dict.fromkeys(vol.dirs)]
        if vol.dir_mode != 0o700:
            modes.setdefault(f"{vol.dir_mode:04o}", []).append(quote(vol.rel_dir))
            modes[f"{vol.dir_mode:04o}"] += [quote(d) for d in dict.fromkeys(vol.dirs)]
        for f in vol.files:
            files.append(_file_line(f, mask_secrets))
            if f.mode != 0o600:
                modes.setdefault(f"{f.mode:04o}", []).append(quote(f.path))
    host_lines = list(dict.fromkeys(host_lines + extra["host"]))

    exports: list[tuple[str, str]] = []
    if bc.cache_dir and runtime in CACHE_ENV:
        exports.append((CACHE_ENV[runtime], quote(bc.cache_dir)))
    grace = get_int(spec, "terminationGracePeriodSeconds", "spec")
    if grace is None or grace < 0:
        grace = DEFAULT_GRACE_SECONDS
    pre_exec = _ann(ctx, ANN_PRE_EXEC) or ""

    script = _template().render(
        runtime_name=RUNTIME_NAMES[runtime],
        job_dir_env=layout.JOB_DIR_ENV,
        containers_dir=layout.CONTAINERS_DIR,
        volumes_dir=layout.VOLUMES_DIR,
        rootfs_dir=layout.ROOTFS_DIR,
        deadline_file=layout.DEADLINE_FILE,
        started_suffix=layout.STARTED_SUFFIX,
        exit_suffix=layout.EXIT_SUFFIX,
        log_suffix=layout.LOG_SUFFIX,
        all_names=" ".join(p.qname for p in plans),
        grace_seconds=max(grace, 1),
        wall_seconds=int(resources.wall_time.total_seconds()) if resources.wall_time else 0,
        exports=exports,
        dirs=" ".join(dirs),
        files=files,
        chmods=[(m, " ".join(paths)) for m, paths in modes.items()],
        host_lines=host_lines,
        admin_pre_exec=bc.pre_exec.strip("\n"),
        pod_pre_exec=pre_exec.strip("\n"),
        containers=plans,
        init_containers=[p for p in plans if p.init],
        main_containers=[p for p in plans if not p.init],
    )
    try:
        script.encode("utf-8")
    except UnicodeEncodeError:
        raise PodRejected("pod", "contains text that is not valid Unicode (lone surrogates)") from None
    return pb.JobScript(
        pod=pb.PodRef(uid=uid, namespace=pod_namespace, name=pod_name),
        script=script,
        init_containers=[p.name for p in plans if p.init],
        containers=[p.name for p in plans if not p.init],
        resources=resources,
        backend_flags=backend_flags,
    )
