"""The error any layer raises for input the user must fix: the CLI's boundary prints it as one line, exit 2.

In the kernel so that every command (the renderer's, the submitter's, logging set-up) raises the same one,
and ``interlink_nats.errors`` recognises it without each layer importing the CLI.
"""

from __future__ import annotations

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

BAD_INPUT = 2
"""The exit code of a usage error (click's, too): systemd units do not restart on it."""


class UsageError(ValueError):
    """Bad input found by our own code; the message names what is wrong and where (option, file, field)."""

    exit_code = BAD_INPUT
