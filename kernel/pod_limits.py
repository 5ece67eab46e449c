"""The defaults of a site's bounds on a pod's times (``BuildConfig.limits``), shared by gateway and submitter.

One place: the gateway renders with them (``services.scripts.limits``) and the submitter KILLs a deleted job's
process tree at the longest grace (``backends.shell``); both read a field left at 0 as its default here (the
kernel knows no generated code, so callers pass the field's value). docs/pod-support.md, "Site limits".
"""

from __future__ import annotations

MAX_TERMINATION_GRACE_S = 300
"""Longest ``terminationGracePeriodSeconds`` (a longer one is clamped): five minutes, ten times Kubernetes' 30 s."""
MIN_PROBE_PERIOD_S = 1
"""Shortest probe ``periodSeconds``: Kubernetes' own minimum; a site with many pods raises it."""
MAX_PROBE_TIMEOUT_S = 300
MAX_PROBE_INITIAL_DELAY_S = 86400
MAX_HOOK_SLEEP_S = 300
"""Longest lifecycle hook ``sleep.seconds`` (a preStop sleep beyond the grace period is cut by its KILL anyway)."""
GROUP_SIZE_MAX = 1024
"""The most members a pod group may declare (its total-count): more than any site runs as one job, so a larger
count is a typo, refused at once; a gateway's ``max_group_size`` may only lower it."""
MAX_ACTIVE_DEADLINE_S = 0
"""No bound of the site's own by default: the batch system's time limit applies."""


def or_default(value: int, default: int) -> int:
    """A limit as the site set it, or its default where the site left it at 0 (proto3's unset)."""
    return value if value > 0 else default


def max_grace_s(value: int) -> int:
    """The longest grace period: the site's ``limits.max_termination_grace_seconds``, else the default."""
    return or_default(value, MAX_TERMINATION_GRACE_S)
