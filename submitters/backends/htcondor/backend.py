"""The ``htcondor`` backend: condor_submit / condor_q / condor_history / condor_rm / condor_transfer_data.

Two modes (``HTCondorConfig.mode``):

- ``local``: the submitter runs on a submit node; the job runs in its job directory on a shared
  filesystem (``should_transfer_files = NO``), so container logs are live;
- ``remote``: an HTCondor-CE reached with ``-pool``/``-name``; ``condor_submit -spool`` sends
  ``job.sh``, the job's ``containers/`` come back with ``condor_transfer_data`` once it ends
  (the backend fetches them before it reports the job finished, so exit codes are exact).

Every job carries ``+InterlinkPodUID`` and ``+InterlinkPool``; so

- poll: ONE ``condor_q -allusers -json`` for all the pool's jobs (``-allusers``: the pool constraint already
  limits the answer, and the identity a CE maps the token to may change), plus ``condor_history -json`` for
  the tracked jobs the queue no longer lists, its ``member(...)`` constraint split into chunks that each fit
  one argument, each with its own timeout — never a call per pod;
- remote mode: finished jobs' output comes back with ``condor_transfer_data`` in batches, each with its own
  timeout, within one command timeout per poll (the rest next poll): 20,000 jobs never livelock a poll;
- reconcile after a crash between ``condor_submit`` and the registry write: the job is found by its
  pod-UID attribute (queue, then history), never submitted twice;
- cancel: ``condor_rm -totals <id>`` (or by pod-UID constraint when the id was never recorded), idempotent;
  the totals tell a job already gone (quiet) from one the token's identity may not remove (an error).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Literal

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.config_files import renamed
from interlink_nats.submitters.backends.htcondor import free
from interlink_nats.submitters.backends.htcondor import parse as hp
from interlink_nats.submitters.backends.htcondor import submit as hs
from interlink_nats.submitters.backends.htcondor.array_submit import SubmitsArrays
from interlink_nats.submitters.backends.htcondor.tokens import OidcTokenSource, TokenConfig, TokenError
from interlink_nats.submitters.backends.proc import Completed, run_command
from interlink_nats.submitters.backends.reconcile import reconcile_by_uid
from interlink_nats.submitters.core import backend as base
from interlink_nats.submitters.core.site_policy import AccountingPolicy, PolicyError
from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger(__name__)

SUBMIT_FILE = "condor.sub"
ORPHAN_FILE = ".condor-failed-submission"
"""The id a failed ``condor_submit -spool`` queued but could not be removed: removed before the next attempt."""
FETCHED_MARK = ".condor-output-fetched"
"""Written once ``condor_transfer_data`` brought a spooled job's output back (remote mode)."""
REMOTE_LOGS_HINT = (
    "this pod runs on a remote HTCondor-CE: its container logs come back with the job's output "
    "sandbox (condor_transfer_data) once the job has ended; until then no log is available here"
)


