"""The ``slurm`` backend: sbatch / squeue / sacct / scancel / sinfo, all batched.

- submit: ``sbatch --job-name=<pod uid> --chdir=<job dir> --output=<job dir>/job.out --parsable``,
  with the pool's ``slurm.sbatch_flags``, the pod's backend flags (annotation) and its resources
  (``--cpus-per-task``/``--mem``/``--gres=gpu:N``/``--time``), in that precedence;
- poll: ONE ``squeue --me --states=all`` for every job (not ``-j a,b,c``: one purged id makes
  squeue print nothing), plus one ``sacct`` for jobs squeue no longer lists when the site has
  accounting; the job's own container files give the exact per-container exit codes;
- reconcile after a crash: jobs are named by pod UID, so ``squeue --name`` (and sacct) finds a
  submission whose id was never recorded; a job directory with output proves it ran;
- cancel: ``scancel <id>`` (or ``scancel --name=<uid>`` when the id was never recorded).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.config_files import renamed
from interlink_nats.submitters.backends import slurm_parse as sp
from interlink_nats.submitters.backends.base import (
    GONE,
    BackendContext,
    BackendUnavailable,
    Capacity,
    CommandFailed,
    JobHandle,
    JobSpec,
    Observation,
    Reconciled,
    SubmitRejected,
)
from interlink_nats.submitters.backends.proc import environ_with, run_command
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class SlurmConfig(BaseModel):
    """The ``slurm`` settings section (``INTERLINK_SUBMITTER_SLURM__*``), and what the backend takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sbatch: str = "sbatch"
    squeue: str = "squeue"
    scancel: str = "scancel"
    sacct: str = "sacct"
    sinfo: str = "sinfo"
    partition: str | None = None
    """Limit capacity discovery (sinfo) to this partition; jobs pick theirs with sbatch flags."""
    use_sacct: bool | None = None
    """Ask sacct about jobs that left squeue; None: as the BuildConfig says (slurm.use_sacct)."""
    squeue_all_users: bool = False
    """Poll every user's jobs instead of ``--me`` (when jobs are submitted as another user)."""
    command_timeout_s: float = Field(60.0, gt=0, validation_alias=renamed("command_timeout_s", "command_timeout"))


@dataclass(slots=True)
class _Watch:
    """What :meth:`SlurmBackend.poll_changes` keeps between calls: the tracked jobs, by Slurm id."""

    squeue: sp.SqueueSnapshot = sp.EMPTY_SQUEUE
    """The previous call's squeue (its own: a plain ``poll`` in between must not hide a change)."""
    jobs: dict[str, JobHandle] = field(default_factory=dict)
    missing: dict[str, JobHandle] = field(default_factory=dict)
    """Tracked jobs squeue no longer lists: sacct is asked about them at every call, as ``poll`` does."""


