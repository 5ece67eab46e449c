"""The backends the kit runs against, one ``site`` fixture parameter each: FakeBackend, shell, real Slurm and the
HTCondor stand-ins (plain schedd and HTCondor-CE mode).

A registered backend is built the way the submitter builds it: its settings section validated by its own config
model and ``create(config, context)`` (``backends.create_backend``), so the kit tests what a site runs. The kit's
sites are checked against ``BACKENDS`` (test_registry.py): a new backend without a site here fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from accounts import account as account  # the throw-away account and reachable directory of the account tests
from accounts import reachable_dir as reachable_dir
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.clock import SYSTEM_CLOCK
from interlink_nats.submitters.backends import BACKENDS, create_backend
from interlink_nats.submitters.core.backend import (
    ArraySpec,
    Backend,
    BackendContext,
    BackendState,
    GangSpec,
    JobHandle,
    JobSpec,
    Observation,
)
from interlink_nats.submitters.jobdirs.files import gang_dir_for, job_dir_for, prepare_job_dir
from interlink_nats.submitters.testing import FakeBackend, wait_for
from pydantic import ValidationError

WAIT_S = 120.0
"""Generous: the machine is shared and loaded; a wait ends as soon as its condition holds."""

OUTPUT_MARK = "conformance-kit-output"


class RunningFake(FakeBackend):
    """FakeBackend as a batch system that runs what it is given: the script of a job (every member's, for a group)
    is run with ``bash``, its stdout in ``output_path``; the job is RUNNING while it runs and ends COMPLETED or
    FAILED with its exit code. FakeBackend itself runs nothing (the lifecycle tests move its jobs by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[str, asyncio.Task[None]] = {}

    async def submit(self, spec: JobSpec) -> str:
        job_id = await super().submit(spec)
        self._start(spec.uid, spec.job_dir, [spec.script])
        return job_id

    async def submit_gang(self, gang: GangSpec) -> str:
        job_id = await super().submit_gang(gang)
        self._start(gang.uid, gang.job_dir, [m.script for m in gang.members])
        return job_id

    def _start(self, uid: str, job_dir: Path, scripts: list[Path]) -> None:
        self._runs[uid] = asyncio.create_task(self._run(uid, job_dir, scripts))

    async def _run(self, uid: str, job_dir: Path, scripts: list[Path]) -> None:
        self.start_running(uid)
        with self.output_path(job_dir).open("ab") as out:
            procs = [await asyncio.create_subprocess_exec("bash", str(s), stdout=out, stderr=out) for s in scripts]
        try:
            codes = [await p.wait() for p in procs]
        finally:
            for p in procs:
                if p.returncode is None:
                    p.kill()
                    await p.wait()
        code = next((c for c in codes if c), 0)
        self.finish(uid, BackendState.COMPLETED if code == 0 else BackendState.FAILED, code)

    async def cancel(self, job: JobHandle) -> None:
        await super().cancel(job)
        run = self._runs.get(job.uid)
        if run is not None:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    async def stop_everything(self) -> None:
        for run in self._runs.values():
            run.cancel()
        await asyncio.gather(*self._runs.values(), return_exceptions=True)


@dataclass
class Job:
    """A kit job: it says when it started, then waits for :meth:`go`, runs ``then`` (``{dir}``: its directory),
    prints the mark and exits with its code."""

    handle: JobHandle

    @property
    def dir(self) -> Path:
        return self.handle.job_dir

    def go(self) -> None:
        (self.dir / "go").touch()

    def started(self) -> bool:
        return (self.dir / "started").exists()


def waiting_script(job_dir: Path, code: int, then: str = "") -> str:
    d = shlex.quote(str(job_dir))
    return (
        "#!/bin/bash\n"
        f"echo up > {d}/started\n"
        f"until [ -e {d}/go ]; do sleep 0.1; done\n"
        f"{then.format(dir=d)}\n"
        f"echo {OUTPUT_MARK}\n"
        f"exit {code}\n"
    )


@dataclass
class Site:
    """One backend under test: builds its instances (a new one on the same batch system, as after a crash), makes
    the kit's jobs, and leaves nothing running behind."""

    name: str
    root: Path
    settings: dict[str, Any] = field(default_factory=dict)
    fake: RunningFake | None = None
    opened: list[Backend] = field(default_factory=list)
    handles: list[JobHandle] = field(default_factory=list)

    def context(self) -> BackendContext:
        return BackendContext(pool="kit", state_dir=self.root, kill_grace_s=2.0, clock=SYSTEM_CLOCK)

    async def open(self, **settings: Any) -> Backend:
        """A started instance (FakeBackend: the same one, since it is the batch system too); ``settings`` adds to
        the section (a config model's refusal raises its ValidationError)."""
        if self.fake is not None:
            backend: Backend = self.fake
        else:
            config = BACKENDS[self.name].config_model().model_validate({**self.settings, **settings})
            backend = create_backend(self.name, config, self.context())
        backend.configure(pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
        await backend.start()
        self.opened.append(backend)
        return backend

    async def crash(self, backend: Backend) -> None:
        """What a submitter's end leaves: the instance gone, its jobs running on (``close`` leaves them alone)."""
        if backend is not self.fake:
            await backend.close()
            self.opened.remove(backend)

    def refuses_account_switching(self, policy: dict[str, Any]) -> str | None:
        """Why this backend declares it does not switch accounts (its config model refuses a table that
        switches), or None when it switches them."""
        if self.fake is not None:
            return "FakeBackend runs no process of its own: there is no account to switch"
        try:
            BACKENDS[self.name].config_model().model_validate({**self.settings, "accounting": policy})
        except ValidationError as exc:
            return "; ".join(error["msg"] for error in exc.errors())
        return None

    def spec(self, code: int = 0, *, root: Path | None = None, then: str = "") -> JobSpec:
        uid = str(uuid.uuid4())
        job_dir = job_dir_for(root or self.root, uid)
        script = prepare_job_dir(job_dir, waiting_script(job_dir, code, then))
        return JobSpec(uid, job_dir, script, namespace="kit", name=f"kit-{uid[:8]}")

    async def submit(self, backend: Backend, spec: JobSpec) -> Job:
        job_id = await backend.submit(spec)
        assert job_id, f"{self.name}: submit returned no job id"
        handle = JobHandle(spec.uid, spec.job_dir, job_id)
        self.handles.append(handle)
        return Job(handle)

    def gang(self, size: int) -> GangSpec:
        group = str(uuid.uuid4())
        members = []
        for rank in range(size):
            uid = str(uuid.uuid4())
            job_dir = job_dir_for(self.root, uid)
            script = prepare_job_dir(job_dir, f"#!/bin/bash\necho {rank} > {shlex.quote(str(job_dir))}/ran\n")
            resources = pb.ResourceRequest(cpu_millis=1000, memory_bytes=64 * 2**20)
            members.append(JobSpec(uid, job_dir, script, resources, namespace="kit", name=f"member-{rank}"))
        gang_dir = gang_dir_for(self.root, group)
        gang_dir.mkdir(mode=0o700, parents=True)
        return GangSpec(group, "kit-group", gang_dir, tuple(members), pb.GangFailurePolicy.FAIL_GANG, "kit")

    def array(self, codes: list[int]) -> ArraySpec:
        """An array whose member i runs the kit's waiting script (it waits for ``go``) and exits with ``codes[i]``."""
        members = []
        for code in codes:
            uid = str(uuid.uuid4())
            job_dir = job_dir_for(self.root, uid)
            script = prepare_job_dir(job_dir, waiting_script(job_dir, code))
            members.append(JobSpec(uid, job_dir, script, namespace="kit", name=f"kit-{uid[:8]}"))
        array_uid = str(uuid.uuid4())
        return ArraySpec(array_uid, tuple(members), self.root / "arrays" / array_uid, name="kit-array", namespace="kit")

    async def close(self) -> None:
        if self.opened:
            backend = self.opened[0]
            for handle in self.handles:  # nothing of the kit runs on
                with contextlib.suppress(Exception):
                    await backend.cancel(handle)
        for backend in self.opened:
            await backend.close()
        if self.fake is not None:
            await self.fake.stop_everything()


async def observe(backend: Backend, job: JobHandle) -> Observation | None:
    return (await backend.poll([job])).get(job.uid)


async def until_running(backend: Backend, job: Job) -> Observation:
    """The job's script has started and ``poll`` says RUNNING (it waits for :meth:`Job.go`, so it stays so)."""

    async def running() -> Observation | None:
        if not job.started():
            return None
        seen = await observe(backend, job.handle)
        return seen if seen is not None and seen.state is BackendState.RUNNING else None

    return await wait_for(running, timeout=WAIT_S, interval=0.2, what=f"job {job.handle.job_id} to run")


async def until_ended(backend: Backend, handle: JobHandle) -> Observation:
    async def ended() -> Observation | None:
        seen = await observe(backend, handle)
        return seen if seen is not None and seen.state.terminal else None

    return await wait_for(ended, timeout=WAIT_S, interval=0.2, what=f"job {handle.job_id} to end")


# The sites ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kit_slurm() -> Iterator[object]:
    """One real Slurm (slurmctld + slurmd + munge) for every Slurm scenario of the kit, gone with the module (the
    other Slurm test modules start their own)."""
    from slurm_cluster import slurm_for_tests

    with slurm_for_tests() as cluster:
        yield cluster


SITES = (
    pytest.param("fake", id="fake"),
    pytest.param("shell", id="shell"),
    pytest.param("slurm", id="slurm", marks=pytest.mark.slurm),
    pytest.param("htcondor", id="htcondor", marks=pytest.mark.htcondor),
    pytest.param("htcondor-ce", id="htcondor-ce", marks=pytest.mark.htcondor),
)
"""Every backend the kit runs against; test_registry.py checks each registered backend has one."""

CE = {"mode": "remote", "collector": "ce.example:9619", "schedd": "ce.example"}


@pytest.fixture(params=SITES)
async def site(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Site]:
    kind: str = request.param
    root = tmp_path / "state"
    root.mkdir()
    standin: Iterator[object] | None = None
    if kind == "fake":
        built = Site("fake", root, fake=RunningFake())
    elif kind == "shell":
        built = Site("shell", root)
    elif kind == "slurm":
        request.getfixturevalue("kit_slurm")
        built = Site("slurm", root)
    else:
        from htcondor_harness import start_condor

        standin = start_condor(tmp_path, monkeypatch, ce=kind == "htcondor-ce")
        next(standin)
        built = Site("htcondor", root, settings=dict(CE) if kind == "htcondor-ce" else {})
    try:
        yield built
    finally:
        await built.close()
        if standin is not None:
            next(standin, None)


def declared(site: Site, backend: Backend, capability: type, name: str) -> None:
    """Skip a scenario for a capability the backend does not declare, saying so (never for one it declares)."""
    if not isinstance(backend, capability):
        pytest.skip(f"{site.name} does not declare {name}")


def layout_output(backend: Backend, job_dir: Path) -> Path:
    """Where the backend says the job's stdout goes; inside the job directory (the submitter reads it there)."""
    path = backend.output_path(job_dir)
    assert job_dir in path.parents or path.parent == job_dir, path
    assert path.name and path.name != layout.SCRIPT_NAME
    return path