class HTCondorConfig(BaseModel):
    """The ``htcondor`` settings section (``INTERLINK_SUBMITTER_HTCONDOR__*``), and what the backend takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["local", "remote"] = "local"
    """local: the submitter runs on a submit node whose schedd shares its filesystem (live logs);
    remote: an HTCondor-CE reached with -pool/-name, sandboxes spooled, output fetched when the job ends."""
    collector: str | None = None
    """``-pool host[:port]`` of every condor command (the CE's collector)."""
    schedd: str | None = None
    """``-name`` of every condor command (the CE's schedd)."""
    condor_submit: str = "condor_submit"
    condor_q: str = "condor_q"
    condor_history: str = "condor_history"
    condor_rm: str = "condor_rm"
    condor_transfer_data: str = "condor_transfer_data"
    condor_status: str = "condor_status"
    submit_commands: dict[str, str] = Field(default_factory=dict)
    """Extra submit commands for every job, e.g. {"+WantWholeNode": "false", "requirements": "..."}."""
    request_disk: str = ""
    """``request_disk`` of every job (KiB unless a unit is given), e.g. "2GB"; empty: the site's default."""
    accounting: AccountingPolicy | None = None
    """Who pays, by pod namespace (``accounting_group``/``accounting_group_user``; exact names, patterns and a
    default); a pod may set them only where a row allows it. None: pods may not set them at all."""
    allowed_pod_commands: frozenset[str] = hs.DEFAULT_POD_COMMANDS
    """The submit commands a pod's annotation may set (case-insensitive; ``+Attr``/``MY.Attr`` for a custom
    attribute); default ``submit.DEFAULT_POD_COMMANDS`` (docs/backends/htcondor.md). The accounting commands are the
    ``accounting`` policy's; the commands the submitter writes cannot be listed."""

    @field_validator("allowed_pod_commands", mode="before")
    @classmethod
    def _allowed_names(cls, value: object) -> object:
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
            raise ValueError("must be a list of submit command names")
        return hs.check_command_names([str(v) for v in value], what="allowed_pod_commands")

    time_limit_margin_s: float = Field(60.0, ge=0, validation_alias=renamed("time_limit_margin_s", "time_limit_margin"))
    """activeDeadlineSeconds plus this is HTCondor's own limit (the job script enforces the deadline itself)."""
    hold_timeout_s: float = Field(0.0, ge=0, validation_alias=renamed("hold_timeout_s", "hold_timeout"))
    """A job held this long is removed and reported failed with its hold reason; 0: never."""
    use_condor_status: bool = False
    """Announce capacity from condor_status totals (a local pool); otherwise from ``capacity``."""
    history_limit: int = Field(20000, ge=1)
    """condor_history -limit: how many finished jobs one poll may read back at most."""
    transfer_batch: int = Field(100, ge=1)
    """Jobs per condor_transfer_data call (remote mode): each call has its own timeout."""
    environment: dict[str, str] = Field(default_factory=dict)
    """Extra environment of the condor commands (e.g. _CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS)."""
    token: TokenConfig | None = None
    """Where the bearer token comes from (an OIDC issuer); None: the condor commands bring their own."""
    command_timeout_s: float = Field(60.0, gt=0, validation_alias=renamed("command_timeout_s", "command_timeout"))

    @field_validator("request_disk")
    @classmethod
    def _disk(cls, value: str) -> str:
        return hs.check_quantity(value, what="request_disk") if value else value

    @field_validator("accounting")
    @classmethod
    def _no_switch(cls, value: AccountingPolicy | None) -> AccountingPolicy | None:
        if value is not None and value.switches_accounts:
            raise ValueError("run_as_*: the schedd runs a job as the account that submitted it; nothing switches")
        return value


class HTCondorBackend(SubmitsArrays):
    name = "htcondor"

    @classmethod
    def create(cls, config: HTCondorConfig, context: base.BackendContext) -> HTCondorBackend:
        """What the submitter builds (``backends.BACKENDS``): the token refresher keeps its state in the pool's."""
        token = OidcTokenSource(config.token, context.state_dir) if config.token is not None else None
        return cls(config, pool=context.pool, token=token, clock=context.clock)

    def __init__(
        self,
        settings: HTCondorConfig | None = None,
        *,
        pool: str,
        token: OidcTokenSource | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or HTCondorConfig()
        self.pool = pool
        self.token = token
        self.clock = clock or SYSTEM_CLOCK
        self.calls = 0
        self.calls_by_command: dict[str, int] = {}
        self._site = hs.SubmitSite(
            pool=pool,
            spool=self.spool,
            site_commands=self.settings.submit_commands,
            request_disk=self.settings.request_disk,
            time_limit_margin=self.settings.time_limit_margin_s,
            accounting=self.settings.accounting,
            allowed_pod_commands=self.settings.allowed_pod_commands,
        )
        """What every submit description adds to the pod's job."""
        self._token_stop = asyncio.Event()
        self._token_task: asyncio.Task[None] | None = None

    @property
    def spool(self) -> bool:
        return self.settings.mode == "remote"

    # Lifecycle --------------------------------------------------------------------------------

    def configure(self, build_config: pb.BuildConfig) -> None:
        return None  # no HTCondor options travel in the BuildConfig: the site config has them

    def commands(self) -> list[base.BatchCommand]:
        """condor_submit/_q/_history/_rm; condor_transfer_data when spooling, condor_status when it is asked."""
        names = ["condor_submit", "condor_q", "condor_history", "condor_rm"]
        if self.spool:
            names.append("condor_transfer_data")
        if self.settings.use_condor_status:
            names.append("condor_status")
        return [base.BatchCommand(getattr(self.settings, name), f"htcondor.{name}") for name in names]

    def queries(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """``AnswersQueries`` (``submitter check``): the bearer token fetched (when the site uses one), then
        condor_q once for the pool's jobs, and condor_status when it is asked."""
        calls: dict[str, Callable[[], Awaitable[object]]] = {"token": self.token.ensure_fresh} if self.token else {}
        calls["condor_q"] = self._queue
        if self.settings.use_condor_status:
            calls["condor_status"] = self.capacity
        return calls

    async def start(self) -> None:
        if self.token is not None:
            try:
                await self.token.ensure_fresh()
            except TokenError as exc:
                raise base.BackendUnavailable(f"no bearer token for HTCondor: {exc}") from None
            self._token_stop.clear()
            self._token_task = asyncio.create_task(self.token.run(self._token_stop), name="htcondor-token")

    async def close(self) -> None:
        self._token_stop.set()
        if self._token_task is not None:
            await asyncio.gather(self._token_task, return_exceptions=True)
            self._token_task = None

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    def logs_unavailable(self, job_dir: Path) -> str | None:
        """Why no container log can be read yet (remote CE before output transfer), else None."""
        if self.spool and not (job_dir / FETCHED_MARK).exists():
            return REMOTE_LOGS_HINT
        return None

    # Commands ---------------------------------------------------------------------------------

    def _target(self) -> list[str]:
        out: list[str] = []
        if self.settings.collector:
            out += ["-pool", self.settings.collector]
        if self.settings.schedd:
            out += ["-name", self.settings.schedd]
        return out

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.environment)
        if self.token is not None:
            env.update(self.token.environment())
        return env

    async def _run(self, command: hp.Command, argv: list[str], *, cwd: str | None = None) -> str:
        """The command's stdout; a failure raises the error ``htcondor_parse.classify_failure`` names."""
        done = await self._exec(command, argv, cwd=cwd)
        if done.returncode != 0:
            raise self._failure(command, done)
        return done.stdout

    @staticmethod
    def _failure(command: hp.Command, done: Completed) -> Exception:
        failed = base.CommandFailed(done.argv, done.returncode, done.stderr or done.stdout)
        return base.error_for(hp.classify_failure(command, failed.returncode, failed.stderr), failed)

    async def _exec(self, command: hp.Command, argv: list[str], *, cwd: str | None = None) -> Completed:
        """Run one condor command with its own timeout; a non-zero exit is the caller's to read."""
        if self.token is not None:
            try:
                await self.token.ensure_fresh()
            except TokenError as exc:
                raise base.BackendUnavailable(f"no bearer token for HTCondor: {exc}") from None
        self.calls += 1
        tool = Path(argv[0]).name
        self.calls_by_command[tool] = self.calls_by_command.get(tool, 0) + 1
        try:
            return await run_command(
                argv,
                time_limit=self.settings.command_timeout_s,
                env=self._env(),
                cwd=cwd,
                check=False,
                command=command.value,
            )
        except base.CommandFailed as failed:  # timed out
            raise base.error_for(hp.classify_failure(command, failed.returncode, failed.stderr), failed) from failed

    async def _query(self, command: hp.Command, tool: str, constraint: str, *extra: str) -> list[dict[str, object]]:
        argv = [tool, *self._target(), "-json", "-attributes", hp.attributes(command), "-constraint", constraint]
        out = await self._run(command, [*argv, *extra])
        try:
            return hp.parse_ads(out, what=Path(tool).name)
        except ValueError as exc:
            raise base.BackendUnavailable(str(exc)) from None

    async def _queue(self) -> dict[str, hp.CondorJob]:
        constraint = hp.pool_constraint(self.pool)
        ads = await self._query(hp.Command.QUEUE, self.settings.condor_q, constraint, "-allusers")
        return hp.parse_jobs(ads, pool=self.pool, now=self.clock.time(), hold_timeout=self.settings.hold_timeout_s)

    async def _history(self, constraints: list[str]) -> dict[str, hp.CondorJob]:
        """One ``condor_history`` per constraint chunk (each fits one argument, each has its own timeout)."""
        limit = str(self.settings.history_limit)
        out: dict[str, hp.CondorJob] = {}
        for constraint in constraints:
            ads = await self._query(hp.Command.HISTORY, self.settings.condor_history, constraint, "-limit", limit)
            out.update(hp.parse_jobs(ads, pool=self.pool, now=self.clock.time()))
        return out

    # Submit -----------------------------------------------------------------------------------

    async def submit(self, spec: base.JobSpec) -> str:
        policy = self.settings.accounting
        if policy is not None and (spec.run_as_user is not None or spec.run_as_group is not None):
            try:  # no rule lets a pod ask here (``_no_switch``): the same message as every backend's
                policy.run_as(spec.namespace, uid=spec.run_as_user, gid=spec.run_as_group)
            except PolicyError as exc:
                raise base.SubmitRejected(str(exc)) from exc
        try:
            text = hs.submit_description(spec, self._site)
        except hs.SubmitCommandError as exc:
            raise base.SubmitRejected(str(exc)) from exc
        path = spec.job_dir / SUBMIT_FILE
        orphan = await asyncio.to_thread(_read_text, spec.job_dir / ORPHAN_FILE)
        if orphan:  # an earlier attempt's held job: never two jobs for one pod
            await self._remove([orphan])
            await asyncio.to_thread((spec.job_dir / ORPHAN_FILE).unlink, missing_ok=True)
        await asyncio.to_thread(_write_file, path, text)
        argv = [self.settings.condor_submit, "-terse", *(["-spool"] if self.spool else []), *self._target(), str(path)]
        done = await self._exec(hp.Command.SUBMIT, argv, cwd=str(spec.job_dir))
        if done.returncode != 0:
            await self._remove_failed_submission(done, spec.job_dir)
            raise self._failure(hp.Command.SUBMIT, done)
        try:
            return hp.parse_submit_id(done.stdout)
        except ValueError as exc:
            raise base.BackendUnavailable(str(exc)) from None

    async def _remove_failed_submission(self, done: Completed, job_dir: Path) -> None:
        """With ``-spool`` the id is printed before the input is spooled: a spool failure leaves that job held
        (HoldReasonCode 16, which periodic expressions skip) for good unless it is removed here."""
        try:
            job_id = hp.parse_submit_id(done.stdout)
        except ValueError:
            return  # nothing was queued
        try:
            await self._remove([job_id])
        except base.BackendUnavailable as exc:
            await asyncio.to_thread(_write_file, job_dir / ORPHAN_FILE, job_id + "\n")
            raise base.BackendUnavailable(
                f"condor_submit failed after queueing {job_id}, which could not be removed: {exc}"
            ) from None

    # Poll -------------------------------------------------------------------------------------

    async def poll(self, jobs: Sequence[base.JobHandle]) -> dict[str, base.Observation]:
        if not jobs:
            return {}
        queue = await self._queue()
        by_id = {j.job_id: j for j in jobs if j.job_id}
        seen: dict[str, hp.CondorJob] = {i: job for i, job in queue.items() if i in by_id}
        missing = [i for i in by_id if i not in seen]
        if missing:
            history = await self._history(hp.clusters_constraints(self.pool, (i.split(".", 1)[0] for i in missing)))
            seen.update({i: job for i, job in history.items() if i in by_id and i not in seen})
        out: dict[str, base.Observation] = {}
        fetch: list[hp.CondorJob] = []
        leftovers: list[hp.CondorJob] = []
        for job_id, job in seen.items():
            handle = by_id[job_id]
            obs = job.observation
            if obs.state.terminal and self.spool and job.status == 4 and not (handle.job_dir / FETCHED_MARK).exists():
                if job_id in queue:
                    fetch.append(job)
                    continue  # finished, output not back yet: still "running" until it is
                obs = _without_output(obs)
            if obs.state.terminal and job.status == 5 and job_id in queue:
                leftovers.append(job)  # held for good (time limit, hold_timeout): take it out of the queue
            out[handle.uid] = await self._with_deadline_file(handle, obs)
        if fetch:
            fetched = await self._transfer(fetch, by_id)
            for job in fetch:
                handle = by_id[job.job_id]
                if job.job_id in fetched:
                    out[handle.uid] = await self._with_deadline_file(handle, job.observation)
                else:
                    out[handle.uid] = base.Observation(
                        base.BackendState.RUNNING, reason="fetching output", raw_state="COMPLETED"
                    )
        if leftovers:
            await self._remove_quietly([j.job_id for j in leftovers])
        return out

    async def _transfer(self, jobs: list[hp.CondorJob], by_id: dict[str, base.JobHandle]) -> set[str]:
        """``condor_transfer_data`` in batches (each fits one argument and has its own timeout), for at most one
        command timeout per poll: what is left is fetched at the next poll. Returns the ids now fetched."""
        fetched: set[str] = set()
        started = time.monotonic()
        batches = hp.id_batches((j.job_id for j in jobs), max_jobs=self.settings.transfer_batch)
        for batch in batches:
            if time.monotonic() - started > self.settings.command_timeout_s:
                break
            try:
                await self._run(hp.Command.TRANSFER_DATA, [self.settings.condor_transfer_data, *self._target(), *batch])
            except base.BackendUnavailable as exc:
                log.warning("condor_transfer_data of %d jobs failed (%s); retrying next poll", len(batch), exc)
                continue
            for job_id in batch:
                await asyncio.to_thread(_write_file, by_id[job_id].job_dir / FETCHED_MARK, job_id + "\n")
            fetched.update(batch)
        return fetched

    async def _with_deadline_file(self, handle: base.JobHandle, obs: base.Observation) -> base.Observation:
        """A job whose script stopped it at activeDeadlineSeconds ended by its deadline, whatever its exit code."""
        if obs.state in (base.BackendState.COMPLETED, base.BackendState.FAILED) and await asyncio.to_thread(
            _deadline_marked, handle.job_dir
        ):
            return dataclasses.replace(
                obs,
                state=base.BackendState.DEADLINE,
                reason="activeDeadlineSeconds exceeded: the job script stopped the pod",
            )
        return obs

    # Reconcile and cancel ---------------------------------------------------------------------

    async def reconcile(self, jobs: Sequence[base.JobHandle]) -> dict[str, base.Reconciled]:
        return await reconcile_by_uid(jobs, self._find_by_uid)

    async def _find_by_uid(self, unknown: list[base.JobHandle]) -> dict[str, str]:
        """Jobs by their pod-UID attribute: the queue, then the history for the ones it no longer lists."""
        found = hp.uids_to_ids(await self._queue())
        rest = [j.uid for j in unknown if j.uid not in found]
        if rest:
            found = {**hp.uids_to_ids(await self._history(hp.uids_constraints(self.pool, rest))), **found}
        return found

    async def cancel(self, job: base.JobHandle) -> None:
        if job.job_id:
            await self._remove([job.job_id])
        else:
            await self._remove([], constraints=hp.uids_constraints(self.pool, [job.uid]))

    async def _remove(self, job_ids: list[str], *, constraints: Sequence[str] = ()) -> None:
        """``condor_rm -totals`` in batches: quiet when the jobs are removed or already gone; "permission denied"
        (the same "Couldn't find/remove all jobs" text as gone) raises BackendUnavailable, so it is retried."""
        rm = [self.settings.condor_rm, *self._target(), "-totals"]
        calls = [[*rm, *batch] for batch in hp.id_batches(job_ids)] + [[*rm, "-constraint", c] for c in constraints]
        for argv in calls:
            done = await self._exec(hp.Command.REMOVE, argv)
            totals = hp.parse_remove_totals(done.stdout)
            if totals is None:  # no answer from the schedd: the text alone decides
                error = self._failure(hp.Command.REMOVE, done) if done.returncode != 0 else None
                if error is not None and not isinstance(error, base.JobAlreadyEnded):
                    raise error
                continue
            problem = hp.removal_problem(totals)
            if problem is not None:
                raise base.BackendUnavailable(f"{problem} ({(done.stderr or done.stdout).strip()[:200]})")

    async def _remove_quietly(self, job_ids: list[str]) -> None:
        try:
            await self._remove(job_ids)
        except base.BackendUnavailable as exc:
            log.warning("could not remove finished held jobs %s: %s", ", ".join(job_ids[:20]), exc)

    async def capacity(self) -> base.Capacity:
        if not self.settings.use_condor_status:
            return base.Capacity()  # the site config's ``capacity`` is announced
        argv = [self.settings.condor_status, *self._target(), "-json", "-attributes", _STATUS_ATTRS]
        out = await self._run(hp.Command.STATUS, argv)
        try:
            return hp.parse_status_totals(hp.parse_ads(out, what="condor_status"))
        except ValueError as exc:
            raise base.BackendUnavailable(str(exc)) from exc

    async def free(self) -> base.Capacity | None:
        """The unclaimed slots now (``ReportsFree``; ``htcondor.free``): one condor_status call."""
        if not self.settings.use_condor_status:
            return None  # capacity comes from the site config: what is free is unknown
        argv = [self.settings.condor_status, *self._target(), "-constraint", free.UNCLAIMED, "-json"]
        out = await self._run(hp.Command.STATUS, [*argv, "-attributes", free.ATTRS])
        try:
            return free.parse_unclaimed(hp.parse_ads(out, what="condor_status"))
        except ValueError as exc:
            raise base.BackendUnavailable(str(exc)) from exc


_STATUS_ATTRS = "Machine,Cpus,Memory,GPUs,TotalSlotCpus,TotalSlotMemory,TotalSlotGPUs,DynamicSlot"


def _without_output(obs: base.Observation) -> base.Observation:
    """A spooled job that left the queue before its output was fetched: its files are lost."""
    return dataclasses.replace(
        obs, reason="the job left the CE's queue before its output was fetched; container logs are not available"
    )


def _write_file(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def _deadline_marked(job_dir: Path) -> bool:
    """The script's deadline marker: in ``containers/`` (it comes back from a CE), or where older scripts wrote it."""
    return layout.deadline_path(job_dir).exists() or (job_dir / layout.DEADLINE_FILE).exists()
