"""The ``slurm`` backend: sbatch / squeue / sacct / scancel / sinfo, all batched.

- submit: ``sbatch --job-name=<pod uid> --chdir=<job dir> --output=<job dir>/job.out --parsable``,
  with the pool's ``slurm.sbatch_flags``, the pod's backend flags (annotation) and its resources
  (``--cpus-per-task``/``--mem``/``--gres=gpu:N``/``--time``), in that precedence;
- poll: ONE ``squeue --me --states=all`` for every job (not ``-j a,b,c``: one purged id makes
  squeue print nothing), plus one ``sacct`` for jobs squeue no longer lists when the site has
  accounting; the job's own container files give the exact per-container exit codes;
- reconcile after a crash: jobs are named by pod UID, so ``squeue --name`` (and sacct) finds a
  submission whose id was never recorded; a job directory with output proves it ran;
- cancel: ``scancel <id>`` (or ``scancel --name=<uid>`` when the id was never recorded);
- job arrays (``RunsArrays``): the pods of one Job as one ``sbatch --array``, named by the array uid, task i
  running member i's script (``array``); each member is then polled and cancelled as ``<id>_<i>``;
- pod groups (``RunsGangs``): one sbatch for the whole group, named by the group uid, whose launcher runs one
  ``srun`` step per member (``gang``); poll, cancel and reconcile then treat it as one job.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.backend_options import backend_options
from interlink_nats.kernel.config_files import renamed
from interlink_nats.submitters.backends import job_environment as je
from interlink_nats.submitters.backends.accounts import hand_over, job_identity, take_over, warn_about_root
from interlink_nats.submitters.backends.proc import run_command
from interlink_nats.submitters.backends.reconcile import reconcile_by_uid
from interlink_nats.submitters.backends.slurm import array as sa
from interlink_nats.submitters.backends.slurm import array_ids
from interlink_nats.submitters.backends.slurm import flags as sf
from interlink_nats.submitters.backends.slurm import gang as sg
from interlink_nats.submitters.backends.slurm import parse as sp
from interlink_nats.submitters.backends.storage_access import check_access, check_own_access
from interlink_nats.submitters.core.backend import (
    GONE,
    ArraySpec,
    BackendContext,
    BackendError,
    BackendUnavailable,
    BatchCommand,
    Capacity,
    CommandFailed,
    CommandUnusable,
    GangSpec,
    JobAlreadyEnded,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
    SubmitRejected,
    error_for,
)
from interlink_nats.submitters.core.site_policy import AccountingPolicy, PolicyError
from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger(__name__)


class SlurmConfig(BaseModel):
    """The ``slurm`` settings section (``INTERLINK_SUBMITTER_SLURM__*``), and what the backend takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sbatch: str = "sbatch"
    squeue: str = "squeue"
    scancel: str = "scancel"
    sacct: str = "sacct"
    sinfo: str = "sinfo"
    srun: str = "srun"
    """Run by a pod group's launcher on the compute node (not by the submitter), as is ``scontrol``."""
    scontrol: str = "scontrol"
    partition: str | None = None
    """Limit capacity discovery (sinfo) to this partition; jobs pick theirs with sbatch flags."""
    use_sacct: bool | None = None
    """Ask sacct about jobs that left squeue; None: as the BuildConfig says (backends.slurm.use_sacct)."""
    squeue_all_users: bool = False
    """Poll every user's jobs instead of ``--me`` (when jobs are submitted as another user)."""
    command_timeout_s: float = Field(60.0, gt=0, validation_alias=renamed("command_timeout_s", "command_timeout"))
    accounting: AccountingPolicy | None = None
    """By pod namespace (docs/security.md): ``group`` is the job's ``--account`` (a pod's own ``--account``
    flag only where ``pod_may_set`` has ``group``), ``run_as_*`` whom it runs as (``sbatch --uid/--gid``,
    which needs the submitter to be root; the poll then lists every user's jobs)."""
    array_throttle: int = Field(0, ge=0)
    """At most this many tasks of one job array run at once (``sbatch --array=…%N``); 0: no limit."""
    allowed_pod_flags: frozenset[str] = sf.DEFAULT_ALLOWED
    """The sbatch options (canonical long names, e.g. ``nodes``, ``qos``) a pod's ``slurm-job.vk.io/flags`` may
    use, however it spells them; default ``flags.DEFAULT_ALLOWED`` (docs/backends/slurm.md). ``--account`` is
    decided by ``accounting`` where there is one; the options the submitter controls cannot be listed."""
    job_environment: je.JobEnvironment = je.DEFAULT_JOB_ENVIRONMENT
    """The submitter's environment variables sbatch (and so every job: sbatch exports its environment) gets, by
    name or ``PREFIX*`` (``flags.job_sbatch_environment`` says what else: ``SLURM_CONF``, ``INTERLINK_JOB_DIR``)."""

    @field_validator("allowed_pod_flags", mode="before")
    @classmethod
    def _allowed_names(cls, value: object) -> object:
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
            raise ValueError("must be a list of sbatch option names")
        return sf.check_names([str(v) for v in value], what="allowed_pod_flags")


