"""The one small interface every backend implements, and the value types crossing it.

Backends own only the conversation with the batch system (spawn/sbatch, poll, cancel,
capacity). They never touch SQLite, NATS, protobuf statuses or job phases: the lifecycle core
(``submitters.core.lifecycle``) decides, the runtime executes, and the backend reports what it
observed as plain data (:class:`Observation`). A backend's settings are its own config model (e.g.
``SlurmConfig``, the ``slurm:`` section); a backend does not import ``submitters.settings``.

Adding a backend (see docs/submitters.md, "Adding a backend"): register it in ``backends.BACKENDS``,
implement :class:`Backend` and its ``create(config, context)``,
raise only :class:`BackendError` subclasses, name jobs so ``reconcile`` can find a submission
whose id was never recorded, and answer ``poll`` with one batch call. ``submitters.testing.FakeBackend``
is the reference implementation the lifecycle tests run against. A backend is done when it passes the
conformance kit, ``pytest tests/conformance -k <name>``: these promises, and those of each optional protocol
below it declares.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import Clock
from interlink_nats.kernel.layout import LayoutEntry


class BackendState(enum.Enum):
    """What the batch system says about one job, normalised across backends."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    DEADLINE = "deadline"
    OUT_OF_MEMORY = "out_of_memory"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    GONE = "gone"
    """The backend no longer knows the job (purged, or the process vanished)."""

    @property
    def terminal(self) -> bool:
        return self not in (BackendState.QUEUED, BackendState.RUNNING)


