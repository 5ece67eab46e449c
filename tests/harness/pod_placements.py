"""Where each string field of the pod model sits in interLink's JSON, and what a job must see of it there.

``PLACEMENTS`` maps every field ``hostile_strings.model_string_fields()`` enumerates to the placements that put a
string there (a placement: a builder of one :class:`Part` of a valid RetrievedPodData, the JSON path of the
string, and the checks a run must pass: an environment value, argv, a file's bytes, an HTTP request on the wire).
``DERIVED`` lists the model's strings that are not pod input (paths the parser builds, member names chosen from a
fixed set), each with why. ``test_pod_strings.py`` asserts the two cover the model exactly.

Each part adds one container (``c<i>``; the subject) to ``spec.containers`` or ``spec.initContainers``, and may add
one volume and interLink data objects; parts of one placement are packed into one pod (``merge``), except those
that set a pod-level singleton (``alone``), which get a pod each.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from interlink_nats.services.scripts import expand
from interlink_nats.services.scripts.fields import member
from storage_sites import STRINGS_NFS_SERVER, STRINGS_ROOT

UID = "00000000-0000-0000-0000-0000000000c0"
ENV_PROGRAM = ["/usr/bin/env", "-0"]
ARGV_PROGRAM = ["/usr/bin/printf", "%s\\0"]
FILES_PROGRAM = ["/bin/sh", "-c", "exec tar -chf - . 2>/dev/null"]
PWD_PROGRAM = ["/bin/sh", "-c", "pwd -P"]
# Stays up until every file named in its arguments exists (a hook's or probe's trace), 15 s at most.
WAIT = 'n=0; for f in "$@"; do while [ ! -e "$f" ] && [ "$n" -lt 300 ]; do sleep 0.05; n=$((n+1)); done; done'
WAIT_PROGRAM = ["/bin/sh", "-c", WAIT, "wait"]
STOP_PROGRAM = ["/bin/sh", "-c", 'kill -TERM "$PPID"; ' + WAIT, "stop"]
"""A container started after the subject: TERM to the job script (its parent), as a delete, so that preStop hooks
run. Not the subject itself: the script registers a container after starting it, and a TERM in between would
find it unregistered (a race of the job script's, reported separately)."""
# An exec handler's command: writes its own argv (NUL-separated) to the file named first.
TRACE = ["/bin/sh", "-c", 'f=$1; shift; printf "%s\\0" "$@" > "$f.tmp" && mv "$f.tmp" "$f"', "trace"]


Headers = list[tuple[str, str]] | tuple[()]


@dataclass(frozen=True)
class Check:
    kind: str  # env, argv, file, pwd, request, trace, dir
    container: str
    key: str = ""
    expected: Any = None
    optional: bool = False  # a trace that may be missing (a preStop hook the job script did not run), else exact


@dataclass
class Part:
    where: str  # JSON path of the string; "{c}" is the subject container's path, "{v}" the volume's
    container: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    volume: dict[str, Any] | None = None
    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # configMaps, secrets, projectedvolumemaps
    labels: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    pod: dict[str, dict[str, Any]] = field(default_factory=dict)  # metadata/spec/status members (``alone``)
    after: list[dict[str, Any]] = field(default_factory=list)  # containers started after the subject
    also: tuple[str, ...] = ()  # other paths that hold the same string (a rejection may name either)


@dataclass(frozen=True)
class Site:
    """What a builder may use: the container list, the handler slot, a scratch dir and the HTTP server's port."""

    containers: str = "containers"
    slot: str = ""
    tmp: str = "/nonexistent"
    port: int = 9


@dataclass(frozen=True)
class Placement:
    name: str
    build: Callable[[str, int, Site], Part]
    containers: str = "containers"
    slot: str = ""
    alone: bool = False
    pack: Callable[[list[str], Site], Part] | None = None
    """Every accepted string in one part (container ``c0``): one process for all, where the field is a list."""
    benign: str | None = "ok-1"
    """A value Kubernetes accepts here: it must render and arrive (the placement itself is sound); None: nothing
    may be here (a hook or probe of an init container)."""

    @property
    def label(self) -> str:
        return "/".join(x for x in (self.name, self.containers, self.slot) if x)


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()


def _c(i: int, program: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": f"c{i}", "image": "unused", "command": program, **extra}


def _env_check(i: int, name: str, value: str) -> Check:
    return Check("env", f"c{i}", name, value)


_FIELD_PATH = "{c}.env[0].valueFrom.fieldRef.fieldPath"


def _field_env(i: int, path: str) -> dict[str, Any]:
    return _c(i, ENV_PROGRAM, env=[{"name": "F", "valueFrom": {"fieldRef": {"fieldPath": path}}}])


def _data(kind: str, name: str, data: dict[str, str], member: str = "data") -> dict[str, list[dict[str, Any]]]:
    return {kind: [{"metadata": {"name": name}, member: data}]}


def _files_part(i: int, where: str, volume: dict[str, Any], mount: dict[str, Any], **kw: Any) -> Part:
    container = _c(i, FILES_PROGRAM, volumeMounts=[{"name": f"v{i}", **mount}])
    return Part(where, container, volume={"name": f"v{i}", **volume}, **kw)


# --- builders: (the string, the part's number, the site) -> Part ----------------------------------------------


def _container_name(s: str, i: int, x: Site) -> Part:
    return Part("{c}.name", {**_c(i, ENV_PROGRAM), "name": s})


def _image(s: str, i: int, x: Site) -> Part:
    return Part("{c}.image", _c(i, ENV_PROGRAM, image=s))


def _command(s: str, i: int, x: Site) -> Part:
    return Part("{c}.command[2]", _c(i, [*ARGV_PROGRAM, s]), [Check("argv", f"c{i}", "", [expand(s, {})])])


def _args(s: str, i: int, x: Site) -> Part:
    return Part("{c}.args[0]", _c(i, ARGV_PROGRAM, args=[s]), [Check("argv", f"c{i}", "", [expand(s, {})])])


def _working_dir(s: str, i: int, x: Site) -> Part:
    return Part("{c}.workingDir", _c(i, PWD_PROGRAM, workingDir="/w/" + s), [Check("pwd", f"c{i}", "", "/w/" + s)])


def _env_from_prefix(s: str, i: int, x: Site) -> Part:
    c = _c(i, ENV_PROGRAM, envFrom=[{"prefix": s, "configMapRef": {"name": f"env{i}"}}])
    return Part(
        "{c}.envFrom[0].prefix", c, [_env_check(i, s + "K", "v")], data=_data("configMaps", f"env{i}", {"K": "v"})
    )


def _env_from_name(s: str, i: int, x: Site) -> Part:
    c = _c(i, ENV_PROGRAM, envFrom=[{"configMapRef": {"name": s}}])
    return Part(
        "{c}.envFrom[0].configMapRef.name", c, [_env_check(i, "K", "v")], data=_data("configMaps", s, {"K": "v"})
    )


def _env_name(s: str, i: int, x: Site) -> Part:
    return Part("{c}.env[0].name", _c(i, ENV_PROGRAM, env=[{"name": s, "value": "v"}]), [_env_check(i, s, "v")])


def _env_name_expanded(s: str, i: int, x: Site) -> Part:
    c = _c(i, ENV_PROGRAM, env=[{"name": s, "value": "a$$b"}])
    return Part("{c}.env[0].name", c, [_env_check(i, s, "a$b")])


def _env_value(s: str, i: int, x: Site) -> Part:
    c = _c(i, ENV_PROGRAM, env=[{"name": "V", "value": s}])
    return Part("{c}.env[0].value", c, [_env_check(i, "V", expand(s, {}))])


def _env_value_expanded(s: str, i: int, x: Site) -> Part:
    c = _c(i, ENV_PROGRAM, env=[{"name": "A", "value": "1"}, {"name": "V", "value": s + "$(A)"}])
    return Part("{c}.env[1].value", c, [_env_check(i, "V", expand(s + "$(A)", {"A": "1"}))])


def _field_path(s: str, i: int, x: Site) -> Part:
    return Part("{c}.env[0].valueFrom.fieldRef.fieldPath", _field_env(i, s))


def _field_path_label(s: str, i: int, x: Site) -> Part:
    part = Part("{c}.env[0].valueFrom.fieldRef.fieldPath", _field_env(i, f"metadata.labels['{s}']"))
    part.labels = {s: "v"}
    part.also = ("metadata.labels",)  # the string is a label's key too: the door may refuse it there
    part.checks = [_env_check(i, "F", "v")]
    return part


def _key_ref_name(s: str, i: int, x: Site) -> Part:
    ref = {"name": "F", "valueFrom": {"configMapKeyRef": {"name": s, "key": "k"}}}
    c = _c(i, ENV_PROGRAM, env=[ref])
    return Part(
        "{c}.env[0].valueFrom.configMapKeyRef.name",
        c,
        [_env_check(i, "F", "v")],
        data=_data("configMaps", s, {"k": "v"}),
    )


def _key_ref_key(s: str, i: int, x: Site) -> Part:
    ref = {"name": "F", "valueFrom": {"secretKeyRef": {"name": f"s{i}", "key": s}}}
    c = _c(i, ENV_PROGRAM, env=[ref])
    return Part(
        "{c}.env[0].valueFrom.secretKeyRef.key",
        c,
        [_env_check(i, "F", "v")],
        data=_data("secrets", f"s{i}", {s: b64("v")}),
    )


def _mount_name(s: str, i: int, x: Site) -> Part:
    part = _files_part(i, "{c}.volumeMounts[0].name", {"emptyDir": {}}, {"mountPath": "/m"})
    part.container["volumeMounts"][0]["name"] = s
    part.volume = {"name": s, "emptyDir": {}}
    part.also = ("{v}.name",)
    return part


def _mount_path(s: str, i: int, x: Site) -> Part:
    part = _files_part(i, "{c}.volumeMounts[0].mountPath", {"configMap": {"name": f"cm{i}"}}, {"mountPath": "/m/" + s})
    part.data = _data("configMaps", f"cm{i}", {"f": "v"})
    part.checks = [Check("file", f"c{i}", "m/" + s + "/f", b"v")]
    return part


def _sub_path(s: str, i: int, x: Site, key: str = "subPath") -> Part:
    part = _files_part(i, "{c}.volumeMounts[0]." + key, {"configMap": {"name": f"cm{i}"}}, {"mountPath": "/m", key: s})
    file = expand(s, {}) if key == "subPathExpr" else s
    part.data = _data("configMaps", f"cm{i}", {file: "v"})
    part.also = (member("container[0].configMaps[{d}].data", file),)
    part.checks = [Check("file", f"c{i}", "m", b"v")]
    return part


def _sub_path_expr(s: str, i: int, x: Site) -> Part:
    return _sub_path(s, i, x, "subPathExpr")


# --- lifecycle handlers and probes: run in the job, traced to files or to the test's HTTP server ----------------

_PROBE = {"periodSeconds": 1, "failureThreshold": 30}


def _handler_part(i: int, x: Site, where: str, handler: dict[str, Any], trace: str) -> Part:
    """Container ``c<i>`` with ``handler`` in slot ``x.slot``; it waits until ``trace`` exists (a preStop hook
    only runs when the job is stopped: a container started after it stops it)."""
    c = _c(i, WAIT_PROGRAM, args=[trace])
    if x.slot in ("postStart", "preStop"):
        c["lifecycle"] = {x.slot: handler}
        path = f"{{c}}.lifecycle.{x.slot}.{where}"
    else:
        c[x.slot] = {**handler, **_PROBE}
        path = f"{{c}}.{x.slot}.{where}"
    stop = [{"name": f"stop{i}", "image": "unused", "command": STOP_PROGRAM, "args": [trace]}]
    stop = stop if x.slot == "preStop" else []
    grace = {"spec": {"terminationGracePeriodSeconds": 2}} if stop else {}  # what the stop leaves ends soon
    return Part(path, c, after=stop, pod=grace)


def _exec(s: str, i: int, x: Site) -> Part:
    trace = f"{x.tmp}/trace-{i}"
    part = _handler_part(i, x, "exec.command[5]", {"exec": {"command": [*TRACE, trace, s]}}, trace)
    part.checks = [Check("trace", f"c{i}", trace, [s])]
    return part


def _exec_all(strings: list[str], x: Site) -> Part:
    trace = f"{x.tmp}/trace-0"
    part = _handler_part(0, x, "exec.command", {"exec": {"command": [*TRACE, trace, *strings]}}, trace)
    part.checks = [Check("trace", "c0", trace, strings)]
    return part


def _request(path: str, host: str, port: int, headers: list[tuple[str, str]]) -> bytes:
    """The request ``__http_get`` sends (the template's text)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "User-Agent: kube-lifecycle/1.0", "Connection: close"]
    lines += [f"{n}: {v}" for n, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass")


def _http(i: int, x: Site, where: str, path: str = "/p", host: str = "127.0.0.1", extra: Headers = ()) -> Part:
    trace = f"{x.tmp}/request-{i}"
    headers = [("X-Case", str(i)), *extra]
    get = {"host": host, "port": x.port, "path": path, "httpHeaders": [{"name": n, "value": v} for n, v in headers]}
    part = _handler_part(i, x, "httpGet." + where, {"httpGet": get}, trace)
    part.checks = [Check("request", f"c{i}", trace, _request(path, host, x.port, headers))]
    return part


def _http_path(s: str, i: int, x: Site) -> Part:
    return _http(i, x, "path", path="/" + s)


def _http_host(s: str, i: int, x: Site) -> Part:
    """A host the job cannot reach says nothing: only that what is accepted is a host name or address."""
    part = _http(i, x, "host", host=s)
    part.container["args"] = []
    part.checks = [Check("host", f"c{i}", "", s or "127.0.0.1")]
    return part


def _http_headers(strings: list[str], x: Site, *, names: bool) -> Part:
    return _http(0, x, "httpHeaders", extra=[(s, "v") if names else (f"X-V{k}", s) for k, s in enumerate(strings)])


def _http_header_name(s: str, i: int, x: Site) -> Part:
    return _http(i, x, "httpHeaders[1].name", extra=[(s, "v")])


def _http_header_value(s: str, i: int, x: Site) -> Part:
    return _http(i, x, "httpHeaders[1].value", extra=[("X-V", s)])


def _tcp_host(s: str, i: int, x: Site) -> Part:
    part = _handler_part(i, x, "tcpSocket.host", {"tcpSocket": {"host": s, "port": x.port}}, "")
    part.container["args"] = []
    part.checks = [
        Check("host", f"c{i}", "", s or "127.0.0.1")
    ]  # rendered: the host must be one (it cannot say which case it is)
    return part


# --- the pod's own fields: a pod each, seen through the downward API -------------------------------------------


def _pod_field(path: str, section: str, member: str) -> Callable[[str, int, Site], Part]:
    def build(s: str, i: int, x: Site) -> Part:
        part = Part(f"{section}.{member}", _field_env(i, path), [_env_check(i, "F", s)])
        part.pod = {section: {member: s}}
        return part

    return build


def _toleration(field_name: str) -> Callable[[str, int, Site], Part]:
    """A toleration holding the string (read only for routing: it must never reach the job, nor crash it)."""

    def build(s: str, i: int, x: Site) -> Part:
        toleration = {"key": f"k{i}", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
        if field_name == "operator":
            del toleration["value"]  # an ``Exists`` toleration has none
        toleration[field_name] = s
        part = Part(f"spec.tolerations[0].{field_name}", _c(i, ENV_PROGRAM))
        part.pod = {"spec": {"tolerations": [toleration]}}
        return part

    return build


def _node_selector(key: bool) -> Callable[[str, int, Site], Part]:
    """A nodeSelector entry holding the string as its key or its value (read only for routing, as above)."""

    def build(s: str, i: int, x: Site) -> Part:
        name, value = (s, "v") if key else (f"k{i}", s)
        part = Part(member("spec.nodeSelector", name), _c(i, ENV_PROGRAM))
        part.pod = {"spec": {"nodeSelector": {name: value}}}
        return part

    return build


def _label_key(s: str, i: int, x: Site) -> Part:
    part = Part(member("metadata.labels", s), _field_env(i, f"metadata.labels['{s}']"), [_env_check(i, "F", "v")])
    part.labels = {s: "v"}
    part.also = (_FIELD_PATH,)
    return part


def _owner_job(field_name: str) -> Callable[[str, int, Site], Part]:
    """An owner reference of kind Job holding the string (read only to coalesce a Job's pods into an array: a
    malformed one is ignored; it must never reach the job, nor crash it)."""

    def build(s: str, i: int, x: Site) -> Part:
        ref = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": f"job-{i}",
            "uid": "00000000-0000-0000-0000-0000000000b0",
        }
        ref[field_name] = s
        part = Part(f"metadata.ownerReferences[0].{field_name}", _c(i, ENV_PROGRAM))
        part.pod = {"metadata": {"ownerReferences": [ref]}}
        return part

    return build


def _label_value(s: str, i: int, x: Site) -> Part:
    part = Part(member("metadata.labels", f"k{i}"), _field_env(i, f"metadata.labels['k{i}']"), [_env_check(i, "F", s)])
    part.labels = {f"k{i}": s}
    return part


def _annotation_key(s: str, i: int, x: Site) -> Part:
    c = _field_env(i, f"metadata.annotations['{s}']")
    part = Part(member("metadata.annotations", s), c, [_env_check(i, "F", "v")])
    part.annotations = {s: "v"}
    part.also = (_FIELD_PATH,)
    return part


def _annotation_value(s: str, i: int, x: Site) -> Part:
    c = _field_env(i, f"metadata.annotations['k{i}']")
    part = Part(member("metadata.annotations", f"k{i}"), c, [_env_check(i, "F", s)])
    part.annotations = {f"k{i}": s}
    return part


def _annotation_error_key(s: str, i: int, x: Site) -> Part:
    """An annotation whose value is no string: refused where it is read, naming its key."""
    part = Part(member("metadata.annotations", s), _field_env(i, "metadata.annotations"))
    part.annotations = {s: 7}
    return part


def _annotation(key: str, check: Callable[[str, int], list[Check]]) -> Callable[[str, int, Site], Part]:
    """The value of an annotation the renderer reads (``alone``: one pod has one of each)."""

    def build(s: str, i: int, x: Site) -> Part:
        part = Part(member("metadata.annotations", key), _field_env(i, "status.podIP"), check(s, i))
        part.annotations = {key: s}
        return part

    return build


# --- volumes and interLink's data: files in the container's root -----------------------------------------------


def _volume_name(s: str, i: int, x: Site) -> Part:
    part = _files_part(i, "{v}.name", {"emptyDir": {}}, {"mountPath": "/m"})
    part.volume = {"name": s, "emptyDir": {}}
    part.container["volumeMounts"][0]["name"] = s
    return part


def _host_path(s: str, i: int, x: Site) -> Part:
    path = f"{x.tmp}/host-{i}/{s}"
    part = _files_part(
        i, "{v}.hostPath.path", {"hostPath": {"path": path, "type": "DirectoryOrCreate"}}, {"mountPath": "/m"}
    )
    part.checks = [Check("dir", f"c{i}", path)]
    return part


def _host_path_type(s: str, i: int, x: Site) -> Part:
    part = _files_part(i, "{v}.hostPath.type", {"hostPath": {"path": "/", "type": s}}, {"mountPath": "/m"})
    part.container["command"] = ENV_PROGRAM
    return part


def _claim_name(s: str, i: int, x: Site) -> Part:
    """A claim the site maps below its storage root, made by the job (storage_sites.STRINGS_SITE)."""
    volume = {"persistentVolumeClaim": {"claimName": s}}
    part = _files_part(i, "{v}.persistentVolumeClaim.claimName", volume, {"mountPath": "/m"})
    part.checks = [Check("dir", f"c{i}", f"{STRINGS_ROOT}/claims/ns/{s}")]
    return part


def _nfs(which: str) -> Callable[[str, int, Site], Part]:
    """An nfs volume of the site's export ``ok-1:/``: a server (only that one maps), or a path below it (made
    here when it could be a directory's name: the site's mount has it)."""

    def build(s: str, i: int, x: Site) -> Part:
        server, path = (s, "/d") if which == "server" else (STRINGS_NFS_SERVER, "/" + s)
        site = f"{STRINGS_ROOT}/nfs{path}"
        if "\x00" not in path and ".." not in path.split("/"):
            with contextlib.suppress(OSError):
                os.makedirs(site, exist_ok=True)
        part = _files_part(i, f"{{v}}.nfs.{which}", {"nfs": {"server": server, "path": path}}, {"mountPath": "/m"})
        part.checks = [Check("dir", f"c{i}", site)]
        return part

    return build


def _claim_object(member_path: str) -> Callable[[str, int, Site], Part]:
    """A string of a PersistentVolumeClaim (``persistentVolumeClaims``) or PersistentVolume
    (``persistentVolumes``) interLink sends with a container: the pod mounts claim ``k<i>``."""

    def build(s: str, i: int, x: Site) -> Part:
        claim = s if member_path == "pvc:metadata.name" else f"k{i}"
        part = _files_part(i, "", {"persistentVolumeClaim": {"claimName": claim}}, {"mountPath": "/m"})
        kind, path = member_path.split(":")
        obj: dict[str, Any] = {"metadata": {"name": claim, "namespace": "ns"}, "spec": {}}
        key = "persistentVolumeClaims"
        if kind == "pvc" and path == "spec.storageClassName":
            obj["spec"]["storageClassName"] = s
        elif kind == "pvc" and path == "spec.volumeName":
            obj["spec"]["volumeName"] = s
        elif kind == "pv":
            key = "persistentVolumes"
            nfs = {"server": s, "path": "/d"} if path == "spec.nfs.server" else {"server": "nfs-1", "path": "/" + s}
            obj = {"metadata": {"name": f"pv{i}"}, "spec": {"claimRef": {"namespace": "ns", "name": claim}, "nfs": nfs}}
        part.where = f"container[0].{key}[{{d}}].{path}"
        part.also = ("{v}.persistentVolumeClaim.claimName",)
        part.data = {key: [obj]}
        part.checks = [Check("dir", f"c{i}", f"{STRINGS_ROOT}/claims/ns/{claim}")]
        return part

    return build


def _object_name(kind: str) -> Callable[[str, int, Site], Part]:
    def build(s: str, i: int, x: Site) -> Part:
        member = "secretName" if kind == "secret" else "name"
        part = _files_part(i, f"{{v}}.{kind}.{member}", {kind: {member: s}}, {"mountPath": "/m"})
        value = b64("v") if kind == "secret" else "v"
        part.data = _data("secrets" if kind == "secret" else "configMaps", s, {"f": value})
        part.checks = [Check("file", f"c{i}", "m/f", b"v")]
        return part

    return build


def _items(s: str, i: int, x: Site, *, projected: bool, which: str) -> Part:
    key, path = (s, "f") if which == "key" else ("k", s)
    source = {"name": f"cm{i}", "items": [{"key": key, "path": path}]}
    if projected:
        volume = {"projected": {"sources": [{"configMap": source}]}}
        where = f"{{v}}.projected.sources[0].configMap.items[0].{which}"
    else:
        volume, where = {"configMap": source}, f"{{v}}.configMap.items[0].{which}"
    part = _files_part(i, where, volume, {"mountPath": "/m"})
    part.data = _data("configMaps", f"cm{i}", {key: "v"})
    part.checks = [Check("file", f"c{i}", "m/" + path, b"v")]
    return part


def _projected_name(s: str, i: int, x: Site) -> Part:
    volume = {"projected": {"sources": [{"configMap": {"name": s}}]}}
    part = _files_part(i, "{v}.projected.sources[0].configMap.name", volume, {"mountPath": "/m"})
    part.data = _data("configMaps", s, {"f": "v"})
    part.checks = [Check("file", f"c{i}", "m/f", b"v")]
    return part


def _downward(s: str, i: int, x: Site, *, projected: bool, which: str) -> Part:
    path, field_path = (s, "metadata.name") if which == "path" else ("f", s)
    items = [{"path": path, "fieldRef": {"fieldPath": field_path}}]
    if projected:
        volume = {"projected": {"sources": [{"downwardAPI": {"items": items}}]}}
        where = "{v}.projected.sources[0].downwardAPI.items[0]"
    else:
        volume, where = {"downwardAPI": {"items": items}}, "{v}.downwardAPI.items[0]"
    where += ".path" if which == "path" else ".fieldRef.fieldPath"
    part = _files_part(i, where, volume, {"mountPath": "/m"})
    part.checks = [Check("file", f"c{i}", "m/" + path, b"p")] if which == "path" else []
    return part


def _downward_annotation(s: str, i: int, x: Site) -> Part:
    part = _downward(f"metadata.annotations['{s}']", i, x, projected=False, which="fieldPath")
    part.annotations = {s: "v"}
    part.also = ("metadata.annotations",)  # the string is an annotation's key too: the door may refuse it there
    part.checks = [Check("file", f"c{i}", "m/f", b"v")]
    return part


def _data_file(kind: str, which: str) -> Callable[[str, int, Site], Part]:
    """A key or value of interLink's data for a configMap/secret volume, or of a projected volume's map."""

    def build(s: str, i: int, x: Site) -> Part:
        key, value = (s, "v") if which == "key" else ("k", s)
        data_member = "binaryData" if which == "binary" else "data"
        sent = b64(value) if kind == "secrets" or which == "binary" else value
        volume: dict[str, Any]
        if kind == "secrets":
            volume, name = {"secret": {"secretName": f"o{i}"}}, f"o{i}"
        elif kind == "configMaps":
            volume, name = {"configMap": {"name": f"o{i}"}}, f"o{i}"
        else:
            volume, name = {"projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}, f"v{i}"
        part = _files_part(i, "", volume, {"mountPath": "/m"})
        part.where = member(f"container[0].{kind}[{{d}}].{data_member}", key)
        part.data = _data(kind, name, {key: sent}, data_member)
        part.checks = [Check("file", f"c{i}", "m/" + key, value.encode("utf-8", "surrogatepass"))]
        return part

    return build


def _projected_map_name(s: str, i: int, x: Site) -> Part:
    """interLink's map of a projected volume is found by the volume's name (a DNS label)."""
    part = _volume_name(s, i, x)
    part.volume = {"name": s, "projected": {"sources": []}}
    part.data = _data("projectedvolumemaps", s, {"f": "v"})
    return part


# --- the table ---------------------------------------------------------------------------------------------------

_CONTAINER = {
    ".name": [("container.name", _container_name)],
    ".image<str>": [("container.image", _image)],
    ".command[]": [("container.command", _command)],
    ".args[]": [("container.args", _args)],
    ".working_dir": [("container.workingDir", _working_dir)],
    ".env_from[].prefix": [("envFrom.prefix", _env_from_prefix)],
    ".env_from[].name": [("envFrom.name", _env_from_name)],
    ".env[]<EnvVar>.name": [("env.name", _env_name)],
    ".env[]<EnvVar>.value": [("env.value", _env_value)],
    ".env[]<EnvEntry>.name": [("env.name.expanded", _env_name_expanded)],
    ".env[]<EnvEntry>.value": [("env.value.expanded", _env_value_expanded)],
    ".env[]<EnvEntry>.value_from<FieldRef>.field_path": [
        ("env.fieldPath", _field_path),
        ("env.fieldPath.label", _field_path_label),
    ],
    ".env[]<EnvEntry>.value_from<KeyRef>.name": [("env.keyRef.name", _key_ref_name)],
    ".env[]<EnvEntry>.value_from<KeyRef>.key": [("env.keyRef.key", _key_ref_key)],
    ".volume_mounts[].name": [("mount.name", _mount_name)],
    ".volume_mounts[].mount_path": [("mount.mountPath", _mount_path)],
    ".volume_mounts[].sub_path": [("mount.subPath", _sub_path)],
    ".volume_mounts[].sub_path_expr": [("mount.subPathExpr", _sub_path_expr)],
}
_HANDLER = {
    "<ExecHandler>.command[]": [("exec.command", _exec, _exec_all)],
    "<HttpGetHandler>.host": [("httpGet.host", _http_host, None)],
    "<HttpGetHandler>.path": [("httpGet.path", _http_path, None)],
    "<HttpGetHandler>.headers[][0]": [
        ("httpGet.header.name", _http_header_name, lambda ss, x: _http_headers(ss, x, names=True))
    ],
    "<HttpGetHandler>.headers[][1]": [
        ("httpGet.header.value", _http_header_value, lambda ss, x: _http_headers(ss, x, names=False))
    ],
    "<TcpSocketHandler>.host": [("tcpSocket.host", _tcp_host, None)],
}
_SLOTS = {".lifecycle.post_start": ("postStart",), ".lifecycle.pre_stop": ("preStop",)}
_PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
_LISTS = {"init_containers": "initContainers", "containers": "containers"}


def _flags_words(s: str, i: int) -> list[Check]:
    return [Check("flags", f"c{i}", "", s)]


def _pod_ip(s: str, i: int) -> list[Check]:
    return [_env_check(i, "F", s)]


def _no_check(s: str, i: int) -> list[Check]:
    return []


ANNOTATIONS_READ = {
    "slurm-job.vk.io/flags": _flags_words,
    "slurm-job.vk.io/singularity-options": _no_check,
    "slurm-job.vk.io/singularity-mounts": _no_check,
    "slurm-job.vk.io/singularity-commands": _no_check,
    "slurm-job.vk.io/image-root": _no_check,
    "slurm-job.vk.io/flavor": _no_check,
    "interlink.eu/pod-ip": _pod_ip,
    "interlink-nats.io/gang-failure-policy": _no_check,
    "batch.kubernetes.io/job-completion-index": _no_check,
}
"""The annotations whose values the renderer reads, each a placement of its own (the two below excepted)."""
CODE_BY_DESIGN = {
    "slurm-job.vk.io/pre-exec": "raw shell the pod runs before its containers, as the job's account (like its command)",
    "slurm-job.vk.io/mpi-flags": "the launcher the pod's command runs under (mpirun ...), as the job's account",
}
"""Annotations that ARE the pod's own code (the SLURM plugin's interface): they run in the job, as its account,
as the pod's command does; every other annotation is data."""