class SlurmBackend:
    name = "slurm"

    @classmethod
    def create(cls, config: SlurmConfig, context: BackendContext) -> SlurmBackend:
        """What the submitter builds (``backends.BACKENDS``): the settings section is all it needs."""
        return cls(config)

    def __init__(self, settings: SlurmConfig | None = None) -> None:
        self.settings = settings or SlurmConfig()
        self._pool_flags: list[str] = []
        self._use_sacct = bool(self.settings.use_sacct)
        self._sacct_broken = False
        self._last_squeue = sp.EMPTY_SQUEUE
        """The last poll's squeue lines: unchanged lines are not parsed again and keep their Observation."""
        self._watch = _Watch()
        self.calls = 0

    def configure(self, build_config: pb.BuildConfig) -> None:
        slurm = build_config.slurm or pb.SlurmOptions()
        sp.check_flags(slurm.sbatch_flags, source="pool sbatch")
        self._pool_flags = list(slurm.sbatch_flags)
        if self.settings.use_sacct is None:
            self._use_sacct = slurm.use_sacct

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def output_path(self, job_dir: Path) -> Path:
        return job_dir / layout.JOB_STDOUT

    async def _run(self, argv: list[str], *, env: dict[str, str] | None = None) -> str:
        self.calls += 1
        try:
            done = await run_command(argv, time_limit=self.settings.command_timeout_s, env=env)
        except CommandFailed as exc:
            if exc.returncode is None or sp.is_transient(exc.stderr):
                raise BackendUnavailable(str(exc)) from exc
            raise
        return done.stdout

    async def submit(self, spec: JobSpec) -> str:
        try:
            argv = sp.sbatch_argv(
                self.settings.sbatch,
                uid=spec.uid,
                job_dir=str(spec.job_dir),
                script=str(spec.script),
                pool_flags=self._pool_flags,
                pod_flags=spec.backend_flags,
                resources=spec.resources,
            )
        except sp.FlagError as exc:
            raise SubmitRejected(str(exc)) from exc
        env = environ_with({layout.JOB_DIR_ENV: str(spec.job_dir)})
        try:
            out = await self._run(argv, env=env)
        except CommandFailed as exc:
            raise SubmitRejected(exc.stderr or str(exc)) from exc
        try:
            return sp.parse_sbatch_id(out)
        except ValueError as exc:
            raise BackendUnavailable(str(exc)) from exc

    def _squeue_argv(self) -> list[str]:
        who = [] if self.settings.squeue_all_users else ["--me"]
        return [self.settings.squeue, "-h", *who, "--states=all", "-O", sp.SQUEUE_FORMAT]

    async def _squeue(self) -> dict[str, sp.SlurmJob]:
        return sp.parse_squeue(await self._run(self._squeue_argv()))

    async def _sacct(self, job_ids: Sequence[str]) -> dict[str, sp.SlurmJob]:
        if not job_ids or not self._use_sacct or self._sacct_broken:
            return {}
        argv = [self.settings.sacct, "-X", "-n", "-P", "-o", sp.SACCT_FIELDS, "-j", ",".join(job_ids)]
        try:
            return sp.parse_sacct(await self._run(argv))
        except CommandFailed as exc:
            if "accounting storage" in exc.stderr.lower() or "slurmdbd" in exc.stderr.lower():
                log.warning("sacct is not usable on this site (%s); relying on job files", exc.stderr)
                self._sacct_broken = True
                return {}
            raise BackendUnavailable(str(exc)) from exc

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[str, Observation]:
        if not jobs:
            return {}
        try:
            text = await self._run(self._squeue_argv())
        except CommandFailed as exc:
            raise BackendUnavailable(str(exc)) from exc
        self._last_squeue = sp.parse_squeue_since(text, self._last_squeue)
        out: dict[str, Observation] = {}
        missing: dict[str, JobHandle] = {}
        seen = self._last_squeue.by_id.get
        for j in jobs:  # one lean pass: this runs for every tracked job at every poll
            if j.job_id:
                job = seen(j.job_id)
                if job is None:
                    missing[j.job_id] = j
                else:
                    out[j.uid] = job.observation
        if missing:
            for i, job in (await self._sacct(list(missing))).items():
                if i in missing:
                    out[missing[i].uid] = job.observation
        return out

    async def poll_changes(
        self, added: Sequence[JobHandle], removed: Sequence[JobHandle], *, restart: bool
    ) -> dict[str, Observation]:
        """``ReportsChanges``: one squeue, and work for the jobs whose line changed, not for every job.

        The jobs answered are those whose squeue line changed, appeared or left, the added ones,
        and the ones squeue no longer lists (sacct's answer, or GONE, at every call as ``poll`` gives).
        """
        if restart:
            self._watch = _Watch()
        watch = self._watch
        try:
            text = await self._run(self._squeue_argv())
        except CommandFailed as exc:
            raise BackendUnavailable(str(exc)) from exc
        squeue, changed = sp.squeue_changes(text, watch.squeue)
        out: dict[str, Observation] = {}
        for job in removed:
            if job.job_id and watch.jobs.get(job.job_id) == job:
                del watch.jobs[job.job_id]
                watch.missing.pop(job.job_id, None)
        for job in added:
            if job.job_id:
                watch.jobs[job.job_id] = job
                changed.add(job.job_id)
            else:
                out[job.uid] = GONE  # never submitted as far as we know: nothing to ask Slurm
        listed = squeue.by_id.get
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
            answers = await self._sacct(list(watch.missing))
            for job_id, job in watch.missing.items():
                answer = answers.get(job_id)
                out[job.uid] = GONE if answer is None else answer.observation
        watch.squeue = squeue
        return out

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]:
        out = {j.uid: Reconciled(j.job_id) for j in jobs if j.job_id}
        unknown = [j for j in jobs if not j.job_id]
        if not unknown:
            return out
        names = sp.names_to_ids(await self._squeue())
        if self._use_sacct and not self._sacct_broken:
            argv = [
                self.settings.sacct,
                "-X",
                "-n",
                "-P",
                "-o",
                sp.SACCT_FIELDS,
                "--name",
                ",".join(j.uid for j in unknown),
                "-S",
                "now-7days",
            ]
            try:
                names = {**sp.names_to_ids(sp.parse_sacct(await self._run(argv))), **names}
            except (CommandFailed, BackendUnavailable) as exc:
                log.warning("sacct lookup failed during reconcile: %s", exc)
        for job in unknown:
            if job.uid in names:
                out[job.uid] = Reconciled(names[job.uid])
            elif await asyncio.to_thread(_ran, job.job_dir):
                out[job.uid] = Reconciled("")  # it ran (output exists) but Slurm forgot it
            else:
                out[job.uid] = Reconciled(None)
        return out

    async def cancel(self, job: JobHandle) -> None:
        if job.job_id:
            argv = [self.settings.scancel, job.job_id]
        else:
            argv = [self.settings.scancel, "--me", f"--name={job.uid}"]
        try:
            await self._run(argv)
        except CommandFailed as exc:
            if "invalid job id" in exc.stderr.lower() or "already completing" in exc.stderr.lower():
                return
            raise BackendUnavailable(str(exc)) from exc

    async def capacity(self) -> Capacity:
        argv = [self.settings.sinfo, "-h", "-N", "-o", sp.SINFO_FORMAT]
        if self.settings.partition:
            argv += ["-p", self.settings.partition]
        try:
            return sp.parse_sinfo(await self._run(argv))
        except CommandFailed as exc:
            raise BackendUnavailable(str(exc)) from exc


def _ran(job_dir: Path) -> bool:
    """Evidence that a job started: Slurm created its output file, or a container wrote a file."""
    if (job_dir / layout.JOB_STDOUT).exists():
        return True
    cdir = job_dir / layout.CONTAINERS_DIR
    return cdir.is_dir() and any(cdir.iterdir())
