"""Pod volumes materialised for the job (files embedded in the script, or host paths) and container mounts."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout

from . import pod_model as pm
from .context import RenderContext
from .environment import expand
from .errors import Checked, PodRejected, checked
from .fields import relative_path
from .launch import MountPoint, SetupEntry
from .quoting import quote, quote_field
from .site_storage import claim_lines, in_site_dir, site_volume, storage_request
from .sources import downward_value

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
    host_path: str | None = None  # hostPath, claim, nfs: the path on the site
    site_root: str | None = None  # the site's directory it must stay below (site_storage)
    storage: pb.StorageMount | None = None  # the job's entry for it (the submitter checks it again)
    read_only: bool = False  # configMap, secret, projected, downwardAPI are always read-only
    files: list[VolumeFile] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    dir_mode: int = 0o700
    host_lines: list[str] = field(default_factory=list)

    @property
    def rel_dir(self) -> str:
        return f"{layout.VOLUMES_DIR}/{self.name}"


def _keyed_files(
    vol: Volume,
    obj: pm.DataObject,
    items: Checked[tuple[pm.KeyToPath, ...]],
    mode: int,
    secret: bool,
    optional: bool,
) -> None:
    """Add a ConfigMap/Secret's keys (all, or ``items`` key->path with per-item mode) to a volume."""
    files = checked(obj.files)
    items = checked(items)
    if items:
        for item in items:
            if item.key not in files:
                if optional:
                    continue
                raise PodRejected(item.where + ".key", f"key {item.key!r} not found in the data sent by interLink")
            path = checked(item.path)
            item_mode = checked(item.mode)
            _add_file(vol, path, files[item.key], mode if item_mode is None else item_mode, secret)
    else:
        for key, content in files.items():
            _add_file(vol, relative_path(key, obj.key_where(key)), content, mode, secret)


def _add_file(vol: Volume, path: str, content: bytes, mode: int, secret: bool) -> None:
    if secret:
        mode &= 0o700  # secrets never get group/other bits, whatever defaultMode says
    vol.files.append(VolumeFile(f"{vol.rel_dir}/{path}", content, mode, secret))
    if "/" in path:
        vol.dirs.append(f"{vol.rel_dir}/{path.rsplit('/', 1)[0]}")


def build_volume(ctx: RenderContext, spec: pm.VolumeSpec) -> Volume:
    """``spec.volumes[index]`` as files and directories to create, or a host path to use."""
    kw, src = spec.where, spec.source
    vol = Volume(name=spec.name, kind=spec.kind, index=spec.index)
    if isinstance(src, pm.EmptyDir):
        vol.dir_mode = 0o777  # like Kubernetes; the job dir (0700) keeps other users out
        return vol
    request = storage_request(spec, ctx.data)
    if request is not None:
        site = site_volume(ctx, spec, request)
        vol.host_path, vol.site_root, vol.storage = site.resolved.path, site.resolved.root, site.mount
        vol.read_only = site.read_only
        if isinstance(src, pm.HostPath):
            _host_path_lines(vol, kw, src.path_type)
        elif isinstance(src, pm.ClaimVolume):
            vol.host_lines += claim_lines(spec, site.resolved)
        return vol
    assert not isinstance(src, pm.HostPath | pm.ClaimVolume | pm.NfsVolume), "storage volumes: resolved above"
    vol.read_only = True
    if isinstance(src, pm.ObjectVolume):
        obj = (ctx.data.secrets if src.secret else ctx.data.config_maps).get(src.object_name)
        if not src.secret:
            vol.dir_mode = 0o755  # a secret's dir stays 0700
        if obj is None:
            if src.optional:
                return vol
            raise PodRejected(f"{kw}.{src.name_key}", f"interLink sent no data for {spec.kind} {src.object_name!r}")
        _keyed_files(vol, obj, src.items, src.default_mode, src.secret, src.optional)
        return vol
    # projected and downwardAPI: interLink resolves them into projectedvolumemaps[volume name], keyed by path.
    projected = ctx.data.projected.get(spec.name)
    if projected is not None:
        for path, content in checked(projected.files).items():
            _add_file(vol, relative_path(path, projected.key_where(path)), content, src.default_mode, True)
        return vol
    if isinstance(src, pm.DownwardVolume):
        _downward_items(ctx, vol, checked(src.items), src.default_mode)
        return vol
    for source in checked(src.sources):
        _projected_source(ctx, vol, source, src.default_mode)
    return vol


