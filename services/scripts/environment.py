"""A container's environment (envFrom, env, valueFrom) and Kubernetes ``$(VAR)`` expansion."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import RenderContext
from .errors import PodRejected
from .fields import as_obj, as_str, child, get_bool, get_list, get_obj, get_opt_str, get_str
from .launch import EnvVar
from .quoting import MASK, quote_field
from .sources import downward_value, object_files


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


def container_env(ctx: RenderContext, c: dict[str, Any], where: str) -> tuple[list[EnvVar], dict[str, str]]:
    """The variables in Kubernetes order (envFrom, then env; later wins) and the final name -> value map."""
    out: list[EnvVar] = []
    values: dict[str, str] = {}
    for j, ref in enumerate(get_list(c, "envFrom", where)):
        rw = f"{where}.envFrom[{j}]"
        ref = as_obj(ref, rw)
        prefix = get_str(ref, "prefix", rw)
        if "configMapRef" in ref:
            pool, secret, kind = ctx.data.config_maps, False, "configMapRef"
        elif "secretRef" in ref:
            pool, secret, kind = ctx.data.secrets, True, "secretRef"
        else:
            raise PodRejected(rw, "envFrom needs configMapRef or secretRef")
        src = get_obj(ref, kind, rw)
        obj_name = as_str(src.get("name"), f"{rw}.{kind}.name")
        optional = get_bool(src, "optional", f"{rw}.{kind}")
        obj = pool.get(obj_name)
        if obj is None:
            if optional:
                continue
            raise PodRejected(f"{rw}.{kind}", f"interLink sent no data for {obj_name!r} to resolve envFrom")
        for key, content in object_files(obj).items():
            try:
                text = content.decode()
            except UnicodeDecodeError:
                raise PodRejected(f"{rw}.{kind}", f"key {key!r} is not UTF-8 text") from None
            if secret and ctx.mask:
                text = MASK
            out.append(EnvVar(prefix + key, text, secret))
            values[prefix + key] = text
    for j, var in enumerate(get_list(c, "env", where)):
        vw = f"{where}.env[{j}]"
        var = as_obj(var, vw)
        name = var.get("name")
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise PodRejected(vw + ".name", f"invalid environment variable name {name!r}")
        secret = False
        if var.get("valueFrom") is not None:
            ew = vw + ".valueFrom"
            value, secret = _value_from(ctx, as_obj(var["valueFrom"], ew), ew)
            if value is None:
                continue
            if secret and ctx.mask:
                value = MASK  # masked at the source so $(VAR) expansions cannot reveal it
        else:
            value = get_str(var, "value", vw)
            if "$" in value:
                value = expand(value, values)
        out.append(EnvVar(name, value, secret))
        values[name] = value
    return out, values


def _value_from(ctx: RenderContext, ref: dict[str, Any], where: str) -> tuple[str | None, bool]:
    """Resolve an env valueFrom the VK left unresolved, when the pod or interLink data allow it."""
    if "fieldRef" in ref:
        fp = as_str(get_obj(ref, "fieldRef", where).get("fieldPath"), where + ".fieldRef.fieldPath")
        return downward_value(ctx, fp, where + ".fieldRef.fieldPath"), False
    for kind, pool, secret in (
        ("configMapKeyRef", ctx.data.config_maps, False),
        ("secretKeyRef", ctx.data.secrets, True),
    ):
        if kind in ref:
            kw = f"{where}.{kind}"
            src = get_obj(ref, kind, where)
            obj = pool.get(get_str(src, "name", kw))
            files = object_files(obj) if obj is not None else {}
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


def expanded_words(c: dict[str, Any], key: str, where: str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """``command`` or ``args`` with ``$(VAR)`` expanded: (the words, the same words shell-quoted)."""
    words: list[str] = []
    quoted: list[str] = []
    for k, w in enumerate(get_list(c, key, where)):
        if not isinstance(w, str):
            raise PodRejected(f"{where}.{key}[{k}]", "expected a string")
        if "$" in w:
            w = expand(w, env)
        words.append(w)
        quoted.append(quote_field(w, f"{where}.{key}[{k}]"))
    return words, quoted
