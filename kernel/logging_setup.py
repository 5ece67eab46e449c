"""Logging set-up shared by every command: plain or JSON lines, one call."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from interlink_nats.kernel import log_context
from interlink_nats.kernel.errors import UsageError


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers; messages never carry secret values by design.

    Pod UID, namespace, pool, job id (and a MasterQueue's name) are fields of their own: from the
    request's log context (``kernel.log_context``) or a call's ``extra={...}``.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(log_context.current())
        for name in log_context.FIELDS:
            value = record.__dict__.get(name)
            if value:
                entry[name] = str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


LEVELS = ("debug", "info", "warning", "error", "critical")


def setup_logging(level: str = "info", json_lines: bool = False) -> None:
    """Log to stderr at ``level`` (one of LEVELS, any case; another is the user's --log-level error)."""
    if level.lower() not in LEVELS:
        raise UsageError(f"--log-level {level!r}: must be one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_lines else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
    asyncio_log = logging.getLogger("asyncio")  # closing a TLS connection to NATS: noise, nothing to act on
    asyncio_log.filters[:] = [lambda record: "eof_received() has no effect" not in record.getMessage()]
