"""Pod volumes materialised for the job (files embedded in the script, or host paths) and container mounts."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from interlink_nats.kernel import layout
from interlink_nats.kernel.names import is_dns_label

from . import kubernetes_fields
from .allowed_fields import MOUNT_KEYS, VOLUME_KINDS, check_keys
from .context import RenderContext
from .environment import expand
from .errors import PodRejected
from .fields import (
    absolute_path,
    as_obj,
    as_str,
    child,
    get_bool,
    get_list,
    get_obj,
    get_opt_str,
    get_str,
    relative_path,
)
from .launch import MountPoint, SetupEntry
from .quoting import quote, quote_field
from .sources import Source, downward_value, object_files

HOSTPATH_TESTS = {"Directory": "d", "File": "f", "Socket": "S", "CharDevice": "c", "BlockDevice": "b"}
"""hostPath types checked at run time, with the ``test`` operator that checks them."""


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
    files = object_files(src)
    if items:
        for j, item in enumerate(items):
            iw = f"{where}.items[{j}]"
            item = as_obj(item, iw)
            key = as_str(item.get("key"), iw + ".key")
            if key not in files:
                if optional:
                    continue
                raise PodRejected(iw + ".key", f"key {key!r} not found in the data sent by interLink")
            path = relative_path(item.get("path"), iw + ".path")
            _add_file(vol, base + path, files[key], _mode(item.get("mode"), iw + ".mode", mode), secret)
    else:
        for key, content in files.items():
            _add_file(vol, base + relative_path(key, src.key_where(key)), content, mode, secret)


def _add_file(vol: Volume, path: str, content: bytes, mode: int, secret: bool) -> None:
    if secret:
        mode &= 0o700  # secrets never get group/other bits, whatever defaultMode says
    vol.files.append(VolumeFile(f"{vol.rel_dir}/{path}", content, mode, secret))
    if "/" in path:
        vol.dirs.append(f"{vol.rel_dir}/{path.rsplit('/', 1)[0]}")


def build_volume(ctx: RenderContext, index: int, raw: dict[str, Any]) -> Volume:
    """``spec.volumes[index]`` as files and directories to create, or a host path to use."""
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
    src = as_obj(raw[kind], f"{where}.{kind}")
    kw = f"{where}.{kind}"
    vol = Volume(name=name, kind=kind, index=index)
    if kind == "emptyDir":
        vol.dir_mode = 0o777  # like Kubernetes; the job dir (0700) keeps other users out
        return vol
    if kind == "hostPath":
        path = absolute_path(src.get("path"), kw + ".path")
        vol.host_path = path
        htype = get_str(src, "type", kw)
        qp = quote_field(path, kw + ".path")
        if htype == "DirectoryOrCreate":
            failed = quote_field("cannot create hostPath " + path, kw)
            vol.host_lines.append(f"mkdir -p -- {qp} || __setup_failed {failed}")
        elif htype == "FileOrCreate":
            parent = path.rsplit("/", 1)[0] or "/"
            failed = quote_field("cannot create " + path, kw)
            vol.host_lines.append(f"mkdir -p -- {quote_field(parent, kw)} && touch -- {qp} || __setup_failed {failed}")
        elif htype in HOSTPATH_TESTS:
            vol.host_lines.append(f"__need {HOSTPATH_TESTS[htype]} {qp} {htype}")
        elif htype:
            raise PodRejected(kw + ".type", f"unknown hostPath type {htype!r}")
        return vol
    vol.read_only = True
    if kind in ("configMap", "secret"):
        secret = kind == "secret"
        name_key = "secretName" if secret else "name"
        obj_name = as_str(src.get(name_key), f"{kw}.{name_key}")
        optional = get_bool(src, "optional", kw)
        obj = (ctx.data.secrets if secret else ctx.data.config_maps).get(obj_name)
        mode = _mode(src.get("defaultMode"), kw + ".defaultMode", 0o600 if secret else 0o644)
        if not secret:
            vol.dir_mode = 0o755  # a secret's dir stays 0700
        if obj is None:
            if optional:
                return vol
            raise PodRejected(f"{kw}.{name_key}", f"interLink sent no data for {kind} {obj_name!r}")
        _keyed_files(vol, obj, get_list(src, "items", kw), kw, mode, secret, optional)
        return vol
    # projected and downwardAPI: interLink resolves them into projectedvolumemaps[volume name], keyed by path.
    mode = _mode(src.get("defaultMode"), kw + ".defaultMode", 0o600)
    obj = ctx.data.projected.get(name)
    if obj is not None:
        for path, content in object_files(obj).items():
            _add_file(vol, relative_path(path, obj.key_where(path)), content, mode, True)
        return vol
    if kind == "downwardAPI":
        _downward_items(ctx, vol, get_list(src, "items", kw), kw, mode)
        return vol
    for j, source in enumerate(get_list(src, "sources", kw)):
        _projected_source(ctx, vol, as_obj(source, f"{kw}.sources[{j}]"), f"{kw}.sources[{j}]", mode)
    return vol


def _downward_items(ctx: RenderContext, vol: Volume, items: list[Any], where: str, mode: int, base: str = "") -> None:
    for j, item in enumerate(items):
        iw = f"{where}.items[{j}]"
        item = as_obj(item, iw)
        path = relative_path(item.get("path"), iw + ".path")
        if "fieldRef" not in item:
            raise PodRejected(iw, "only fieldRef items are supported (resourceFieldRef is not)")
        fp = as_str(get_obj(item, "fieldRef", iw).get("fieldPath"), iw + ".fieldRef.fieldPath")
        value = downward_value(ctx, fp, iw + ".fieldRef.fieldPath")
        _add_file(vol, base + path, value.encode(), _mode(item.get("mode"), iw + ".mode", mode), True)


def _projected_source(ctx: RenderContext, vol: Volume, source: dict[str, Any], where: str, mode: int) -> None:
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
            obj_name = as_str(src.get("name"), kw + ".name")
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

    def point(self) -> MountPoint:
        """Where the data is: a host path, or a dir below volumes/ (the runtime makes it absolute)."""
        if self.volume.host_path is not None:
            base = self.volume.host_path.rstrip("/") or ""
            source = f"{base}/{self.sub_path}" if self.sub_path else self.volume.host_path
            return MountPoint(source, False, self.mount_path, self.read_only)
        base = self.volume.rel_dir
        source = f"{base}/{self.sub_path}" if self.sub_path else base
        return MountPoint(source, True, self.mount_path, self.read_only)


def container_mounts(
    ctx: RenderContext,
    c: dict[str, Any],
    where: str,
    volumes: dict[str, Volume],
    env: dict[str, str],
    used: dict[str, Volume],
    host_setup: list[SetupEntry],
) -> list[Mount]:
    """A container's ``volumeMounts``, shallowest first; records the volumes used and the host set-up they need."""
    mounts: list[Mount] = []
    targets: set[str] = set()
    binds = ctx.runtime.binds
    for j, m in enumerate(get_list(c, "volumeMounts", where)):
        mw = f"{where}.volumeMounts[{j}]"
        m = as_obj(m, mw)
        check_keys(m, MOUNT_KEYS, frozenset(), mw, kubernetes_fields.VOLUME_MOUNT)
        vol_name = get_str(m, "name", mw)
        vol = volumes.get(vol_name)
        if vol is None:
            raise PodRejected(mw + ".name", f"no volume named {vol_name!r} in spec.volumes")
        path = absolute_path(m.get("mountPath"), mw + ".mountPath")
        if binds and ("," in path or ":" in path):
            raise PodRejected(mw + ".mountPath", "',' and ':' cannot be expressed in a bind mount")
        sub = get_str(m, "subPath", mw)
        sub_expr = get_str(m, "subPathExpr", mw)
        if sub_expr:
            sub = expand(sub_expr, env)
        if sub:
            sub = relative_path(sub, mw + ".subPath")
            if binds and ("," in sub or ":" in sub):
                raise PodRejected(mw + ".subPath", "',' and ':' cannot be expressed in a bind mount")
        if get_opt_str(m, "mountPropagation", mw) not in (None, "None", "HostToContainer"):
            raise PodRejected(mw + ".mountPropagation", "only None/HostToContainer propagation is possible")
        if get_opt_str(m, "recursiveReadOnly", mw) == "Enabled":
            # A read-only bind does not reach the mounts below it; "IfPossible" and "Disabled" are honest.
            raise PodRejected(mw + ".recursiveReadOnly", "Enabled cannot be guaranteed off-cluster; use IfPossible")
        target = path.rstrip("/")
        if target in targets:
            raise PodRejected(mw + ".mountPath", f"{path!r} is mounted twice")
        targets.add(target)
        if sub and vol.kind == "emptyDir":  # Kubernetes creates a missing subPath in an emptyDir
            host_setup.append(layout.LayoutDir(f"{vol.rel_dir}/{sub}"))
        if binds and vol.host_path is not None and ("," in vol.host_path or ":" in vol.host_path):
            raise PodRejected(mw + ".name", "a hostPath with ',' or ':' cannot be expressed in a bind mount")
        used[vol.name] = vol
        mounts.append(Mount(vol, path, sub, get_bool(m, "readOnly", mw) or vol.read_only))
    mounts.sort(key=lambda x: x.mount_path.count("/"))
    return mounts


