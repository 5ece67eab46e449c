"""The JobEvents stream: one definition shared by submitters (publishers) and the gateway (consumer).

Both sides call :func:`ensure_events_stream` at start, so whichever comes up first creates it
and the stream's configuration can never disagree between them.
"""

from __future__ import annotations

from interlink_nats.kernel.subjects import DEFAULT_PREFIX, EVENTS_STREAM, events_wildcard
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError

EVENTS_MAX_AGE_S = 7 * 24 * 3600
"""Events older than a week are of no use: every live pod has had a newer one since."""


def events_stream_config(prefix: str = DEFAULT_PREFIX) -> StreamConfig:
    return StreamConfig(
        name=EVENTS_STREAM,
        subjects=[events_wildcard(prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=EVENTS_MAX_AGE_S,
        # The gateway only needs each pod's latest state: keep the last few per subject-pool.
        max_msgs_per_subject=-1,
        duplicate_window=120,
    )


async def ensure_events_stream(js: JetStreamContext, prefix: str = DEFAULT_PREFIX) -> None:
    """Create the stream, or accept it as it is when it already exists (created by the other side)."""
    config = events_stream_config(prefix)
    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        # 10058: "stream name already in use with a different configuration": an operator may have
        # tuned limits by hand; keep theirs as long as it captures our subjects.
        if getattr(exc, "err_code", None) != 10058:
            raise
        info = await js.stream_info(EVENTS_STREAM)
        if events_wildcard(prefix) not in (info.config.subjects or []):
            raise
