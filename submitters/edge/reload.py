"""SIGHUP: re-read the site file and apply what can change while serving (``kernel.reload`` decides).

Live: the BuildConfig (re-read, handed to the backend and announced again), what the ResourceReport says
(capacity, labels, taints), the announce interval, the retention, and the backend's accounting table where
the backend can swap it (``Backend.set_accounting``). Everything else (NATS, pool, backend, state dir,
concurrency, intervals the loops were built with) is logged as needing a restart and keeps its old value.
A file that no longer loads, or whose BuildConfig or accounting table is refused, is refused whole: the
running configuration stays, and the one log line says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from interlink_nats.kernel.nats_connection import credential_problem
from interlink_nats.kernel.reload import ReloadPlan, merged, plan_reload, refusal
from interlink_nats.submitters.backends import BACKENDS
from interlink_nats.submitters.core.backend import Backend
from interlink_nats.submitters.core.errors import SubmitterError
from interlink_nats.submitters.edge.announcer import Announcer
from interlink_nats.submitters.edge.natsconn import connection_settings
from interlink_nats.submitters.settings import SubmitterSettings
from pydantic import ValidationError

log = logging.getLogger("interlink_nats.submitters.reload")

LIVE = (
    "build_config",
    "build_config_file",
    "capacity",
    "labels",
    "taints",
    "announce_interval_s",
    "retention_days",
    "storage",
)
"""Keys read anew at each use (or re-read here): applied without a restart."""


def live_keys(backend: Backend) -> tuple[str, ...]:
    """``LIVE``, and the accounting table of the running backend when it can swap it."""
    swaps = callable(getattr(backend, "set_accounting", None))
    return (*LIVE, *((f"{name}.accounting" for name in BACKENDS) if swaps else ()))


def source_of(settings: SubmitterSettings) -> str:
    return str(settings.config_file) if settings.config_file is not None else "the environment"


def reload(
    current: SubmitterSettings, reread: Callable[[], SubmitterSettings], announcer: Announcer, backend: Backend
) -> tuple[SubmitterSettings, ReloadPlan] | None:
    """Re-read, check and apply; the settings now in force and the plan, or None when refused (logged)."""
    where = source_of(current)
    try:
        new = reread()
        new.read_build_config()  # a broken BuildConfig refuses the whole file, before anything changed
    except (ValidationError, ValueError, OSError) as exc:  # ConfigFileError is a ValueError
        log.error("reload of %s refused, the running configuration stays: %s", where, refusal(exc))
        return None
    plan = plan_reload(current, new, live=live_keys(backend))
    settings = merged(current, new, plan.live)
    accounting = [key for key in plan.live if key.endswith(".accounting")]
    old_build_config = announcer.build_config
    announcer.settings = settings
    try:
        announcer.reload_build_config(force=True)
        if accounting:
            backend.set_accounting(getattr(settings.backend_config(), "accounting", None))  # type: ignore[attr-defined]
    except (SubmitterError, ValueError) as exc:  # the backend refused the BuildConfig, or the table (PolicyError)
        announcer.settings = current
        announcer.build_config = old_build_config
        backend.configure(old_build_config)
        log.error("reload of %s refused, the running configuration stays: %s", where, exc)
        return None
    log.info("reloaded %s: %s", where, plan.summary())
    problem = credential_problem(connection_settings(settings))
    if problem is not None:
        log.error("%s", problem)
    return settings, plan
