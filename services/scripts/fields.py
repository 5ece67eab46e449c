"""Typed reads of the pod and of interLink's data: the ONLY way the parser (:mod:`.pod_parse`) reads them.

The pod arrives as parsed JSON from interLink, so any value may have any JSON type (null, bool,
number, string, list, object), whatever Kubernetes core/v1 says. Reading it with plain ``.get``,
``.items()`` or string methods turns a value of the wrong type into an AttributeError/TypeError
(a 500 in the gateway). Every read therefore goes through one of these helpers, which check the
type Kubernetes gives the field and raise :class:`PodRejected` naming its exact JSON path
(``spec.containers[0].resources.limits``, ``metadata.annotations["slurm-job.vk.io/mpi-flags"]``,
``container[1].configMaps[0].metadata``).

Conventions (the Kubernetes JSON ones): ``null`` is the same as an absent field (the getters
return the empty value or ``None``); object members are ``where.key``, list items ``where[i]``,
map entries (labels, annotations, resources, data) ``where["key"]``. Paths are built only on
the error path, so the checks cost a type test per read.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import PodMistyped, PodRejected

__all__ = [
    "absolute_path",
    "as_list",
    "as_obj",
    "as_str",
    "child",
    "get_bool",
    "get_int",
    "get_list",
    "get_obj",
    "get_opt_str",
    "get_str",
    "member",
    "relative_path",
    "str_map",
    "wrong_type",
]


_PLAIN_KEY = re.compile(r'[^"\\\x00-\x1f\x7f]*\Z')


def member(where: str, key: str) -> str:
    """Path of a map entry: ``where["key"]`` (JSON-quoted, so any key reads back unambiguously)."""
    if _PLAIN_KEY.match(key):
        return f'{where}["{key}"]'
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


_MEMBER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def child(where: str, key: str) -> str:
    """Path of an object member whose name comes from the input (an unknown field): ``where.key`` when
    the name reads back unambiguously, else ``where["key"]``."""
    return f"{where}.{key}" if _MEMBER_NAME.match(key) else member(where, key)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def wrong_type(where: str, expected: str, value: Any) -> PodMistyped:
    return PodMistyped(where, f"expected {expected}, got {_json_type(value)}")


# --- values (the caller already holds the value; ``where`` is its own path) ----------------------


def as_obj(value: Any, where: str) -> dict[str, Any]:
    """An object; null is the empty object."""
    if type(value) is dict:
        return value
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise wrong_type(where, "an object", value)


def as_list(value: Any, where: str) -> list[Any]:
    """A list; null is the empty list."""
    if type(value) is list:
        return value
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise wrong_type(where, "a list", value)


def as_str(value: Any, where: str) -> str:
    """A string (required: null is rejected too)."""
    if isinstance(value, str):
        return value
    raise wrong_type(where, "a string", value)


def str_map(value: Any, where: str) -> dict[str, str]:
    """A map[string]string (labels, annotations, ConfigMap data); null is empty."""
    obj = as_obj(value, where)
    for key, item in obj.items():
        if not isinstance(item, str):
            raise wrong_type(member(where, key), "a string", item)
    return obj


# --- members (``where`` is the path of ``obj``; the field's path is ``where.key``) --------------


def get_obj(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = obj.get(key)
    if type(value) is dict:
        return value
    if value is None:
        return {}
    return as_obj(value, f"{where}.{key}")


def get_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if type(value) is list:
        return value
    if value is None:
        return []
    return as_list(value, f"{where}.{key}")


def get_str(obj: dict[str, Any], key: str, where: str, default: str = "") -> str:
    """A string field; absent or null gives ``default``."""
    value = obj.get(key)
    if type(value) is str:
        return value
    if value is None:
        return default
    return as_str(value, f"{where}.{key}")


def get_opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    """A string field, ``None`` when absent or null."""
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    return as_str(value, f"{where}.{key}")


def get_bool(obj: dict[str, Any], key: str, where: str) -> bool:
    """A boolean field; absent or null is false."""
    value = obj.get(key)
    if value is None:
        return False
    if value is True or value is False:
        return value
    raise wrong_type(f"{where}.{key}", "a boolean", value)


def get_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    """An integer field (int32/int64; booleans and fractions are not integers), ``None`` when absent or null."""
    value = obj.get(key)
    if value is None or (type(value) is int):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise wrong_type(f"{where}.{key}", "an integer", value)


def relative_path(path: Any, where: str) -> str:
    """A relative file path below a volume: no absolute paths, no '..', no empty components."""
    text = as_str(path, where)
    parts = text.split("/")
    if not text or text.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in text:
        raise PodRejected(where, f"must be a relative path without '..': {text!r}")
    return text


def absolute_path(path: Any, where: str) -> str:
    """An absolute path without '..' (a mount path, a working directory, a hostPath)."""
    text = as_str(path, where)
    if not text.startswith("/") or "\x00" in text or ".." in text.split("/"):
        raise PodRejected(where, f"must be an absolute path without '..': {text!r}")
    return text
