"""Lifecycle hooks (``postStart``, ``preStop``): parsed from a container, rendered as shell functions.

Kubernetes' semantics are the reference: ``postStart`` runs right after the container starts, beside it; if it
fails the container is killed and reported with reason ``FailedPostStartHook``. ``preStop`` runs when the pod
is deleted or reaches its deadline, before the container's TERM, inside the grace period. Handlers: ``exec``
(the command in the container's environment, for every runtime), ``httpGet`` (plain HTTP through bash's
``/dev/tcp``: no client on the node; success is a status 200-399) and ``sleep``. ``tcpSocket`` (deprecated
for hooks) and ``https`` are rejected by name. The template runs each hook in a subshell function of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import PodRejected
from .fields import as_list, as_obj, as_str, get_int, get_list, get_obj, get_str
from .quoting import quote

HOOKS = (("postStart", "post"), ("preStop", "pre"))
"""(Kubernetes' name, the template's function prefix)."""
_HANDLERS = ("exec", "httpGet", "sleep", "tcpSocket")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.:-]{0,252})\Z")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}\Z")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13})\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DEFAULT_HOST = "127.0.0.1"
"""httpGet's host when none is given: a pod's containers share the node's network on a batch site."""


@dataclass(frozen=True, slots=True)
class ExecHandler:
    command: tuple[str, ...]
    where: str  # ``...postStart.exec``: a runtime's refusal of the command names it


@dataclass(frozen=True, slots=True)
class HttpGetHandler:
    host: str
    port: int
    path: str
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SleepHandler:
    seconds: int


@dataclass(frozen=True, slots=True)
class TcpSocketHandler:
    """Probes only: success is a TCP connection that opens."""

    host: str
    port: int


Handler = ExecHandler | HttpGetHandler | SleepHandler


@dataclass(frozen=True, slots=True)
class Lifecycle:
    post_start: Handler | None
    pre_stop: Handler | None

    def get(self, prefix: str) -> Handler | None:
        return self.post_start if prefix == "post" else self.pre_stop


def parse_lifecycle(c: dict[str, Any], where: str, init: bool) -> Lifecycle | None:
    """A container's ``lifecycle``, checked (None when it has none)."""
    raw = c.get("lifecycle")
    if raw is None:
        return None
    where += ".lifecycle"
    if init:
        raise PodRejected(where, "init containers may not have lifecycle hooks (as in Kubernetes)")
    obj = as_obj(raw, where)
    for key in obj:
        if key not in ("postStart", "preStop", "stopSignal"):
            raise PodRejected(f"{where}.{key}", "unknown field")
    if obj.get("stopSignal") is not None:
        raise PodRejected(f"{where}.stopSignal", "not supported off-cluster (containers get TERM)")
    post, pre = (obj.get(name) for name, _ in HOOKS)
    return Lifecycle(
        None if post is None else _handler(post, f"{where}.postStart", c, where),
        None if pre is None else _handler(pre, f"{where}.preStop", c, where),
    )


def _handler(raw: Any, where: str, c: dict[str, Any], container_where: str) -> Handler:
    obj = as_obj(raw, where)
    for key in obj:
        if key not in _HANDLERS:
            raise PodRejected(f"{where}.{key}", "unknown field")
    found = handler(obj, where, c, container_where, probe=False)
    assert not isinstance(found, TcpSocketHandler), "refused for hooks"
    return found


