"""A shell pool's job layout is made by the job's runner and removed before the job's end can be seen.

Real processes: a ``ShellBackend`` with its launcher, each job a runner that makes the layout it is handed
(``JobSpec.layout``: directories with their modes, links absolute in the job directory's name, the marker) before
it execs bash, and asks the launcher to remove ``ENDED_JOB_LAYOUT`` once ``job.sh`` ended, before it writes its
exit file. The script sees the layout when it starts; once the exit file is there the layout is gone and the
logs stay; a launcher gone meanwhile leaves the layout for the submitter (``remove_ended_layout(if_left=True)``).
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.shell import jobtree
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.core.backend import JobSpec, MakesLayout
from interlink_nats.submitters.jobdirs.files import job_dir_for, prepare_job_dir, remove_ended_layout

WAIT_S = 60.0

LAYOUT = (
    layout.LayoutDir("volumes/data"),
    layout.LayoutDir("volumes/secret", 0o500),
    layout.LayoutDir("rootfs/main/work"),
    layout.LayoutLink("rootfs/main/mnt", "volumes/data"),
)


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def left(job_dir: Path) -> list[str]:
    """What of ``ENDED_JOB_LAYOUT`` is still there (a link counts, followed or not)."""
    return [name for name in layout.ENDED_JOB_LAYOUT if os.path.lexists(job_dir / name)]


def job(root: Path, *, marker: bool = False) -> JobSpec:
    uid = str(uuid.uuid4())
    job_dir = job_dir_for(root, uid)
    script = (
        "#!/bin/bash\n"
        "{ [ -d containers ] && [ -d volumes/data ] && [ rootfs/main/mnt -ef volumes/data ] "
        "&& [ -d rootfs/main/work ]; } "
        "&& echo found > found\n"
        "until [ -e go ]; do sleep 0.05; done\n"
        "echo the-log\n"
    )
    path = prepare_job_dir(job_dir, script, make_layout=False)
    return JobSpec(uid, job_dir, path, layout=LAYOUT, layout_marker=marker)


def test_the_shell_backend_declares_it_makes_the_layout() -> None:
    backend = ShellBackend(max_concurrent=2)
    assert isinstance(backend, MakesLayout) and backend.makes_layout
    assert jobtree.ENDED_JOB_LAYOUT == layout.ENDED_JOB_LAYOUT  # jobtree.py runs without the package
    assert jobtree.PREPARED_FILE == layout.PREPARED_FILE


async def test_the_runner_makes_the_layout_and_it_is_gone_when_the_exit_file_is_there(tmp_path: Path) -> None:
    backend = ShellBackend(max_concurrent=2)
    await backend.start()
    try:
        spec = job(tmp_path, marker=True)
        d = spec.job_dir
        assert not (d / "volumes").exists() and not (d / "containers").exists()  # the submitter made none
        await backend.submit(spec)
        await until(lambda: (d / "found").exists() or ((d / "job.out").exists() and (d / "go").exists()), "job.sh")
        await until(lambda: (d / "found").exists(), "the script to find the layout")
        assert stat.S_IMODE((d / "volumes/data").stat().st_mode) == 0o700
        assert stat.S_IMODE((d / "containers").stat().st_mode) == 0o700  # the runner made it, for the script
        assert stat.S_IMODE((d / "volumes/secret").stat().st_mode) == 0o500
        assert os.readlink(d / "rootfs/main/mnt") == str(d.absolute() / "volumes/data")
        assert os.readlink(d / layout.PREPARED_FILE) == str(d.absolute())
        (d / "go").touch()
        await until(lambda: (d / ".shell.exit").exists(), "the exit file")
        assert left(d) == []  # removed before the exit file was written
        assert "the-log" in (d / "job.out").read_text()
        assert (d / "containers").is_dir() and (d / "job.sh").exists()
    finally:
        await backend.close()


async def test_a_link_put_in_the_layout_is_removed_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious")
    backend = ShellBackend(max_concurrent=2)
    await backend.start()
    try:
        spec = job(tmp_path / "state")
        d = spec.job_dir
        (d / "job.sh").write_text(f"#!/bin/bash\nln -s {outside} volumes/data/escape\nln -sfn {outside} rootfs/x\n")
        await backend.submit(spec)
        await until(lambda: (d / ".shell.exit").exists(), "the exit file")
        assert left(d) == []
        assert (outside / "keep").read_text() == "precious"
    finally:
        await backend.close()


async def test_a_launcher_gone_leaves_the_layout_to_the_submitter(tmp_path: Path) -> None:
    backend = ShellBackend(max_concurrent=2)
    await backend.start()
    try:
        spec = job(tmp_path)
        d = spec.job_dir
        await backend.submit(spec)
        await until(lambda: (d / "found").exists(), "the script to find the layout")
        launcher = backend._launcher._pipes
        assert launcher is not None and launcher.transport is not None
        launcher.transport.kill()
        await launcher.exited
        (d / "go").touch()
        await until(lambda: (d / ".shell.exit").exists(), "the exit file (the runner goes on)")
        assert (d / ".shell.exit").read_text().strip() == "0"
        assert (d / "volumes/data").is_dir()  # nobody removed it: the submitter's poll finds it left
        remove_ended_layout(d, if_left=True)
        assert left(d) == []
        assert "the-log" in (d / "job.out").read_text()
    finally:
        await backend.close()
