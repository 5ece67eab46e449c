"""The Slurm backend's incremental poll (``ReportsChanges``) against its full one, with stand-in commands.

No Slurm needed: ``squeue`` and ``sacct`` are scripts printing files the test writes. The property
checked at every step: what the answers said so far, job by job, is what a full ``poll`` says now.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import GONE, JobHandle, Observation, ReportsChanges


def stand_in(path: Path, table: Path) -> str:
    path.write_text(f'#!/bin/sh\ncat "{table}"\n')
    path.chmod(0o755)
    return str(path)


def line(job_id: str, uid: str, state: str) -> str:
    return f"{job_id}|{uid}|{state}|None|0|2026-11-25T23:53:00|N/A"


class Scene:
    def __init__(self, tmp_path: Path) -> None:
        self.squeue = tmp_path / "squeue.txt"
        self.sacct = tmp_path / "sacct.txt"
        self.sacct.write_text("")
        config = SlurmConfig(
            squeue=stand_in(tmp_path / "squeue", self.squeue),
            sacct=stand_in(tmp_path / "sacct", self.sacct),
            use_sacct=True,
        )
        self.backend = SlurmBackend(config)
        self.tracked: dict[str, JobHandle] = {}
        self.known: dict[str, Observation] = {}
        """What the incremental answers said so far."""

    def handle(self, uid: str, job_id: str) -> JobHandle:
        return JobHandle(uid, self.squeue.parent, job_id)

    async def step(
        self, added: Sequence[JobHandle] = (), removed: Sequence[JobHandle] = (), *, restart: bool = False
    ) -> dict[str, Observation]:
        for job in removed:
            del self.tracked[job.uid]
            self.known.pop(job.uid, None)
        if restart:
            self.tracked = {}
        for job in added:
            self.tracked[job.uid] = job
        answer = await self.backend.poll_changes(added, removed, restart=restart)
        assert {j.uid for j in added} <= answer.keys(), "every added job is answered"
        if restart:
            self.known = {}
        self.known.update({uid: obs for uid, obs in answer.items() if uid in self.tracked})
        full = await self.backend.poll(list(self.tracked.values()))
        assert self.known == {uid: full.get(uid, GONE) for uid in self.tracked}
        return answer


async def test_the_incremental_answers_add_up_to_the_full_poll(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    assert isinstance(scene.backend, ReportsChanges)
    a, b, c = scene.handle("uid-a", "1"), scene.handle("uid-b", "2"), scene.handle("uid-c", "3")
    never = scene.handle("uid-never", "")
    scene.squeue.write_text("\n".join([line("1", "uid-a", "RUNNING"), line("2", "uid-b", "PENDING")]) + "\n")
    scene.sacct.write_text("3|uid-c|COMPLETED|0:0|2026-11-25T23:53:00|2026-11-25T23:53:02\n")
    first = await scene.step([a, b, c, never], restart=True)
    assert first["uid-never"] is GONE and first["uid-c"].exit_code == 0

    quiet = await scene.step()
    assert quiet.keys() == {"uid-c"}, "only the job squeue no longer lists is asked about again (sacct)"

    scene.squeue.write_text("\n".join([line("1", "uid-a", "COMPLETING"), line("2", "uid-b", "PENDING")]) + "\n")
    assert (await scene.step()).keys() == {"uid-a", "uid-c"}

    # b leaves squeue (sacct does not know it: GONE); a job of someone else appears; d is added.
    d = scene.handle("uid-d", "4")
    scene.squeue.write_text(
        "\n".join([line("1", "uid-a", "COMPLETING"), line("4", "uid-d", "RUNNING"), line("77", "x", "RUNNING")]) + "\n"
    )
    answer = await scene.step([d])
    assert answer["uid-b"] is GONE and answer.keys() == {"uid-b", "uid-c", "uid-d"}

    # Removed jobs are no longer answered, even when their line changes; a re-tracked one is, at once.
    scene.squeue.write_text("\n".join([line("1", "uid-a", "COMPLETED"), line("4", "uid-d", "RUNNING")]) + "\n")
    assert (await scene.step(removed=[a, b, c])).keys() == set()
    assert (await scene.step([a])).keys() == {"uid-a"}

    # A restart forgets everything: every tracked job is added again and answered.
    assert (await scene.step(list(scene.tracked.values()), restart=True)).keys() == {"uid-a", "uid-d", "uid-never"}
    assert (await scene.step()).keys() == set()
