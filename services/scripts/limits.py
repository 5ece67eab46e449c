"""The site's bounds on the times a pod asks for (``BuildConfig.limits``), applied as the pod is rendered.

Why: every number a pod sends reaches the site; a grace period of 10**12 seconds kept a deleted pod's processes
alive, a probe every second from thousands of pods is load. Per field, the rule Kubernetes' semantics allow: the
grace period is clamped (a node may end a pod sooner, as a kubelet's ``eviction-max-pod-grace-period`` does);
the others are refused with the field and the site's limit (running a probe less often, or a hook shorter, than
asked would change what the pod observes). Defaults: :mod:`interlink_nats.kernel.pod_limits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import pod_limits as defaults

from .errors import PodRejected
from .hooks import HOOKS, SleepHandler
from .pod_model import Container
from .probes import PROBES

_PROBE_FIELDS = {kind: name for name, kind in PROBES}


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits in force for one pool: its own, or the defaults where it set none."""

    max_grace: int
    min_probe_period: int
    max_probe_timeout: int
    max_probe_initial_delay: int
    max_hook_sleep: int
    max_active_deadline: int  # 0: none

    @classmethod
    def of(cls, bc: pb.BuildConfig) -> Limits:
        site = bc.limits or pb.PodLimits()
        return cls(
            max_grace=defaults.max_grace_s(site.max_termination_grace_seconds),
            min_probe_period=defaults.or_default(site.min_probe_period_seconds, defaults.MIN_PROBE_PERIOD_S),
            max_probe_timeout=defaults.or_default(site.max_probe_timeout_seconds, defaults.MAX_PROBE_TIMEOUT_S),
            max_probe_initial_delay=defaults.or_default(
                site.max_probe_initial_delay_seconds, defaults.MAX_PROBE_INITIAL_DELAY_S
            ),
            max_hook_sleep=defaults.or_default(site.max_hook_sleep_seconds, defaults.MAX_HOOK_SLEEP_S),
            max_active_deadline=defaults.or_default(site.max_active_deadline_seconds, defaults.MAX_ACTIVE_DEADLINE_S),
        )

    def grace(self, seconds: int) -> int:
        """The grace period the script uses: the pod's, at most the site's."""
        return min(seconds, self.max_grace)

    def check_deadline(self, seconds: int | None) -> None:
        if seconds is not None and self.max_active_deadline and seconds > self.max_active_deadline:
            raise PodRejected("spec.activeDeadlineSeconds", _over(seconds, self.max_active_deadline, "at most"))

    def check_container(self, c: Container) -> None:
        """A container's probes and hooks against the limits, the first one beyond them refused by its field."""
        for p in c.probes:
            where = f"{c.where}.{_PROBE_FIELDS[p.kind]}"
            if p.period < self.min_probe_period:
                raise PodRejected(f"{where}.periodSeconds", _over(p.period, self.min_probe_period, "at least"))
            if p.timeout > self.max_probe_timeout:
                raise PodRejected(f"{where}.timeoutSeconds", _over(p.timeout, self.max_probe_timeout, "at most"))
            if p.initial > self.max_probe_initial_delay:
                raise PodRejected(
                    f"{where}.initialDelaySeconds", _over(p.initial, self.max_probe_initial_delay, "at most")
                )
        for name, prefix in HOOKS:
            hook = c.lifecycle.get(prefix) if c.lifecycle is not None else None
            if isinstance(hook, SleepHandler) and hook.seconds > self.max_hook_sleep:
                where = f"{c.where}.lifecycle.{name}.sleep.seconds"
                raise PodRejected(where, _over(hook.seconds, self.max_hook_sleep, "at most"))


def _over(value: int, limit: int, bound: str) -> str:
    return f"{value} is beyond this pool's site limit: {bound} {limit} seconds"
