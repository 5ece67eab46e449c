"""What the Kubernetes API server refuses in a pod, checked once while the pod is parsed ("one check at
the door").

A pod that reaches us through interLink has passed these rules, but the gateway can be called directly (loopback,
a bearer token, a unix socket), so it applies them itself before routing, groups, accounts or rendering read the
pod. The rules are Kubernetes' (apimachinery ``pkg/util/validation``, ``pkg/apis/core/validation``); the name
predicates are :mod:`interlink_nats.kernel.names`. Each failure is a :class:`PodRejected` naming the field.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, TypeGuard

from interlink_nats.kernel.names import (
    DNS_LABEL_MAX,
    DNS_SUBDOMAIN_MAX,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    is_qualified_name,
)

from .errors import PodRejected
from .fields import as_list, as_obj, get_int, get_str, member

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
ANNOTATIONS_MAX_BYTES = 256 * 1024
"""``TotalAnnotationSizeLimitB``: the keys' and values' UTF-8 bytes, summed over the pod's annotations."""

_PORT_NAME = re.compile(r"[-a-z0-9]{1,15}")
_LETTER = re.compile(r"[a-z]")


def is_env_var_name(value: object) -> TypeGuard[str]:
    """An environment variable name as Kubernetes ≥ 1.30 accepts it (``IsRelaxedEnvVarName``): printable ASCII
    (space included) except '='. Never a NUL or a newline, which no exec environment can carry."""
    # str methods, not a regex: a pod has dozens of these and this is the gateway's hot path (bench/create.py)
    return isinstance(value, str) and value.isascii() and value.isprintable() and value != "" and "=" not in value


def is_port_name(value: object) -> TypeGuard[str]:
    """An IANA service name (``IsValidPortName``): ≤ 15 of ``[-a-z0-9]``, a letter somewhere, no ``--``, no '-' at
    either end."""
    return (
        isinstance(value, str)
        and _PORT_NAME.fullmatch(value) is not None
        and _LETTER.search(value) is not None
        and "--" not in value
        and not value.startswith("-")
        and not value.endswith("-")
    )


def check_names(name: str, namespace: str) -> None:
    """``metadata.name`` a DNS subdomain, ``metadata.namespace`` a DNS label (a site's tenant rule matches it)."""
    if not is_dns_subdomain(name):
        raise PodRejected(
            "metadata.name",
            f"must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most {DNS_SUBDOMAIN_MAX}): {name!r}",
        )
    if not is_dns_label(namespace):
        raise PodRejected(
            "metadata.namespace",
            f"must be a DNS label (lowercase letters, digits and '-', at most {DNS_LABEL_MAX}): {_short(namespace)}",
        )


@lru_cache(maxsize=4096)
def _key_ok(key: str, any_case: bool) -> bool:
    """Pods of one job repeat their keys and values: each is checked once per few thousand pods."""
    return is_qualified_name(key.lower() if any_case else key) and (not any_case or key.isascii())


_value_ok = lru_cache(maxsize=4096)(is_label_value)


def check_labels(labels: dict[str, str], where: str) -> None:
    """Label keys are qualified names, values label values (also ``spec.nodeSelector``)."""
    for key, value in labels.items():
        if not _key_ok(key, False):
            raise PodRejected(member(where, key), _QUALIFIED)
        if not _value_ok(value):
            raise PodRejected(
                member(where, key),
                "a label value must be empty or at most 63 letters, digits, '-', '_' and '.', starting and ending "
                f"with a letter or digit: {_short(value)}",
            )


def check_toleration(key: str, operator: str, value: str, index: int) -> None:
    """``spec.tolerations[index]``: a key a qualified name (or empty: every key), a value a label value, and none
    with ``Exists``."""
    if key and not _key_ok(key, False):
        raise PodRejected(f"spec.tolerations[{index}].key", _QUALIFIED)
    if operator == "Exists" and value:
        raise PodRejected(f"spec.tolerations[{index}].value", "must be empty when the operator is Exists")
    if not _value_ok(value):
        raise PodRejected(f"spec.tolerations[{index}].value", f"must be a label value: {_short(value)}")


def check_annotations(annotations: dict[str, Any]) -> None:
    """Keys are qualified names in any case; all keys and values together at most 256 KiB."""
    chars = 0
    for key, value in annotations.items():
        # Kubernetes lowercases the key first; ASCII only here (a non-ASCII key is no qualified name either way,
        # but Go's ToLower folds a few symbols, such as the Kelvin sign, into ASCII letters: those are refused).
        if not _key_ok(key, True):
            raise PodRejected(member("metadata.annotations", key), _QUALIFIED)
        chars += len(key) + (len(value) if isinstance(value, str) else 0)
    if chars * 4 <= ANNOTATIONS_MAX_BYTES:  # UTF-8 takes at most 4 bytes a character: surely small enough
        return
    size = sum(len(k) + len(v.encode("utf-8", "surrogatepass")) for k, v in annotations.items() if isinstance(v, str))
    if size > ANNOTATIONS_MAX_BYTES:
        raise PodRejected(
            "metadata.annotations", f"{size} bytes of keys and values, more than Kubernetes' {ANNOTATIONS_MAX_BYTES}"
        )


def check_object_name(name: str, where: str) -> None:
    """A ConfigMap or Secret named by ``envFrom`` or ``valueFrom`` (Kubernetes checks these names; a volume's
    name it only requires)."""
    if not is_dns_subdomain(name):
        raise PodRejected(where, f"must be a ConfigMap/Secret name (a DNS subdomain): {_short(name)}")


def seconds(value: int | None, where: str, minimum: int, maximum: int) -> int | None:
    """An integer field in Kubernetes' range (``None``: absent)."""
    if value is not None and not minimum <= value <= maximum:
        raise PodRejected(where, f"must be between {minimum} and {maximum}: {value}")
    return value


def check_ports(c: dict[str, Any], where: str) -> None:
    """``ports``: each a ``containerPort`` (1-65535), a ``hostPort`` when set, a name unique in the container."""
    names: set[str] = set()
    for k, raw in enumerate(as_list(c.get("ports"), f"{where}.ports")):
        pw = f"{where}.ports[{k}]"
        port = as_obj(raw, pw)
        name = get_str(port, "name", pw)
        if name:
            if not is_port_name(name):
                raise PodRejected(
                    f"{pw}.name",
                    f"must be an IANA service name (at most 15 of a-z, 0-9 and '-', with a letter): {_short(name)}",
                )
            if name in names:
                raise PodRejected(f"{pw}.name", f"duplicate port name {name!r}")
            names.add(name)
        number = get_int(port, "containerPort", pw)
        if number is None or not 1 <= number <= 65535:
            raise PodRejected(f"{pw}.containerPort", f"must be between 1 and 65535: {number}")
        host = get_int(port, "hostPort", pw)
        if host is not None and not 0 <= host <= 65535:
            raise PodRejected(f"{pw}.hostPort", f"must be between 1 and 65535 when set: {host}")


_QUALIFIED = (
    "a key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, "
    "'-', '_' and '.', starting and ending with a letter or digit"
)


def _short(value: str) -> str:
    """The value as Python quotes it (a newline shows as ``\\n``), cut at 80 characters: one line, bounded."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}... ({len(value)} characters)"