@dataclass(frozen=True, slots=True)
class Accounted:
    """What the batch system itself records of a job's allocation (Slurm's TRES): the usage of an ended job is
    this times its run time, where the backend has it; else the pod's request is (``core.usage``)."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    elapsed_s: float | None = None
    """The run time the batch system counted (sacct's ElapsedRaw); None: from ``started_at`` to ``finished_at``."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One job as the backend saw it during one poll."""

    state: BackendState
    exit_code: int | None = None
    """The job's own exit code, when the backend knows it."""
    signal: int | None = None
    """Signal that ended the job, when the backend knows it."""
    reason: str = ""
    """The backend's own words (e.g. Slurm's pending reason ``Resources``)."""
    raw_state: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    accounted: Accounted | None = None
    """The batch system's record of what it allocated (None: it keeps none, or did not say)."""
    gang_stopped: bool = False
    """A pod-group member the gang's launcher stopped because another member failed (``FAIL_GANG``): its
    status names that, not a bare SIGTERM (``reason`` says which member)."""


GONE = Observation(BackendState.GONE)


@dataclass(frozen=True, slots=True)
class JobHandle:
    """What a backend needs to find a job again: identity, directory and its own id."""

    uid: str
    job_dir: Path
    job_id: str = ""
    """Backend id; empty when the submission never reported one (crash mid-submit)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job ready to hand to the backend: the script already sits in ``job_dir``."""

    uid: str
    job_dir: Path
    script: Path
    resources: pb.ResourceRequest | None = None
    backend_flags: tuple[str, ...] = ()
    namespace: str = ""
    name: str = ""
    run_as_user: int | None = None
    """``securityContext.runAsUser`` as the pod asked (a request: the site's policy decides)."""
    run_as_group: int | None = None
    storage: tuple[pb.StorageMount, ...] = ()
    """The site directories the job mounts (checked with the site's policy at the RPC)."""
    layout: tuple[LayoutEntry, ...] = ()
    """For a backend that :class:`MakesLayout`: the job's layout (``JobScript.layout``, validated), which the
    submitter did not make; its runner makes it before the script starts. Empty for every other backend."""
    layout_marker: bool = False
    """With ``layout``: the script tests ``layout.PREPARED_FILE``, made last (``layout.tests_marker``)."""

    @property
    def handle(self) -> JobHandle:
        return JobHandle(self.uid, self.job_dir)


@dataclass(frozen=True, slots=True)
class GangSpec:
    """A pod group ready to hand to the backend as ONE job (``SubmitGroup``): every member's script already
    sits in its own job directory, as a single pod's does; ``job_dir`` (``<state>/gangs/<uid>``) is the
    gang's own directory for what the backend writes for the whole group (its launcher, the job's output)."""

    uid: str
    """The gang's ``group_uid``: the backend names its job by it, so ``find_gang`` finds it after a crash."""
    name: str
    job_dir: Path
    members: tuple[JobSpec, ...]
    """In rank order (rank = index)."""
    failure_policy: pb.GangFailurePolicy = pb.GangFailurePolicy.FAIL_GANG
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The pods of one Kubernetes Job as ONE array submission (``SubmitGroup`` with kind ``GROUP_KIND_ARRAY``):
    every member's script already sits in its own job directory, as a single pod's does; task *i* runs
    ``members[i]``. Unlike a gang, each task starts, ends and is cancelled alone."""

    array_uid: str
    """The array's ``array_uid``: stable, so the backend names its submission by it and ``find_array`` finds it
    after a crash."""
    members: tuple[JobSpec, ...]
    """Task i runs ``members[i]`` (i = 0..n-1, the order the gateway sent)."""
    job_dir: Path
    """The array's own directory (``<state>/arrays/<uid>``): its task table or launcher, if the backend needs one."""
    throttle: int = 0
    """At most this many tasks run at once (Slurm's ``--array=…%N``, a site setting); 0: no limit."""
    name: str = ""
    """The Job's name, for the batch system's job name next to the uid."""
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the backend can run in total (not what is free: Kueue does the accounting)."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    nodes: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)

    def quantities(self) -> dict[str, str]:
        """Kubernetes quantities, as the ResourceReport carries them."""
        out: dict[str, str] = {}
        if self.cpu_millis:
            out["cpu"] = str(self.cpu_millis // 1000) if self.cpu_millis % 1000 == 0 else f"{self.cpu_millis}m"
        if self.memory_bytes:
            out["memory"] = f"{self.memory_bytes // 2**20}Mi"  # rounded down: capacity is a cap
        if self.gpus:
            out["nvidia.com/gpu"] = str(self.gpus)
        out.update(self.extra)
        return out


@dataclass(frozen=True, slots=True)
class BatchCommand:
    """A program a backend runs on the submitter's host, as configured, and the setting that names it.

    Each backend declares its own (:meth:`Backend.commands`): the submitter refuses to start while one is
    missing, and /healthz and Submit fail while one is, naming the program and the setting that fixes it.
    """

    program: str
    """As configured: a name looked up on PATH, or a path."""
    setting: str
    """The config key that sets its path (``slurm.sbatch``); empty when only PATH can provide it."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """Outcome of looking for a job whose submission may or may not have reached the backend."""

    job_id: str | None
    """The backend id when found (or ``""`` when it evidently ran but its id is unknown); None: never submitted."""


class BackendError(Exception):
    """Base of every error a backend raises; nothing else may escape a backend.

    * BackendError
      + CommandFailed      a batch command exited non-zero (carries argv, code and stderr)
      + BackendUnavailable the batch system cannot be reached now; retrying later may work
      + SubmitRejected     the batch system refused this job; retrying will not help
      + JobAlreadyEnded    a cancel found the job over already (caught inside the backend: cancel is idempotent)
      + CommandUnusable    the site does not offer this command (caught inside the backend, which stops asking)

    Which of these a failed command is, is decided by the backend's parser module
    (``slurm_parse.classify_failure``, ``htcondor_parse.classify_failure``) from its exit and stderr.
    """


class CommandFailed(BackendError):
    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        what = "timed out" if returncode is None else f"exited with {returncode}"
        super().__init__(f"{Path(self.argv[0]).name} {what}: {self.stderr or '(no stderr)'}")


class BackendUnavailable(BackendError):
    """Transient: the caller keeps the submission intent and retries."""


class SubmitRejected(BackendError):
    """Permanent: the job is recorded as failed with this message."""


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What a backend may need of the submitter besides its own settings section (``create``'s second argument)."""

    pool: str
    state_dir: Path
    """The pool's state directory (job directories, the registry; the HTCondor token lives under it)."""
    kill_grace_s: float
    """Between SIGTERM and SIGKILL when a job is cancelled."""
    clock: Clock


class JobAlreadyEnded(BackendError):
    """A cancel named a job the batch system says is over: nothing is left to stop."""


class CommandUnusable(BackendError):
    """The site does not offer this command (e.g. ``sacct`` without accounting storage): stop asking it."""


FailureRules = Sequence[tuple[re.Pattern[str], type[BackendError]]]
"""A command's own failures, first match wins: stderr pattern → the error it is."""


def classify_failure(
    returncode: int | None, stderr: str, *, transient: re.Pattern[str], rules: FailureRules
) -> type[BackendError]:
    """Which error a failed batch command is (``returncode`` None: it timed out). A timeout or a
    ``transient`` stderr means "retry later" whichever command printed it; then the command's own
    ``rules``; anything else is unavailable too: only a rule can make a failure permanent."""
    if returncode is None or transient.search(stderr):
        return BackendUnavailable
    for pattern, kind in rules:
        if pattern.search(stderr):
            return kind
    return BackendUnavailable


def error_for(kind: type[BackendError], failed: CommandFailed) -> BackendError:
    """The error a classified command failure raises. A refusal carries only the batch system's words:
    it becomes the pod's status message."""
    if kind is SubmitRejected:
        return SubmitRejected(failed.stderr or str(failed))
    return kind(str(failed))


@runtime_checkable
class Backend(Protocol):
    """The seam between the submitter runtime and a batch system.

    ``poll`` is called once per interval with *every* tracked job so that a backend can
    answer with one batch call (one ``squeue``), never one call per job.
    """

    name: str
    calls: int
    """Batch-system calls made so far (subprocesses); the poll benchmark reads it."""

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Stop background work; running jobs are left alone (they outlive the submitter)."""

    def configure(self, build_config: pb.BuildConfig) -> None:
        """Take the pool's current BuildConfig (pool-wide flags, concurrency)."""

    async def submit(self, spec: JobSpec) -> str:
        """Hand a job to the batch system; returns its backend id."""

    async def reconcile(self, jobs: Sequence[JobHandle]) -> dict[str, Reconciled]:
        """After a restart: find jobs whose submission may have reached the backend."""

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[str, Observation]:
        """Observe many jobs at once; a job missing from the result is GONE."""

    async def cancel(self, job: JobHandle) -> None:
        """Stop a job; idempotent, and quiet when it already ended."""

    async def capacity(self) -> Capacity: ...

    def commands(self) -> Sequence[BatchCommand]:
        """The programs this backend runs on this host with its current settings and BuildConfig (not those a
        job runs on a compute node): checked at start and while serving (``backends.commands``)."""

    def output_path(self, job_dir: Path) -> Path:
        """Where the batch system writes the job's own stdout/stderr."""


@runtime_checkable
class AnswersQueries(Protocol):
    """A backend whose read-only batch commands ``submitter check`` runs once each (optional; without it the
    check asks ``capacity``): a command on PATH may still not answer (no slurmctld, no slurmdbd for sacct)."""

    def queries(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """Each read-only command, by name, as a call that runs it once (never submits or cancels)."""


@runtime_checkable
class RunsGangs(Protocol):
    """A backend that can start a pod group as one job. Optional (the submitter checks with
    ``isinstance``): ``SubmitGroup`` on a backend without it is refused, naming the backend.

    The gang's one job runs a launcher that starts each member's script (``bash <member dir>/job.sh`` with
    ``INTERLINK_JOB_DIR`` set, as a single job runs) with ``layout.GROUP_ENV`` exported, all members at once, and
    applies ``failure_policy``. Every member's job id is the gang's: polls and cancels name that one job.
    """

    async def submit_gang(self, gang: GangSpec) -> str:
        """Hand the gang to the batch system as one job named by ``gang.uid``; returns its id."""

    async def find_gang(self, gang: GangSpec) -> Reconciled:
        """After a crash mid-submit: the gang's job when a submission reached the batch system (found by its
        name), ``Reconciled(None)`` when none did."""


@runtime_checkable
class RunsArrays(Protocol):
    """A backend that takes many independent pods as ONE submission (a Slurm job array, an HTCondor cluster).
    Optional (the submitter checks with ``isinstance``, and announces it in the BuildConfig's ``runs_arrays``):
    a backend without it gets each member of an array as a single submit, from the submitter.

    Each member is then tracked, polled, logged and cancelled as an ordinary :class:`JobHandle` carrying its own
    member job id: ``poll`` and ``cancel`` understand those ids (Slurm: ``squeue`` lists pending tasks as a range
    ``<id>_[3-19]``, expanded; ``scancel <id>_<i>`` cancels one task).
    """

    async def submit_array(self, array: ArraySpec) -> tuple[str, tuple[str, ...]]:
        """One batch submission for every member, named by ``array.array_uid``: returns the array's job id and
        each member's own job id in member order (Slurm ``<id>_<i>``, HTCondor ``<cluster>.<proc>``)."""

    async def find_array(self, array: ArraySpec) -> Reconciled:
        """After a crash mid-submit: the array's job id when a submission reached the batch system (found by
        its ``array_uid`` in the job's name or attributes), ``Reconciled(None)`` when none did. The members'
        ids follow from it as :meth:`member_job_ids` says."""

    def member_job_ids(self, array: ArraySpec, array_job_id: str) -> tuple[str, ...]:
        """Each member's own job id, in member order, given the array's job id (what ``submit_array`` returns
        with it): recovery rebuilds the members' ids from what ``find_array`` found."""


@runtime_checkable
class ReportsChanges(Protocol):
    """A backend that can say which jobs changed, so a poll of 10,000 quiet jobs costs what changed.

    Optional (the poller checks with ``isinstance``): a backend without it is polled with
    :meth:`Backend.poll` and every job's observation is compared at every poll.
    """

    async def poll_changes(
        self, added: Sequence[JobHandle], removed: Sequence[JobHandle], *, restart: bool
    ) -> dict[str, Observation]:
        """Observe the tracked jobs in one batch; answer only for jobs whose observation may have changed.

        The caller keeps the backend's view of the tracked jobs in step: ``added`` are the jobs
        tracked since the previous call, ``removed`` those no longer tracked. Every added job is
        answered, GONE included. A job left out of the answer is as the previous answer said (saying
        too much is allowed, too little is not). With ``restart`` the backend forgets what it knew
        and ``added`` is every tracked job: the answer is complete, as :meth:`Backend.poll`'s. The
        caller restarts after any call that raised, or whose answer it could not finish mapping.
        """


@runtime_checkable
class MakesLayout(Protocol):
    """A backend whose per-job runner makes the job's layout and removes it when the job ended (the shell backend).

    Optional (the submitter checks with ``isinstance`` and the flag): the submitter then writes only the job
    directory, ``containers/`` and ``job.sh``, and hands the layout over in ``JobSpec.layout``; the runner makes it
    before the script starts (the script finds it and forks nothing), as the job's account where the site switches
    accounts, and removes ``layout.ENDED_JOB_LAYOUT`` once the script ended and before the job's end can be
    observed. The submitter still removes what it finds left when it sees the job end (a runner that could not:
    its launcher gone, a restart), at the cost of one ``lstat`` a name otherwise.
    """

    makes_layout: bool


@runtime_checkable
class ReadsScriptOptions(Protocol):
    """A backend whose batch system also reads options from the job script itself (sbatch's ``#SBATCH`` lines).

    Optional (the submitter checks with ``isinstance``): each job's script is checked at the door, on the text the
    request carries and before anything is written, so no option reaches the batch system unchecked by way of the
    script, and the submission reads nothing back from disk (the gateway's scripts carry none; any NATS client may
    send one)."""

    def check_script(self, script: str, *, field: str) -> None:
        """Raise ValueError naming ``field`` and the first line the batch system would read as options."""


@runtime_checkable
class ReportsFree(Protocol):
    """A backend that can say what the site has free now, for the ResourceReport's ``free``.

    Optional (the announcer checks with ``isinstance``): without it the report leaves ``free`` empty
    and the controller treats the pool's whole capacity as available (``capacity: Total``).
    """

    async def free(self) -> Capacity | None:
        """Capacity that could start a job now, in one batch call (free, not total: others' jobs count);
        None when this site cannot tell."""
