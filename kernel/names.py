"""Name rules shared by every layer: Kubernetes' name rules (apimachinery ``pkg/util/validation``) and the pod-UID rule.

Pure predicates; each caller raises its own error (a pod rejection, an invalid pool, an ignored
report), because what a bad name means differs by caller while what a good name is does not.
"""

from __future__ import annotations

import re
from typing import TypeGuard

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

DNS_LABEL_MAX = 63
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

DNS_SUBDOMAIN_MAX = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

QUALIFIED_NAME_MAX = 63  # the name part; the optional prefix is a DNS subdomain (≤ 253)
LABEL_VALUE_MAX = 63
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

POD_UID_MAX = 128
_POD_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_dns_label(value: object) -> TypeGuard[str]:
    """RFC 1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, ≤ 63.

    Also a valid NATS subject token, a Kubernetes label value and a safe file name, which is why
    pools, container names and volume names must be one.
    """
    return isinstance(value, str) and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: object) -> TypeGuard[str]:
    """RFC 1123 subdomain: DNS labels joined by '.', ≤ 253 in all (Kubernetes' ``IsDNS1123Subdomain``).

    Pod, ConfigMap and Secret names; a label key's prefix.
    """
    return isinstance(value, str) and len(value) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(value) is not None


def is_qualified_name(value: object) -> TypeGuard[str]:
    """A label key (Kubernetes' ``IsQualifiedName``): an optional DNS-subdomain prefix and '/', then a name of
    letters, digits, '-', '_' and '.' that starts and ends with a letter or digit, ≤ 63."""
    if not isinstance(value, str):
        return False
    prefix, slash, name = value.partition("/")
    if slash:
        if not is_dns_subdomain(prefix):  # also refuses an empty prefix
            return False
    else:
        name = prefix
    return len(name) <= QUALIFIED_NAME_MAX and _LABEL_NAME.fullmatch(name) is not None  # a second '/' fails here


def is_label_value(value: object) -> TypeGuard[str]:
    """A label value (Kubernetes' ``IsValidLabelValue``): empty, or a qualified name's name part, ≤ 63."""
    return isinstance(value, str) and (
        value == "" or (len(value) <= LABEL_VALUE_MAX and _LABEL_NAME.fullmatch(value) is not None)
    )


def is_pod_uid(value: object) -> TypeGuard[str]:
    """A pod UID we accept: letters, digits, '.', '_' and '-', starting with a letter or digit, ≤ 128.

    Kubernetes UIDs are UUIDs; the wider rule only keeps the UID safe as a file name (never ``.``
    or ``..``) and as a NATS-free JSON field.
    """
    return isinstance(value, str) and _POD_UID.fullmatch(value) is not None