_POD = {
    "Pod.metadata.uid": [("metadata.uid", _pod_field("metadata.uid", "metadata", "uid"), True)],
    "Pod.metadata.name": [("metadata.name", _pod_field("metadata.name", "metadata", "name"), True)],
    "Pod.metadata.namespace": [("metadata.namespace", _pod_field("metadata.namespace", "metadata", "namespace"), True)],
    "Pod.metadata.labels{key}": [("label.key", _label_key, False)],
    "Pod.metadata.owner_job[0]": [("ownerReference.name", _owner_job("name"), True)],
    "Pod.metadata.owner_job[1]": [("ownerReference.uid", _owner_job("uid"), True)],
    "Pod.metadata.labels{}": [("label.value", _label_value, False)],
    "Pod.metadata.annotations{key}": [
        ("annotation.key", _annotation_key, False),
        ("annotation.key.notString", _annotation_error_key, False),
    ],
    "Pod.metadata.annotations{}": [
        ("annotation.value", _annotation_value, False),
        *((f"annotation[{k}]", _annotation(k, check), True) for k, check in ANNOTATIONS_READ.items()),
    ],
    "Pod.spec.node_name": [("spec.nodeName", _pod_field("spec.nodeName", "spec", "nodeName"), True)],
    "Pod.spec.tolerations[].key": [("toleration.key", _toleration("key"), True)],
    "Pod.spec.tolerations[].operator": [("toleration.operator", _toleration("operator"), True)],
    "Pod.spec.tolerations[].value": [("toleration.value", _toleration("value"), True)],
    "Pod.spec.node_selector{key}": [("nodeSelector.key", _node_selector(key=True), True)],
    "Pod.spec.node_selector{}": [("nodeSelector.value", _node_selector(key=False), True)],
    "Pod.spec.service_account_name": [
        ("spec.serviceAccountName", _pod_field("spec.serviceAccountName", "spec", "serviceAccountName"), True)
    ],
    "Pod.status.pod_ip": [("status.podIP", _pod_field("status.podIP", "status", "podIP"), True)],
    "Pod.status.host_ip": [("status.hostIP", _pod_field("status.hostIP", "status", "hostIP"), True)],
    "Pod.spec.volumes[].name": [("volume.name", _volume_name, False)],
    "Pod.spec.volumes[].source<HostPath>.path": [("hostPath.path", _host_path, False)],
    "Pod.spec.volumes[].source<HostPath>.path_type": [("hostPath.type", _host_path_type, False)],
    "Pod.spec.volumes[].source<ClaimVolume>.claim": [("persistentVolumeClaim.claimName", _claim_name, False)],
    "Pod.spec.volumes[].source<NfsVolume>.server": [("nfs.server", _nfs("server"), False)],
    "Pod.spec.volumes[].source<NfsVolume>.path": [("nfs.path", _nfs("path"), False)],
    "Pod.data.claims{key}": [("pvc.metadata.name", _claim_object("pvc:metadata.name"), False)],
    "Pod.data.claims{}.storage_class": [("pvc.storageClassName", _claim_object("pvc:spec.storageClassName"), False)],
    "Pod.data.claims{}.volume": [("pvc.volumeName", _claim_object("pvc:spec.volumeName"), False)],
    "Pod.data.claims{}.nfs_server": [("pv.nfs.server", _claim_object("pv:spec.nfs.server"), False)],
    "Pod.data.claims{}.nfs_path": [("pv.nfs.path", _claim_object("pv:spec.nfs.path"), False)],
    "Pod.spec.volumes[].source<ObjectVolume>.object_name": [
        ("configMap.name", _object_name("configMap"), False),
        ("secret.secretName", _object_name("secret"), False),
    ],
    "Pod.spec.volumes[].source<ObjectVolume>.items[].key": [
        ("configMap.items.key", lambda s, i, x: _items(s, i, x, projected=False, which="key"), False)
    ],
    "Pod.spec.volumes[].source<ObjectVolume>.items[].path": [
        ("configMap.items.path", lambda s, i, x: _items(s, i, x, projected=False, which="path"), False)
    ],
    "Pod.spec.volumes[].source<ProjectedVolume>.sources[]<ObjectProjection>.object_name": [
        ("projected.configMap.name", _projected_name, False)
    ],
    "Pod.spec.volumes[].source<ProjectedVolume>.sources[]<ObjectProjection>.items[].key": [
        ("projected.items.key", lambda s, i, x: _items(s, i, x, projected=True, which="key"), False)
    ],
    "Pod.spec.volumes[].source<ProjectedVolume>.sources[]<ObjectProjection>.items[].path": [
        ("projected.items.path", lambda s, i, x: _items(s, i, x, projected=True, which="path"), False)
    ],
    "Pod.spec.volumes[].source<ProjectedVolume>.sources[]<DownwardProjection>.items[].path": [
        ("projected.downwardAPI.path", lambda s, i, x: _downward(s, i, x, projected=True, which="path"), False)
    ],
    "Pod.spec.volumes[].source<ProjectedVolume>.sources[]<DownwardProjection>.items[].field_path": [
        (
            "projected.downwardAPI.fieldPath",
            lambda s, i, x: _downward(s, i, x, projected=True, which="fieldPath"),
            False,
        )
    ],
    "Pod.spec.volumes[].source<DownwardVolume>.items[].path": [
        ("downwardAPI.path", lambda s, i, x: _downward(s, i, x, projected=False, which="path"), False)
    ],
    "Pod.spec.volumes[].source<DownwardVolume>.items[].field_path": [
        ("downwardAPI.fieldPath", lambda s, i, x: _downward(s, i, x, projected=False, which="fieldPath"), False),
        ("downwardAPI.fieldPath.annotation", _downward_annotation, False),
    ],
    "Pod.data.config_maps{key}": [("configMap.name", _object_name("configMap"), False)],
    "Pod.data.config_maps{}.files{key}": [("configMap.data.key", _data_file("configMaps", "key"), False)],
    "Pod.data.config_maps{}.files{}": [
        ("configMap.data.value", _data_file("configMaps", "value"), False),
        ("configMap.binaryData.value", _data_file("configMaps", "binary"), False),
    ],
    "Pod.data.config_maps{}.text_keys[]": [("configMap.data.key", _data_file("configMaps", "key"), False)],
    "Pod.data.secrets{key}": [("secret.secretName", _object_name("secret"), False)],
    "Pod.data.secrets{}.files{key}": [("secret.data.key", _data_file("secrets", "key"), False)],
    "Pod.data.secrets{}.files{}": [("secret.data.value", _data_file("secrets", "value"), False)],
    "Pod.data.secrets{}.text_keys[]": [("secret.data.key", _data_file("secrets", "key"), False)],
    "Pod.data.projected{key}": [("projectedvolumemaps.name", _projected_map_name, False)],
    "Pod.data.projected{}.files{key}": [
        ("projectedvolumemaps.data.key", _data_file("projectedvolumemaps", "key"), False)
    ],
    "Pod.data.projected{}.files{}": [
        ("projectedvolumemaps.data.value", _data_file("projectedvolumemaps", "value"), False)
    ],
    "Pod.data.projected{}.text_keys[]": [
        ("projectedvolumemaps.data.key", _data_file("projectedvolumemaps", "key"), False)
    ],
}