@dataclass(slots=True)
class VolumeSetup:
    """The script's volume set-up: directories (quoted, and as layout entries), file lines, chmods by mode,
    host commands."""

    dirs: list[str] = field(default_factory=list)
    layout: list[layout.LayoutEntry] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dir_modes: dict[str, list[str]] = field(default_factory=dict)
    file_modes: dict[str, list[str]] = field(default_factory=dict)
    host_lines: list[str] = field(default_factory=list)


def volume_setup(used: Iterable[Volume], mask: bool) -> VolumeSetup:
    """Materialise only the volumes some container mounts, in ``spec.volumes`` order.

    A file's mode comes from the umask it is created under (no process), but for modes with an execute bit,
    which a umask cannot give to a file: those are chmod'ed after."""
    setup = VolumeSetup()
    umask = _UMASK
    for vol in sorted(used, key=lambda v: v.index):
        setup.host_lines += vol.host_lines
        if vol.host_path is not None:
            continue
        dirs = [vol.rel_dir, *dict.fromkeys(vol.dirs)]
        setup.dirs += [quote(d) for d in dirs]
        mode = None if vol.dir_mode == 0o700 else vol.dir_mode
        setup.layout += [layout.LayoutDir(d, mode) for d in dirs]
        if mode is not None:
            setup.dir_modes.setdefault(f"{mode:04o}", []).extend(quote(d) for d in dirs)
        for f in vol.files:
            wanted = _UMASK if f.mode & 0o111 else 0o777 & ~f.mode
            if wanted != umask:
                setup.files.append(f"umask {wanted:04o}")
                umask = wanted
            setup.files.append(_file_line(f, mask))
            if f.mode & 0o111:
                setup.file_modes.setdefault(f"{f.mode:04o}", []).append(quote(f.path))
    if umask != _UMASK:
        setup.files.append(f"umask {_UMASK:04o}")
    return setup


_UMASK = 0o077
"""The script's umask during set-up: 0700 directories, 0600 files."""


def _file_line(f: VolumeFile, mask: bool) -> str:
    """The script line writing one file (under the umask that gives its mode): text as a quoted word, anything
    else as base64."""
    qpath = quote(f.path)
    if mask and f.secret:
        return f"__t {qpath} '<masked secret: {len(f.content)} bytes>'"
    if b"\x00" not in f.content:
        try:
            return f"__t {qpath} {quote(f.content.decode('utf-8'))}"
        except UnicodeDecodeError:
            pass
    return f"__b {qpath} {base64.b64encode(f.content).decode('ascii')}"
