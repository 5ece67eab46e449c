"""A container's environment (envFrom, env, valueFrom) and Kubernetes ``$(VAR)`` expansion, and what of it
a job's ``exec`` can take."""

from __future__ import annotations

from collections.abc import Mapping

from .context import RenderContext
from .errors import PodRejected, checked
from .launch import EnvVar
from .pod_model import Container, FieldRef, KeyRef
from .quoting import MASK, quote, quote_field
from .sources import downward_value


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


EXEC_ENV_LIMIT = 128 * 1024 - 4096
"""Bytes of ``NAME=value`` strings one container may carry (Linux's MAX_ARG_STRLEN less room for the command).

A container's environment reaches its process through an ``exec`` (``env -- NAME=value …`` or a runtime's
command line), so it meets the kernel's limits: ``E2BIG`` ("Argument list too long") after the pod was
accepted, queued and started. One argument string is capped at 128 KiB and a whole exec at about 2 MiB by
default; a runtime may pass the environment as one string, so the per-container total is held to the smaller
cap. Checked on the resolved environment (envFrom, valueFrom and ``$(VAR)`` expansions included)."""


def check_exec_size(c: Container, env: list[EnvVar]) -> None:
    """Reject an environment no ``exec`` can take, naming the container (at ``/create``, not at run time)."""
    chars = sum(len(var.name) + len(var.value) for var in env) + 2 * len(env)
    if chars * 4 <= EXEC_ENV_LIMIT:  # UTF-8 takes at most 4 bytes a character: no need to encode
        return
    size = sum(len(f"{var.name}={var.value}".encode(errors="surrogatepass")) + 1 for var in env)
    if size > EXEC_ENV_LIMIT:
        raise PodRejected(
            f"{c.where}.env",
            f"container {c.name!r} has {size // 1024} KiB of environment; a job's exec takes at most "
            f"{EXEC_ENV_LIMIT // 1024} KiB (move large values into a ConfigMap or Secret volume)",
        )


_NUL = "contains a NUL character"


def container_env(ctx: RenderContext, c: Container) -> tuple[list[EnvVar], dict[str, str]]:
    """The variables in Kubernetes order (envFrom, then env; later wins) and the final name -> value map."""
    out: list[EnvVar] = []
    values: dict[str, str] = {}
    for ref in c.env_from:
        obj = (ctx.data.secrets if ref.secret else ctx.data.config_maps).get(ref.name)
        if obj is None:
            if ref.optional:
                continue
            raise PodRejected(f"{ref.where}.{ref.kind}", f"interLink sent no data for {ref.name!r} to resolve envFrom")
        if "\x00" in ref.prefix:
            raise PodRejected(f"{ref.where}.prefix", _NUL)
        for key, content in checked(obj.files).items():
            try:
                text = content.decode()
            except UnicodeDecodeError:
                raise PodRejected(f"{ref.where}.{ref.kind}", f"key {key!r} is not UTF-8 text") from None
            if "\x00" in key or "\x00" in text:
                raise PodRejected(obj.key_where(key), f"{_NUL}: it cannot be an environment variable ({ref.where})")
            if ref.secret and ctx.mask:
                text = MASK
            out.append(EnvVar(ref.prefix + key, text, ref.secret, source=ref.where))
            values[ref.prefix + key] = text
    for j, var in enumerate(c.env):
        if isinstance(var, EnvVar):  # a literal: already what the container gets
            if "\x00" in var.value:
                raise PodRejected(f"{c.where}.env[{j}].value", _NUL)
            out.append(var)
            values[var.name] = var.value
            continue
        secret = False
        if var.value_from is not None:
            value, secret = _value_from(ctx, var.value_from)
            if value is None:
                continue
        elif "\x00" in var.value:
            raise PodRejected(f"{c.where}.env[{j}].value", _NUL)
            if secret and ctx.mask:
                value = MASK  # masked at the source so $(VAR) expansions cannot reveal it
        else:
            value = expand(var.value, values)
        out.append(EnvVar(var.name, value, secret, j))
        values[var.name] = value
    return out, values


def _value_from(ctx: RenderContext, ref: FieldRef | KeyRef) -> tuple[str | None, bool]:
    """Resolve an env valueFrom the VK left unresolved, when the pod or interLink data allow it."""
    if isinstance(ref, FieldRef):
        return downward_value(ctx.pod, ref.field_path, ref.where), False
    obj = (ctx.data.secrets if ref.secret else ctx.data.config_maps).get(ref.name)
    files = checked(obj.files) if obj is not None else {}
    if ref.key is not None and ref.key in files:
        assert obj is not None
        try:
            value = files[ref.key].decode()
        except UnicodeDecodeError:
            raise PodRejected(ref.where, "value is not UTF-8 text") from None
        if "\x00" in value:
            raise PodRejected(obj.key_where(ref.key), f"{_NUL}: it cannot be an environment variable ({ref.where})")
        return value, ref.secret
    if checked(ref.optional):
        return None, ref.secret
    raise PodRejected(ref.where, "unresolved valueFrom: interLink sent no value for it")


def expanded_words(words: tuple[str, ...], key: str, where: str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """``command`` or ``args`` with ``$(VAR)`` expanded: (the words, the same words shell-quoted)."""
    expanded: list[str] = []
    quoted: list[str] = []
    for k, w in enumerate(words):
        if "$" in w:
            w = expand(w, env)
        expanded.append(w)
        quoted.append(quote(w) if "\x00" not in w else quote_field(w, f"{where}.{key}[{k}]"))
    return expanded, quoted