_DERIVED_SUFFIXES = {
    ".where": "the JSON path the parser builds for rejections",
    ".source": "the JSON path of the envFrom entry a variable comes from, for rejections",
    ".kind": "a member name the parser picked from a fixed set (configMapRef/secretRef, a volume kind, a probe kind)",
    ".gpu_kind": "'limits' or 'requests', chosen by the parser",
    ".name_key": "'name' or 'secretName', chosen by the parser",
    ".type_name": "Python's name of a JSON value's type",
}


_BENIGN: dict[str, str | None] = {
    "httpGet.host": "127.0.0.1",
    "tcpSocket.host": "127.0.0.1",
    "env.fieldPath": "metadata.name",
    "downwardAPI.fieldPath": "metadata.name",
    "projected.downwardAPI.fieldPath": "metadata.name",
    "hostPath.type": "Directory",
    "annotation[interlink-nats.io/gang-failure-policy]": "Continue",
    "annotation[batch.kubernetes.io/job-completion-index]": "1",
    "annotation.key.notString": None,
    "toleration.operator": "Exists",
}


def _derived(path: str) -> str | None:
    for suffix, why in _DERIVED_SUFFIXES.items():
        if path.endswith(suffix):
            return why
    return None


def placements_of(fields: list[str]) -> tuple[dict[str, list[Placement]], dict[str, str], list[str]]:
    """(each model field's placements, the derived fields with why, the fields with neither): the table, derived
    once from the model's fields and the rows above."""
    table: dict[str, list[Placement]] = {}
    derived: dict[str, str] = {}
    missing: list[str] = []
    for path in fields:
        why = _derived(path)
        if why is not None:
            derived[path] = why
            continue
        found: list[Placement] = []
        for attr, json_list in _LISTS.items():
            prefix = f"Pod.spec.{attr}[]"
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            for suffix, rows in _CONTAINER.items():
                if rest == suffix:
                    found += [Placement(name, build, json_list) for name, build in rows]
            slots = {**_SLOTS, **{".probes[].handler": _PROBES}}
            for slot_attr, slot_names in slots.items():
                for suffix, rows in _HANDLER.items():
                    if rest == slot_attr + suffix:
                        found += [
                            Placement(n, b, json_list, slot, alone=slot == "preStop", pack=pk)  # it stops the pod
                            for slot in slot_names
                            for n, b, pk in rows
                        ]
        for name, build, alone in _POD.get(path, []):
            found.append(Placement(name, build, alone=alone))
        found = [
            replace(p, benign=None if p.containers == "initContainers" and p.slot else _BENIGN.get(p.name, p.benign))
            for p in found
        ]
        if found:
            table[path] = found
        else:
            missing.append(path)
    return table, derived, missing