@dataclass(slots=True)
class _Watch:
    """What the poll path keeps between calls: the last squeue and the tracked jobs, by Slurm id."""

    squeue: sp.SqueueSnapshot = sp.EMPTY_SQUEUE
    """The previous call's squeue; unchanged lines are not parsed again and keep their Observation."""
    jobs: dict[str, JobHandle] = field(default_factory=dict)
    missing: dict[str, JobHandle] = field(default_factory=dict)
    """Tracked jobs squeue no longer lists: sacct is asked about them at every call."""


class SlurmBackend:
    name = "slurm"

    @classmethod
    def create(cls, config: SlurmConfig, context: BackendContext) -> SlurmBackend:
        """What the submitter builds (``backends.BACKENDS``): the settings section is all it needs."""
        return cls(config)

    def __init__(self, settings: SlurmConfig | None = None) -> None:
        self.settings = settings or SlurmConfig()
        self._pool_flags: list[sf.Flag] = []
        self._flag_policy = sf.FlagPolicy(self.settings.allowed_pod_flags)
        self._use_sacct = bool(self.settings.use_sacct)
        policy = self.settings.accounting
        self._all_users = self.settings.squeue_all_users or (policy is not None and policy.switches_accounts)
        self._me = [] if self._all_users else ["--me"]
        self._sacct_broken = False
        self._watch = _Watch()
        """``poll_changes``'s view of the tracked jobs."""
        self._sbatch_environment = sf.SbatchEnvironment(self.settings.job_environment)
        self._polled = _Watch()
        """``poll``'s own view (only its squeue outlives a call): a plain poll in between must not hide a change."""
        self.calls = 0

    def set_accounting(self, policy: AccountingPolicy | None) -> None:
        """A reloaded accounting table (SIGHUP): for jobs submitted from now on; squeue then lists every
        user's jobs when the table switches accounts (the jobs are no longer all the submitter's)."""
        warn_about_root(policy)
        self.settings = self.settings.model_copy(update={"accounting": policy})
        self._all_users = self.settings.squeue_all_users or (policy is not None and policy.switches_accounts)
        self._me = [] if self._all_users else ["--me"]

    def configure(self, build_config: pb.BuildConfig) -> None:
        """Take the pool's flags (one sbatch would refuse, or the submitter controls, is a config error); write the
        pod allowlist into ``build_config`` (``backends.slurm.allowed_pod_flags``: the gateway refuses other flags)."""
        options = build_config.backends = backend_options(build_config)
        slurm = options.slurm = options.slurm or pb.SlurmOptions()
        slurm.allowed_pod_flags = sorted(self.settings.allowed_pod_flags)
        pool_flags = sf.site_flags(slurm.sbatch_flags, source="pool sbatch")
        flavors = {
            tuple(f.backend_flags): sf.site_flags(f.backend_flags, source=f"flavor {name}")
            for name, f in sorted(build_config.flavors.items())
        }
        self._pool_flags = pool_flags
        self._flag_policy = sf.FlagPolicy(self.settings.allowed_pod_flags, flavors)
        if self.settings.use_sacct is None:
            self._use_sacct = slurm.use_sacct

    def commands(self) -> list[BatchCommand]:
        """sbatch, squeue, scancel, sinfo, and sacct when it is asked (``srun``/``scontrol`` run on the nodes)."""
        names = ["sbatch", "squeue", "scancel", "sinfo", *(["sacct"] if self._use_sacct else [])]
        return [BatchCommand(getattr(self.settings, name), f"slurm.{name}") for name in names]

    def queries(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """``AnswersQueries`` (``submitter check``): squeue and sinfo once, and sacct when it is asked (it needs
        slurmdbd: without it sacct says "accounting storage is disabled")."""
        calls: dict[str, Callable[[], Awaitable[object]]] = {"squeue": self._squeue, "sinfo": self.capacity}
        if self._use_sacct:
            calls["sacct"] = self._sacct_once
        return calls

    async def _sacct_once(self) -> str:
        argv = [self.settings.sacct, "-X", "-n", "-P", "-S", "now", "-o", "JobID"]
        try:
            return await self._run(sp.Command.SACCT, argv)
        except BackendError as exc:
            raise BackendError(f"{exc} (use_sacct needs slurmdbd: set use_sacct: false without it)") from exc

    async def start(self) -> None:
        warn_about_root(self.settings.accounting)

    async def close(self) -> None:
        return None

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    async def _run(self, command: sp.Command, argv: list[str], *, env: dict[str, str] | None = None) -> str:
        """The command's stdout; a failure raises the error ``slurm_parse.classify_failure`` names."""
        self.calls += 1
        try:
            done = await run_command(argv, time_limit=self.settings.command_timeout_s, env=env, command=command.value)
        except CommandFailed as failed:
            raise error_for(sp.classify_failure(command, failed.returncode, failed.stderr), failed) from failed
        return done.stdout

    async def _sbatch(self, argv: list[str], ours: dict[str, str]) -> str:
        """The id of the job sbatch submitted, run with the job's environment: what the site listed and ``ours``
        (``flags.job_sbatch_environment``), for every sbatch (a pod, an array, a gang)."""
        ours = {layout.JOB_REMOVES_LAYOUT_ENV: "1", **ours}  # the node removes the ended layout, not the login node
        env = self._sbatch_environment(ours)
        out = await self._run(sp.Command.SBATCH, argv, env=env)
        try:
            return sp.parse_sbatch_id(out)
        except ValueError as exc:
            raise BackendUnavailable(str(exc)) from exc

    def check_script(self, script: str, *, field: str) -> None:
        """``ReadsScriptOptions``: sbatch's ``#SBATCH`` lines, on the request's text at the door (never read back)."""
        sf.check_script_header(io.StringIO(script), what=field)

    def _site_flags(self, spec: JobSpec) -> tuple[list[sf.Flag], list[str]]:
        """(the pod's flags, the site's ``--account``/``--uid``/``--gid``) for ``spec``; a refusal raises."""
        policy = self.settings.accounting
        flags = self._flag_policy.check(spec.backend_flags, account_by_policy=policy is not None)
        if policy is None:
            check_own_access(spec.storage)
            return flags, []
        pod_flags, asked = sf.take_account(flags)
        try:
            account = policy.decide(spec.namespace, group=asked)
        except PolicyError as exc:
            raise SubmitRejected(f"pod flag --account: {exc}") from exc
        site = [f"--account={account.group}"] if account.group else []
        ident = take_over(policy, spec)
        if ident is not None:
            site += [f"--uid={ident.uid}", f"--gid={ident.gid}"]
        return pod_flags, site

    async def submit(self, spec: JobSpec) -> str:
        try:  # a thread only to look at the site (NSS, the storage's directories): a hop costs two wake-ups
            looks = self.settings.accounting is not None or spec.storage
            pod_flags, site = await asyncio.to_thread(self._site_flags, spec) if looks else self._site_flags(spec)
            argv = sp.sbatch_argv(
                self.settings.sbatch,
                uid=spec.uid,
                job_dir=str(spec.job_dir),
                script=str(spec.script),
                pool_flags=self._pool_flags,
                pod_flags=pod_flags,
                sized=sp.resource_flags(spec.resources),
                site=site,
            )
        except sf.FlagError as exc:
            raise SubmitRejected(str(exc)) from exc
        return await self._sbatch(argv, {layout.JOB_DIR_ENV: str(spec.job_dir)})

    def _gang_site_flags(self, gang: GangSpec) -> tuple[list[sf.Flag], list[str]]:
        return self._group_site_flags(gang.members, gang.job_dir)

    def _group_site_flags(self, members: Sequence[JobSpec], group_dir: Path) -> tuple[list[sf.Flag], list[str]]:
        """:meth:`_site_flags` for a gang or an array: one set of pod flags, one account and one identity for every
        member (else SubmitRejected naming two pods); the identity gets every member's directory and the group's."""
        policy = self.settings.accounting
        flags = self._flag_policy.check(sg.agreed_flags(members), account_by_policy=policy is not None)
        if policy is None:
            return flags, []
        pod_flags, asked = sf.take_account(flags)
        try:
            accounts = [policy.decide(m.namespace, group=asked).group for m in members]
        except PolicyError as exc:
            raise SubmitRejected(f"pod flag --account: {exc}") from exc
        account = sg.same_for_all(members, accounts, "accounts")
        site = [f"--account={account}"] if account else []
        ident = sg.same_for_all(members, [job_identity(policy, m) for m in members], "site accounts to run as")
        if ident is not None:
            for member in members:
                check_access(member.storage, ident.uid, ident.gid)
            for directory in (*(m.job_dir for m in members), group_dir):
                hand_over(directory, ident)
            site += [f"--uid={ident.uid}", f"--gid={ident.gid}"]
        return pod_flags, site

    def _write_launcher(self, gang: GangSpec) -> Path:
        """``<gang dir>/job.sh``, written atomically (a retried submission rewrites the same text)."""
        text = sg.launcher_script(
            group_name=gang.name,
            members=gang.members,
            failure_policy=gang.failure_policy,
            srun=self.settings.srun,
            scontrol=self.settings.scontrol,
            scancel=self.settings.scancel,
        )
        gang.job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = gang.job_dir / layout.SCRIPT_NAME
        tmp = path.with_name(f".{layout.SCRIPT_NAME}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o700)
        tmp.replace(path)
        return path

    async def submit_gang(self, gang: GangSpec) -> str:
        """``RunsGangs``: the group as one allocation, one task per member (``gang`` says how and why)."""
        if not gang.members:
            raise SubmitRejected(f"pod group {gang.name!r} has no members")
        try:
            sg.agreed_flags(gang.members)  # refused before anything is written
            script = await asyncio.to_thread(self._write_launcher, gang)
            pod_flags, site = await asyncio.to_thread(self._gang_site_flags, gang)
            # Named by the group uid, output in the gang's directory: the single-job poll, cancel and reconcile
            # work on it unchanged.
            argv = sp.sbatch_argv(
                self.settings.sbatch,
                uid=gang.uid,
                job_dir=str(gang.job_dir),
                script=str(script),
                pool_flags=self._pool_flags,
                pod_flags=pod_flags,
                sized=sg.gang_resource_flags([m.resources for m in gang.members]),
                site=site,
            )
        except sf.FlagError as exc:
            raise SubmitRejected(str(exc)) from exc
        return await self._sbatch(argv, {})

    async def find_gang(self, gang: GangSpec) -> Reconciled:
        """``RunsGangs``: the gang's job is named by the group uid, as a single job by its pod uid."""
        return (await self.reconcile([JobHandle(gang.uid, gang.job_dir)]))[gang.uid]

    def _write_array(self, array: ArraySpec) -> Path:
        """The array's directory: ``tasks/<i>`` linked to member i's directory and the task script, written
        atomically (a retried submission rewrites the same)."""
        text = sa.task_script(array.members)
        tasks = array.job_dir / sa.TASKS_DIR
        tasks.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i, member in enumerate(array.members):
            link = tasks / str(i)
            if not link.is_symlink() or link.readlink() != member.job_dir:
                tmp = tasks / f".{i}.tmp"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(member.job_dir)
                tmp.replace(link)
        path = array.job_dir / layout.SCRIPT_NAME
        tmp = path.with_name(f".{layout.SCRIPT_NAME}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o700)
        tmp.replace(path)
        return path

    async def submit_array(self, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        """``RunsArrays``: ONE ``sbatch --array=0-<n-1>[%throttle]`` for every member (``array`` says how); member
        i's job id is ``<id>_<i>``, polled and cancelled alone."""
        members = array.members
        if not members:
            raise SubmitRejected(f"job array {array.name or array.array_uid!r} has no members")
        try:
            sg.agreed_flags(members)  # refused before anything is written
            script = await asyncio.to_thread(self._write_array, array)
            pod_flags, site = await asyncio.to_thread(self._group_site_flags, members, array.job_dir)
            argv = sa.array_sbatch_argv(
                self.settings.sbatch,
                array_uid=array.array_uid,
                array_dir=str(array.job_dir),
                script=str(script),
                count=len(members),
                throttle=sa.throttle_for(array.throttle, self.settings.array_throttle),
                pool_flags=self._pool_flags,
                pod_flags=pod_flags,
                resources=[m.resources for m in members],
                site=site,
            )
        except sf.FlagError as exc:
            raise SubmitRejected(str(exc)) from exc
        array_id = await self._sbatch(argv, {})
        return array_id, self.member_job_ids(array, array_id)

    async def find_array(self, array: ArraySpec) -> Reconciled:
        """``RunsArrays``: the array is named by its uid; squeue (and sacct) list its tasks under it: the array's
        own id (``names_to_ids`` reads it from a task's or a pending range's)."""
        return (await self.reconcile([JobHandle(array.array_uid, array.job_dir)]))[array.array_uid]

    def member_job_ids(self, array: ArraySpec, array_job_id: str) -> tuple[str, ...]:
        """``RunsArrays``: member i is task i, ``<id>_<i>``."""
        return array_ids.member_job_ids(array_job_id, len(array.members))

    async def _squeue(self) -> str:
        argv = [self.settings.squeue, "-h", *self._me, "--states=all", "-O", sp.SQUEUE_FORMAT]
        return await self._run(sp.Command.SQUEUE, argv)

    async def _sacct(self, *select: str) -> dict[str, sp.SlurmJob]:
        """sacct's jobs matching ``select``; nothing when the site has no accounting (then it is not asked again)."""
        if not self._use_sacct or self._sacct_broken:
            return {}
        who = ["--allusers"] if self._all_users else []
        argv = [self.settings.sacct, "-X", "-n", "-P", *who, "-o", sp.SACCT_FIELDS, *select]
        try:
            return sp.parse_sacct(await self._run(sp.Command.SACCT, argv))
        except CommandUnusable as exc:
            log.warning("sacct is not usable on this site (%s); relying on job files", exc)
            self._sacct_broken = True
            return {}

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[str, Observation]:
        """Every job at once: :meth:`_observe` with every job added to a view that forgot the previous ones."""
        if not jobs:
            return {}
        view = self._polled = _Watch(squeue=self._polled.squeue)
        observed = await self._observe(view, jobs, (), remember=False)
        if view.missing or len(observed) < len(jobs):  # some may be GONE: left out, as the contract says
            return {uid: obs for uid, obs in observed.items() if obs is not GONE}
        return observed

    async def poll_changes(
        self, added: Sequence[JobHandle], removed: Sequence[JobHandle], *, restart: bool
    ) -> dict[str, Observation]:
        """``ReportsChanges``: see :meth:`_observe`."""
        if restart:
            self._watch = _Watch()
        return await self._observe(self._watch, added, removed)

    async def _observe(
        self, watch: _Watch, added: Sequence[JobHandle], removed: Sequence[JobHandle], *, remember: bool = True
    ) -> dict[str, Observation]:
        """The one poll path: one squeue, and work for the jobs whose line changed, not for every job.

        The jobs answered are those whose squeue line changed, appeared or left, the added ones,
        and the ones squeue no longer lists (sacct's answer, or GONE, at every call). Without
        ``remember`` the added jobs are answered but not kept in ``watch`` (a full poll adds every
        job again at every call: storing 10,000 handles only to drop them was half its cost).
        """
        squeue, changed = sp.squeue_changes(await self._squeue(), watch.squeue)
        out: dict[str, Observation] = {}
        for job in removed:
            if job.job_id and watch.jobs.get(job.job_id) == job:
                del watch.jobs[job.job_id]
                watch.missing.pop(job.job_id, None)
        listed, tracked, missing = squeue.by_id.get, watch.jobs, watch.missing
        for job in added:  # one lean pass: a full poll adds every tracked job at every call
            job_id = job.job_id
            if not job_id:
                out[job.uid] = GONE  # never submitted as far as we know: nothing to ask Slurm
                continue
            if remember:
                tracked[job_id] = job
            seen = listed(job_id)
            if seen is None:
                missing[job_id] = job
            else:
                out[job.uid] = seen.observation
        for job_id in changed:
            ours = watch.jobs.get(job_id)
            if ours is None:
                continue  # not ours, or no longer tracked
            seen = listed(job_id)
            if seen is None:
                watch.missing[job_id] = ours
            else:
                watch.missing.pop(job_id, None)
                out[ours.uid] = seen.observation
        if watch.missing:
            answers = await self._sacct("-j", ",".join(watch.missing))
            for job_id, job in watch.missing.items():
                answer = answers.get(job_id)
                out[job.uid] = GONE if answer is None else answer.observation
        watch.squeue = squeue
        return out

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]:
        return await reconcile_by_uid(jobs, self._find_by_uid)

    async def _find_by_uid(self, unknown: list[JobHandle]) -> dict[str, str]:
        """Jobs by name (the pod uid): squeue, and sacct for the last week when the site has accounting."""
        names = sp.names_to_ids(sp.parse_squeue(await self._squeue()))
        try:
            recorded = await self._sacct("--name", ",".join(j.uid for j in unknown), "-S", "now-7days")
            names = {**sp.names_to_ids(recorded), **names}
        except BackendUnavailable as exc:
            log.warning("sacct lookup failed during reconcile: %s", exc)
        return names

    async def cancel(self, job: JobHandle) -> None:
        if job.job_id:
            argv = [self.settings.scancel, job.job_id]
        else:
            argv = [self.settings.scancel, *self._me, f"--name={job.uid}"]
        try:
            await self._run(sp.Command.SCANCEL, argv)
        except JobAlreadyEnded:
            return

    async def capacity(self) -> Capacity:
        argv = [self.settings.sinfo, "-h", "-N", "-o", sp.SINFO_FORMAT]
        if self.settings.partition:
            argv += ["-p", self.settings.partition]
        return sp.parse_sinfo(await self._run(sp.Command.SINFO, argv))

    async def free(self) -> Capacity | None:
        """What the pool's partition has idle now (``ReportsFree``): one ``sinfo`` call."""
        argv = [self.settings.sinfo, "-h", "-N", "-O", sp.SINFO_FREE_FORMAT]
        if self.settings.partition:
            argv += ["-p", self.settings.partition]
        return sp.parse_sinfo_free(await self._run(sp.Command.SINFO, argv))