def _host_path_lines(vol: Volume, kw: str, htype: str) -> None:
    """A hostPath's type: made (below its allowed prefix, checked first) or checked at run time."""
    assert vol.host_path is not None and vol.site_root is not None
    path = vol.host_path
    qp = quote_field(path, kw + ".path")
    if htype == "DirectoryOrCreate":
        vol.host_lines.append(in_site_dir(vol.site_root, path, kw + ".path", True))
    elif htype == "FileOrCreate":
        parent = path.rsplit("/", 1)[0] or "/"
        failed = quote_field("cannot create " + path, kw)
        vol.host_lines.append(in_site_dir(vol.site_root, parent, kw + ".path", True))
        vol.host_lines.append(f"[ -e {qp} ] || touch -- {qp} || __setup_failed {failed}")
    elif htype:
        vol.host_lines.append(f"__need {HOSTPATH_TESTS[htype]} {qp} {htype}")


def _downward_items(ctx: RenderContext, vol: Volume, items: tuple[pm.DownwardItem, ...], mode: int) -> None:
    for item in items:
        value = downward_value(ctx.pod, item.field_path, item.where + ".fieldRef.fieldPath")
        _add_file(vol, item.path, value.encode(), mode if item.mode is None else item.mode, True)


def _projected_source(ctx: RenderContext, vol: Volume, source: pm.ProjectionSource, mode: int) -> None:
    """Best effort when interLink sent no projectedvolumemaps (e.g. the VK disables projected volumes):
    resolve what the pod and the attached data allow; the SA token and kube-root-ca.crt are left out."""
    if isinstance(source, pm.DownwardProjection):
        _downward_items(ctx, vol, source.items, mode)
        return
    obj = (ctx.data.secrets if source.kind == "secret" else ctx.data.config_maps).get(source.object_name)
    if obj is None:
        if source.optional or source.object_name == "kube-root-ca.crt":
            return
        raise PodRejected(source.where + ".name", f"interLink sent no data for {source.kind} {source.object_name!r}")
    _keyed_files(vol, obj, source.items, mode, True, source.optional)


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
    c: pm.Container,
    volumes: dict[str, Volume],
    env: dict[str, str],
    used: dict[str, Volume],
    host_setup: list[SetupEntry],
) -> list[Mount]:
    """A container's ``volumeMounts``, shallowest first; records the volumes used and the host set-up they need."""
    mounts: list[Mount] = []
    binds = ctx.runtime.binds
    for m in c.volume_mounts:
        mw = m.where
        vol = volumes[m.name]  # the parser checked the name
        path = m.mount_path
        if binds and ("," in path or ":" in path):
            raise PodRejected(mw + ".mountPath", "',' and ':' cannot be expressed in a bind mount")
        sub = expand(m.sub_path_expr, env) if m.sub_path_expr else m.sub_path
        if sub:
            sub = relative_path(sub, mw + ".subPath")
            if binds and ("," in sub or ":" in sub):
                raise PodRejected(mw + ".subPath", "',' and ':' cannot be expressed in a bind mount")
        if sub and vol.kind == "emptyDir":  # Kubernetes creates a missing subPath in an emptyDir
            host_setup.append(layout.LayoutDir(f"{vol.rel_dir}/{sub}"))
        if vol.site_root is not None and vol.host_path is not None:  # checked at start: see site_storage
            source = f"{vol.host_path.rstrip('/')}/{sub}" if sub else vol.host_path
            field = mw + (".subPathExpr" if m.sub_path_expr else ".subPath") if sub else f"{mw}.name"
            create = bool(sub) and not (m.read_only or vol.read_only)
            vol.host_lines.append(in_site_dir(vol.site_root, source, field, create))
        if binds and vol.host_path is not None and ("," in vol.host_path or ":" in vol.host_path):
            raise PodRejected(mw + ".name", "a hostPath with ',' or ':' cannot be expressed in a bind mount")
        used[vol.name] = vol
        mounts.append(Mount(vol, path, sub, m.read_only or vol.read_only))
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
