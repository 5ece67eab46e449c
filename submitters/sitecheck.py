"""``interlink-nats submitter check``: what a site file asks for, tried once on this host, as a table.

Why: the install guide's check step used to be ``submitter run``, which takes the pool's jobs and never exits,
and a file whose runtime was missing started fine while every pod then exited 127 (``apptainer: not found``,
visible only in the pod's log). The check validates the file, connects with the configured identity and tries
the subjects the submitter needs (the start's own probe, outside the pool's queue group), finds every program
the backend runs (``Backend.commands``) and runs its read-only commands once (``AnswersQueries``), and looks
for the BuildConfig's runtime. Nothing is taken from the pool, submitted, announced or left running.

At start the submitter runs the cheap part again (``backends.commands.start_warnings``): the backend's programs are
already required (``CommandCheck.require``, a refusal); the runtime is run by the jobs, not by the
submitter, so a missing one is a warning there (the batch nodes may have it where the submit host does not).
"""

from __future__ import annotations

import contextlib
import shutil

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.checks import FAILED, OK, WARNING, Check
from interlink_nats.kernel.subjects import EVENTS_STREAM, rpc_subject
from interlink_nats.services.bus.events_stream import NO_JETSTREAM, no_jetstream
from interlink_nats.submitters.backends.commands import commands_problem, runtime_check
from interlink_nats.submitters.core.backend import AnswersQueries, Backend
from interlink_nats.submitters.core.errors import SubmitterError
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.settings import SubmitterSettings


def command_checks(backend: Backend) -> list[Check]:
    """One row per program the backend runs, naming the setting that sets its path when it is missing."""
    rows = []
    for command in dict.fromkeys(backend.commands()):
        problem = commands_problem([command])
        where = shutil.which(command.program)
        rows.append(Check(f"command {command.program}", FAILED if problem else OK, problem or str(where)))
    return rows


async def query_checks(backend: Backend) -> list[Check]:
    """Each read-only batch command run once (a program on PATH may still not answer)."""
    calls = backend.queries() if isinstance(backend, AnswersQueries) else {"capacity": backend.capacity}
    rows = []
    for name, call in calls.items():
        try:
            await call()
        except Exception as exc:  # what the command says is the row's detail: its first and last line
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            detail = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
            rows.append(Check(f"{backend.name} {name}", FAILED, detail))
        else:
            rows.append(Check(f"{backend.name} {name}", OK, "answers"))
    return rows


async def check_site(settings: SubmitterSettings, *, connect_within_s: float = 15.0) -> list[Check]:
    """Every check of a loaded site file (loading it is the first check, the caller's)."""
    submitter = Submitter(settings)  # builds the backend; opens nothing (no lock, registry or connection)
    checks = [Check("site file", OK, f"pool {settings.pool}, backend {settings.backend}")]
    try:
        submitter.announcer.reload_build_config(force=True)
    except (ValueError, SubmitterError) as exc:  # a BuildConfig the backend refuses (its flags)
        return [*checks, Check("build_config", FAILED, str(exc))]
    build_config = submitter.announcer.build_config
    checks.append(Check("build_config", OK, f"runtime {runtime_name(build_config)}"))
    checks += command_checks(submitter.backend)
    if not any(c.status == FAILED for c in checks):
        checks += await query_checks(submitter.backend)
    checks.append(runtime_check(settings.backend, build_config))
    checks += await nats_checks(submitter, connect_within_s)
    with contextlib.suppress(Exception):
        await submitter.backend.close()
    return checks


def runtime_name(build_config: pb.BuildConfig) -> str:
    return (build_config.runtime or pb.ContainerRuntime.APPTAINER).name.lower()


async def nats_checks(submitter: Submitter, within_s: float) -> list[Check]:
    """Connect as the pool, subscribe to its Submit subject (the start's probe) and look the events stream up."""
    from interlink_nats.kernel.nats_connection import connect_for_check
    from interlink_nats.submitters.edge.natsconn import connection_settings

    nats = connection_settings(submitter.settings)
    nc, connected = await connect_for_check(
        nats, f"interlink-check-{submitter.pool}", within_s, on_error=submitter._on_nats_error
    )
    if nc is None:
        return [connected]
    submitter.nc = nc
    rows = [connected]
    try:
        subject = rpc_subject("Submit", submitter.pool)
        try:
            await submitter._probe_permissions(queue=False)
        except Exception as exc:  # SubmitterError naming the refused subject and the identity
            rows.append(Check(f"nats subscribe {subject}", FAILED, str(exc)))
        else:
            rows.append(Check(f"nats subscribe {subject}", OK, "allowed"))
        rows.append(await _stream_check(submitter))
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
        submitter.nc = None
    return rows


async def _stream_check(submitter: Submitter) -> Check:
    """The events stream looked up as the outbox does (a JetStream API request; nothing published to it)."""
    import nats.errors
    import nats.js.errors

    assert submitter.nc is not None
    name = f"nats stream {EVENTS_STREAM}"
    try:
        await submitter.nc.jetstream(timeout=5).stream_info(EVENTS_STREAM)
    except nats.js.errors.NotFoundError:
        return Check(name, WARNING, "does not exist yet: the gateway creates it; events wait until then")
    except (nats.errors.Error, TimeoutError) as exc:
        refused = [e for e in submitter.permission_errors if "violation" in e.lower()]
        if not refused and no_jetstream(exc):
            return Check(name, FAILED, NO_JETSTREAM)
        return Check(name, FAILED, "; ".join(refused) or f"lookup failed: {type(exc).__name__}: {exc}")
    return Check(name, OK, "found")
