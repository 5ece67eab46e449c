"""Domain errors of the submitter: what went wrong, in the submitter's own terms.

Domain code raises these; only the RPC edge (``submitters.edge.service``) turns them into status
codes, so the mapping lives in one place and domain code never imports grpclib.
"""

from __future__ import annotations


class SubmitterFault(Exception):
    """Base of every error a submitter answers a request with."""


class InvalidRequest(SubmitterFault):
    """The request itself is wrong (a field is missing or malformed); retrying it will not help."""


class NotFound(SubmitterFault):
    """The pod (or its container) is not known to this pool."""


class AlreadyExists(SubmitterFault):
    """Something with this identity exists already and may not be created again."""


class Refused(SubmitterFault):
    """The batch system refused the job for good; its status says so too."""


class CannotSubmit(SubmitterFault):
    """The submitter cannot run a program its backend needs (missing, or not executable): answered at once, not
    retried by the gateway (a site must fix it first). The pod is not failed: a Submit after the fix goes on."""


class Unavailable(SubmitterFault):
    """The submitter or its batch system cannot do this now; retrying later may work."""


class SubmitterError(Exception):
    """The submitter could not start (state dir, registry, instance lock, BuildConfig, a NATS credential that
    may not use the pool's own subjects): a configuration problem that restarting will not fix."""

    exit_code = 2  # the CLI prints the message as one line; systemd's RestartPreventExitStatus=2 stops a loop
