"""The cyclic garbage collector's settings for the long-running processes (gateway, submitter).

Why: under load every request allocates a few hundred short-lived objects (parsed JSON, protobuf
messages, futures, tasks). With CPython's default young-generation threshold (700) the collector ran
hundreds of times a second and rescanned what survived (the gateway's pod table, the submitter's
tracked jobs): about 20 % of the submitter's CPU per Submit (``bench/create.py``) and 6-7 % of the
gateway's per /create (its collections timed with ``gc.callbacks`` under that bench). Short-lived objects
are freed by reference counting anyway; cycles are still collected, just in larger steps.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)
"""Young, middle and old generation thresholds (CPython's defaults: 700, 10, 10)."""


def collect_rarely() -> None:
    """Collect young objects less often from now on (before a bulk load: the gateway restoring 100,000 pods
    ran some 700 young and 5 full collections with the defaults, 0.7 s of its restart)."""
    gc.set_threshold(*THRESHOLDS)


def freeze_long_lived() -> None:
    """Collect, move everything alive now out of all later collections, and collect young objects less often.

    Called once a process has built what it keeps (modules, settings; the gateway's restored pod table)."""
    gc.collect()
    gc.freeze()
    collect_rarely()