def handler(
    obj: dict[str, Any], where: str, c: dict[str, Any], container_where: str, *, probe: bool
) -> Handler | TcpSocketHandler:
    """The one handler of a hook or probe ``obj`` (its other members already checked by the caller)."""
    names = ("exec", "httpGet", "tcpSocket", "grpc") if probe else ("exec", "httpGet", "sleep")
    given = [k for k in (*_HANDLERS, "grpc") if obj.get(k) is not None]
    if len(given) != 1:
        raise PodRejected(where, f"exactly one of {names[0]}, {names[1]} or {names[2]} is required")
    kind = given[0]
    if kind == "tcpSocket" and not probe:
        raise PodRejected(f"{where}.tcpSocket", "not supported in lifecycle hooks (deprecated in Kubernetes)")
    if kind == "grpc":
        raise PodRejected(f"{where}.grpc", "not supported off-cluster (the job script has no gRPC health client)")
    if kind not in names:
        raise PodRejected(f"{where}.{kind}", "not allowed here")
    if kind == "tcpSocket":
        sock = get_obj(obj, "tcpSocket", where)
        for key in sock:
            if key not in ("host", "port"):
                raise PodRejected(f"{where}.tcpSocket.{key}", "unknown field")
        host = get_str(sock, "host", f"{where}.tcpSocket") or DEFAULT_HOST
        if not _HOST.match(host):
            raise PodRejected(f"{where}.tcpSocket.host", f"not a host name or address: {host!r}")
        return TcpSocketHandler(host, _port(sock.get("port"), f"{where}.tcpSocket.port", c, container_where))
    if kind == "exec":
        command = get_list(get_obj(obj, "exec", where), "command", f"{where}.exec")
        if not command:
            raise PodRejected(f"{where}.exec.command", "a command is required")
        words = tuple(as_str(w, f"{where}.exec.command[{k}]") for k, w in enumerate(command))
        for k, w in enumerate(words):
            if "\x00" in w:
                raise PodRejected(f"{where}.exec.command[{k}]", "contains a NUL character")
        return ExecHandler(words, f"{where}.exec")
    if kind == "sleep":
        seconds = get_int(get_obj(obj, "sleep", where), "seconds", f"{where}.sleep")
        if seconds is None or seconds < 0:
            raise PodRejected(f"{where}.sleep.seconds", "a non-negative number of seconds is required")
        return SleepHandler(seconds)
    return _http_get(get_obj(obj, "httpGet", where), f"{where}.httpGet", c, container_where)


def _http_get(obj: dict[str, Any], where: str, c: dict[str, Any], container_where: str) -> HttpGetHandler:
    for key in obj:
        if key not in ("host", "port", "path", "scheme", "httpHeaders"):
            raise PodRejected(f"{where}.{key}", "unknown field")
    scheme = get_str(obj, "scheme", where, "HTTP")
    if scheme != "HTTP":
        raise PodRejected(f"{where}.scheme", f"only HTTP is supported off-cluster, not {scheme!r}")
    host = get_str(obj, "host", where) or DEFAULT_HOST
    if not _HOST.match(host):
        raise PodRejected(f"{where}.host", f"not a host name or address: {host!r}")
    path = get_str(obj, "path", where) or "/"
    if not path.startswith("/") or _CONTROL.search(path) or " " in path:
        raise PodRejected(
            f"{where}.path", f"must be an absolute URL path without spaces or control characters: {path!r}"
        )
    headers: list[tuple[str, str]] = []
    for k, raw in enumerate(get_list(obj, "httpHeaders", where)):
        h_where = f"{where}.httpHeaders[{k}]"
        h = as_obj(raw, h_where)
        name, value = get_str(h, "name", h_where), get_str(h, "value", h_where)
        if not _HEADER_NAME.match(name):
            raise PodRejected(f"{h_where}.name", f"not an HTTP header name: {name!r}")
        if _CONTROL.search(value):
            raise PodRejected(f"{h_where}.value", "must not contain control characters")
        headers.append((name, value))
    return HttpGetHandler(host, _port(obj.get("port"), f"{where}.port", c, container_where), path, tuple(headers))


def _port(raw: Any, where: str, c: dict[str, Any], container_where: str) -> int:
    """A port number, or a name resolved from the container's ``ports``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= 65535:
            raise PodRejected(where, f"must be between 1 and 65535: {raw}")
        return raw
    if not isinstance(raw, str) or not _PORT_NAME.match(raw):
        raise PodRejected(where, "a port number or the name of one of the container's ports is required")
    if raw.isdigit():
        return _port(int(raw), where, c, container_where)
    for k, p in enumerate(as_list(c.get("ports"), f"{container_where}.ports")):
        port = as_obj(p, f"{container_where}.ports[{k}]")
        if port.get("name") == raw:
            number = get_int(port, "containerPort", f"{container_where}.ports[{k}]")
            if number is None:
                break
            return _port(number, f"{container_where}.ports[{k}].containerPort", c, container_where)
    raise PodRejected(where, f"no port named {raw!r} in {container_where}.ports")


def handler_body(handler: Handler | TcpSocketHandler, exec_lines: tuple[str, ...]) -> tuple[str, ...]:
    """The shell lines of a hook's or probe's function (``exec_lines``: the runtime's way to run ``exec``)."""
    if isinstance(handler, ExecHandler):
        return exec_lines
    if isinstance(handler, SleepHandler):
        return (f"exec sleep {handler.seconds}",)
    if isinstance(handler, TcpSocketHandler):
        return (f"exec 3<> /dev/tcp/{quote(handler.host)}/{handler.port}",)
    words = [quote(handler.host), str(handler.port), quote(handler.path)]
    for name, value in handler.headers:
        words += [quote(name), quote(value)]
    return ("__http_get " + " ".join(words),)
