"""The submitter's job directories: layout and privacy, log offsets, container files, change journal, removal."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.requests import job_layout
from interlink_nats.submitters.core.status import container_file_number
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.jobdirs import logs
from interlink_nats.submitters.jobdirs.spread import spread_subdirectories


def test_tail_and_limit_offsets(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"a\nbb\nccc\n")
    start = logs.start_offset
    assert start(log, offset=0, tail_lines=None) == 0
    assert start(log, offset=0, tail_lines=1) == 5
    assert start(log, offset=0, tail_lines=2) == 2
    assert start(log, offset=0, tail_lines=10) == 0
    assert start(log, offset=0, tail_lines=0) == 9
    assert start(log, offset=4, tail_lines=1) == 4, "an explicit offset resumes there"
    assert start(log, offset=99, tail_lines=None) == 9
    assert start(tmp_path / "missing", offset=0, tail_lines=1) == 0
    log.write_bytes(b"a\nno newline at end")
    assert start(log, offset=0, tail_lines=1) == 2
    big = tmp_path / "big.log"
    big.write_bytes(b"".join(b"%05d\n" % i for i in range(5000)))
    assert logs.read_chunk(big, start(big, offset=0, tail_lines=2)) == b"04998\n04999\n"
    assert logs.read_chunk(tmp_path / "missing", 0) == b""


def test_limit_bytes_counts_from_where_output_starts() -> None:
    """Kubernetes' --limit-bytes: the first N bytes of the output, across chunks, then nothing more."""
    budget = logs.ByteBudget(4)
    assert budget.take(b"012") == b"012" and not budget.spent
    assert budget.take(b"3456789\n") == b"3" and budget.spent
    assert budget.take(b"more") == b""
    unlimited = logs.ByteBudget(None)
    assert unlimited.take(b"x" * 10) == b"x" * 10 and not unlimited.spent
    assert logs.ByteBudget(0).spent


def test_job_dirs_are_private_and_names_are_checked(tmp_path: Path) -> None:
    job_dir = jobfiles.job_dir_for(tmp_path, "0f3bd293-bef1-4af9-b11f-3af7d25b8f85")
    old_umask = os.umask(0o022)
    try:
        script = jobfiles.prepare_job_dir(job_dir, "echo hi\n")
    finally:
        os.umask(old_umask)
    assert script.read_text() == "#!/bin/bash\necho hi\n"
    assert oct(job_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(script.stat().st_mode & 0o777) == "0o700"
    for bad in ("", "..", "a/b", "-rf", "x" * 200):
        with pytest.raises(jobfiles.InvalidJobError):
            jobfiles.job_dir_for(tmp_path, bad)
    with pytest.raises(jobfiles.InvalidJobError):
        jobfiles.validate_container("Main")


def test_a_retry_after_a_write_cut_short_replaces_the_script_whole(tmp_path: Path) -> None:
    """The script goes in by a rename, so a crash mid-write leaves no ``job.sh`` (recovery reads one that exists as
    stored); whatever a retry finds there (half a script, another mode) the whole script replaces by a rename, with
    its mode, leaving no temporary file."""
    job_dir = jobfiles.job_dir_for(tmp_path, "0f3bd293-bef1-4af9-b11f-3af7d25b8f85")
    whole = "#!/bin/bash\n" + "echo line\n" * 2000
    jobfiles.prepare_job_dir(job_dir, whole)
    script = job_dir / layout.SCRIPT_NAME
    script.write_text(whole[:100])  # as a crash mid-write leaves it
    script.chmod(0o644)
    inode = script.stat().st_ino

    assert jobfiles.prepare_job_dir(job_dir, whole) == script
    assert script.read_text() == whole
    assert oct(script.stat().st_mode & 0o777) == "0o700"
    assert script.stat().st_ino != inode, "replaced by a rename: a reader of the old one never sees it change"
    assert sorted(p.name for p in job_dir.iterdir()) == sorted([layout.SCRIPT_NAME, layout.CONTAINERS_DIR])


def test_container_files_are_read_and_cached_by_directory_mtime(tmp_path: Path) -> None:
    job_dir = tmp_path / "j"
    jobfiles.prepare_job_dir(job_dir, "true")
    layout.started_path(job_dir, "c").write_text("1800000000\n")
    layout.exit_path(job_dir, "c").write_text("3\n")
    cache = jobfiles.ContainerFilesCache()
    files = cache.read(job_dir, ["c", "d"])
    assert files["c"].exit_code == 3
    assert files["c"].started_at == 1800000000.0
    assert files["d"].exit_code is None
    old = 1_700_000_000
    os.utime(job_dir / layout.CONTAINERS_DIR, (old, old))
    cache.read(job_dir, ["c", "d"])
    layout.exit_path(job_dir, "c").write_text("4\n")  # an in-place rewrite the layout never does
    os.utime(job_dir / layout.CONTAINERS_DIR, (old, old))
    assert cache.read(job_dir, ["c", "d"])["c"].exit_code == 3, "unchanged directory → cached"
    layout.exit_path(job_dir, "d").write_text("0\n")
    assert cache.read(job_dir, ["c", "d"])["d"].exit_code == 0


def test_the_change_journal_is_read_from_where_the_last_read_stopped(tmp_path: Path) -> None:
    journal = layout.changes_path(tmp_path / "jobs" / "a")
    (tmp_path / "jobs").mkdir()
    reader = jobfiles.ChangeJournal()
    assert reader.read([journal]) == set(), "no journal yet: nothing"
    journal.write_bytes(b"a\nb\nc")  # "c" is still being written
    assert reader.read([journal]) == {"a", "b"}
    assert reader.read([journal]) == set(), "only what is new"
    with journal.open("ab") as f:
        f.write(b"\na\n")
    assert reader.read([journal]) == {"c", "a"}


def test_a_long_change_journal_is_renamed_aside_and_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobfiles, "JOURNAL_ROTATE_BYTES", 4)
    journal = tmp_path / layout.CHANGES_FILE
    reader = jobfiles.ChangeJournal()
    journal.write_bytes(b"a\nb\n")
    assert reader.read([journal]) == {"a", "b"}
    assert not journal.exists(), "read past the limit: renamed aside"
    old = journal.with_name(journal.name + ".old")
    with old.open("ab") as f:  # a writer that opened the journal just before the rename
        f.write(b"late\n")
    journal.write_bytes(b"n\n")  # writers after the rename start a new journal
    assert reader.read([journal]) == {"late", "n"}
    assert not old.exists()


@pytest.mark.parametrize(
    ("text", "number"),
    [("3\n", 3.0), ("1800000000\n", 1800000000.0), ("143\n3\n", 143.0), ("", None), ("14", None), ("x\n", None)],
)
def test_container_file_number_takes_only_a_complete_file(text: str, number: float | None) -> None:
    assert container_file_number(text) == number


def test_exit_file_being_written_is_read_again_not_cached(tmp_path: Path) -> None:
    """The script writes an exit file in place (no rename): until its newline is there, it is not taken,
    and a read that saw it so is not cached (completing it does not change the directory's mtime)."""
    job_dir = tmp_path / "j"
    jobfiles.prepare_job_dir(job_dir, "true")
    layout.exit_path(job_dir, "c").write_text("")
    old = 1_700_000_000
    os.utime(job_dir / layout.CONTAINERS_DIR, (old, old))
    cache = jobfiles.ContainerFilesCache()
    assert cache.read(job_dir, ["c"])["c"].exit_code is None
    layout.exit_path(job_dir, "c").write_text("7\n")
    os.utime(job_dir / layout.CONTAINERS_DIR, (old, old))
    files = cache.read(job_dir, ["c"])
    assert files["c"].exit_code == 7
    assert files["c"].finished_at is not None


@pytest.mark.parametrize("declared_by", ["field", "old layout line"])
def test_prepare_job_dir_makes_the_declared_layout(tmp_path: Path, declared_by: str) -> None:
    """From ``JobScript.layout``; and from the JSON layout line of a script rendered before the field existed
    (the compatibility path), the same directories and links."""
    job_dir = tmp_path / "j"
    entries: list[layout.LayoutEntry] = [
        layout.LayoutDir("volumes/cfg", 0o755),
        layout.LayoutDir("volumes/scratch/a/b"),
        layout.LayoutLink("rootfs/main/etc/app", "volumes/cfg"),
        layout.LayoutDir("rootfs/main/etc/app/inside"),  # through the link, like `mkdir -p`
    ]
    field = [
        pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="volumes/cfg", mode=0o755),
        pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="volumes/scratch/a/b"),
        pb.LayoutEntry(kind=pb.LayoutEntryKind.SYMLINK, path="rootfs/main/etc/app", target="volumes/cfg"),
        pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="rootfs/main/etc/app/inside"),
    ]
    assert job_layout(field) == tuple(entries)
    if declared_by == "field":  # the script tests each entry: no marker
        script, declared = "#!/bin/bash\ntrue\n", field
    else:  # an older renderer's script, which tests the marker
        script, declared = f"#!/bin/bash\n{layout.layout_line(entries)}\n{layout.PREPARED_TEST} && true\n", []
    for _ in range(2):  # a retried submission makes the same layout again
        jobfiles.prepare_job_dir(job_dir, script, declared)
        assert oct((job_dir / "volumes/cfg").stat().st_mode & 0o777) == "0o755"
        assert oct((job_dir / "volumes/scratch/a").stat().st_mode & 0o777) == "0o700"
        assert os.readlink(job_dir / "rootfs/main/etc/app") == str(job_dir.absolute() / "volumes/cfg")
        assert (job_dir / "volumes/cfg/inside").is_dir()
        if declared_by == "field":
            assert not (job_dir / layout.PREPARED_FILE).is_symlink(), "a script that does not test it: no marker"
        else:
            assert os.readlink(job_dir / layout.PREPARED_FILE) == str(job_dir.absolute())


def test_prepare_job_dir_leaves_a_layout_it_cannot_make_to_the_script(tmp_path: Path) -> None:
    job_dir = tmp_path / "j"
    jobfiles.prepare_job_dir(job_dir, f"{layout.LAYOUT_PREFIX}[]\n")
    assert (job_dir / layout.CONTAINERS_DIR).is_dir()
    assert not (job_dir / layout.PREPARED_FILE).is_symlink(), "no link: the script tests the directories itself"
    bad = f'#!/bin/bash\n{layout.LAYOUT_PREFIX}[["d","../x",null]]\n'
    jobfiles.prepare_job_dir(job_dir, bad)
    assert not (job_dir / layout.PREPARED_FILE).is_symlink(), "no marker: the script makes its own layout"
    assert not (tmp_path / "x").exists()
    for declared in (
        [pb.LayoutEntry(kind=pb.LayoutEntryKind.SYMLINK, path="rootfs/x", target="../x")],  # a path outside
        [pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path="rootfs/x", mode=0o4755)],  # a setuid mode
        [pb.LayoutEntry(path="rootfs/x")],  # no kind
    ):
        jobfiles.prepare_job_dir(job_dir, "#!/bin/bash\n", declared)
        assert not (job_dir / layout.PREPARED_FILE).is_symlink(), f"the script's own job: {declared}"
        assert not (job_dir / "rootfs").exists()
    (job_dir / "volumes").write_text("a file where a directory goes")
    jobfiles.prepare_job_dir(job_dir, f'#!/bin/bash\n{layout.LAYOUT_PREFIX}[["d","volumes/v",null]]\n')
    assert not (job_dir / layout.PREPARED_FILE).is_symlink()


def test_remove_job_dir_outlasts_a_script_still_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scancel does not wait for the job's clean-up: a file it writes while the directory is being removed must
    not leave the directory behind (it did: tests/backends/slurm/test_slurm.py's cancel test failed once in CI)."""
    job_dir = tmp_path / "jobs" / "j"
    jobfiles.prepare_job_dir(job_dir, "#!/bin/bash\ntrue\n")
    real_rmtree = shutil.rmtree
    calls: list[Path] = []

    def rmtree_while_writing(path: Path, ignore_errors: bool = False) -> None:
        calls.append(Path(path))
        real_rmtree(path, ignore_errors=ignore_errors)
        if len(calls) == 1:  # the script's clean-up wrote an exit file meanwhile, recreating its directory
            (Path(path) / layout.CONTAINERS_DIR).mkdir(parents=True)
            (Path(path) / layout.CONTAINERS_DIR / "main.exit").write_text("143\n")

    monkeypatch.setattr(jobfiles.shutil, "rmtree", rmtree_while_writing)
    monkeypatch.setattr(jobfiles, "REMOVE_PAUSE_S", 0.0)
    jobfiles.remove_job_dir(job_dir)
    assert not job_dir.exists()
    assert list((tmp_path / "jobs").iterdir()) == [], "nothing left aside either"
    assert len(calls) == 2 and calls[0] != job_dir, "removed after being renamed aside"
    jobfiles.remove_job_dir(job_dir)  # already gone: nothing to do


def test_removing_an_ended_layout_never_follows_a_link_the_job_put_there(tmp_path: Path) -> None:
    """The job's account owns its directory: a link it made in place of ``volumes/`` or inside ``rootfs/`` is
    removed as a link, and what it leads to stays; logs and exit files stay too."""
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("precious")
    job_dir = jobfiles.job_dir_for(tmp_path / "state", "00000000-0000-4000-8000-000000000001")
    (job_dir / layout.CONTAINERS_DIR).mkdir(parents=True)
    layout.exit_path(job_dir, "main").write_text("0\n")
    (job_dir / layout.VOLUMES_DIR).symlink_to(outside / "keep")
    (job_dir / layout.ROOTFS_DIR / "main").mkdir(parents=True)
    (job_dir / layout.ROOTFS_DIR / "main" / "data").symlink_to(outside)
    (job_dir / layout.PREPARED_FILE).symlink_to(job_dir)
    jobfiles.remove_ended_layout(job_dir)
    assert sorted(p.name for p in job_dir.iterdir()) == [layout.CONTAINERS_DIR]
    assert (outside / "keep" / "file").read_text() == "precious"
    assert layout.exit_path(job_dir, "main").read_text() == "0\n"


def test_removing_an_ended_layout_takes_what_the_job_wrote_and_survives_what_it_cannot_take(tmp_path: Path) -> None:
    """The volumes hold what the job wrote (files, directories in directories): all of it goes; a file where
    ``rootfs/`` was expected goes too; directories nested deeper than Python recurses stay for the pod's
    deletion without an error reaching the poll; logs and exit files stay."""
    job_dir = jobfiles.job_dir_for(tmp_path / "state", "00000000-0000-4000-8000-000000000002")
    (job_dir / layout.CONTAINERS_DIR).mkdir(parents=True)
    layout.exit_path(job_dir, "main").write_text("0\n")
    data = job_dir / layout.VOLUMES_DIR / "scratch" / "a" / "b"
    data.mkdir(parents=True)
    (data / "out.txt").write_text("result")
    (data.parent / "c.txt").write_text("x")
    (job_dir / layout.ROOTFS_DIR).write_text("not a directory")
    jobfiles.remove_ended_layout(job_dir)
    assert sorted(p.name for p in job_dir.iterdir()) == [layout.CONTAINERS_DIR]
    deep = job_dir / layout.VOLUMES_DIR / "/".join(["d"] * 120)
    deep.mkdir(parents=True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)  # fewer frames left than the directories are deep
    try:
        jobfiles.remove_ended_layout(job_dir)  # no RecursionError
    finally:
        sys.setrecursionlimit(limit)
    assert deep.is_dir(), "left for the pod's deletion"
    jobfiles.remove_ended_layout(job_dir)
    assert sorted(p.name for p in job_dir.iterdir()) == [layout.CONTAINERS_DIR]
    assert layout.exit_path(job_dir, "main").read_text() == "0\n"
    jobfiles.remove_ended_layout(job_dir / "gone")  # a job directory deleted meanwhile: nothing to do


def _file_system_of(path: Path) -> str:
    """The type of the mount ``path`` is on (the longest mount point above it in /proc/mounts)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    for line in Path("/proc/mounts").read_text().splitlines():
        point, fs_type = line.split()[1].replace("\\040", " "), line.split()[2]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fs_type
    return kind


def _lsattr_flags(path: Path) -> str:
    """The flags e2fsprogs' ``lsattr -d`` reads (``T``: FS_TOPDIR_FL); empty where the file system has none."""
    done = subprocess.run(["lsattr", "-d", str(path)], capture_output=True, text=True, check=False)
    return done.stdout.split()[0] if done.returncode == 0 and done.stdout else ""


def test_the_jobs_directory_spreads_its_job_directories_where_the_file_system_can(tmp_path: Path) -> None:
    """ext2/3/4 take ``chattr +T`` (each job directory then goes to a block group of its own: a new inode no
    longer scans the thousands the ended layouts freed in one group); other file systems refuse it, and the jobs
    are made as before. A new ``jobs/`` is marked by the first job, one made before by the start's sweep; the
    directory's other flags stay."""
    ext = _file_system_of(tmp_path) in ("ext2", "ext3", "ext4")
    state = tmp_path / "state"
    uid = "0f8b3c1e-2d4a-4b6c-8e9f-a1b2c3d4e5f6"
    jobfiles.prepare_job_dir(jobfiles.job_dir_for(state, uid), "true\n")
    jobs = jobfiles.jobs_root(state)
    assert ("T" in _lsattr_flags(jobs)) is ext
    assert "T" not in _lsattr_flags(jobs / uid), "not inherited: a job's own layout stays near its directory"

    older = tmp_path / "older-jobs"
    older.mkdir()
    if ext:
        subprocess.run(["chattr", "+d", str(older)], check=True)  # nodump: a flag of the site's, to be kept
    assert jobfiles.sweep_removals(older) == 0
    flags = _lsattr_flags(older)
    assert ("T" in flags) is ext and ("d" in flags) is ext
    assert spread_subdirectories(str(older)) is ext, "marked before: said so again, nothing changed"
    assert spread_subdirectories(str(tmp_path / "missing")) is False


def test_a_journaled_file_system_gets_no_spread_mark_and_loses_an_old_one(tmp_path: Path) -> None:
    """With a journal, ext4 checks no freed inode's age: the mark would only cost each job directory the
    allocator's walk over every group. A real journaled ext4 (a loop-mounted image, as the kernel lists its
    journal in /proc/fs/jbd2), and the same rule read from a stand-in list of journals on that file system."""
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    mount.mkdir()
    with image.open("wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True, capture_output=True)
    try:
        jobs = mount / "jobs"
        jobs.mkdir()
        subprocess.run(["chattr", "+T", str(jobs)], check=True)  # as an earlier version marked every jobs/
        device = os.stat(jobs).st_dev
        loop = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}"))
        assert f"{loop}-8" in os.listdir("/proc/fs/jbd2"), "the kernel's name for its journal"
        assert spread_subdirectories(str(jobs)) is False
        assert "T" not in _lsattr_flags(jobs)

        # the rule alone, on the same ext4, with a stand-in list of the kernel's journals
        listed = tmp_path / "jbd2"
        listed.mkdir()
        here = mount / "here"
        here.mkdir()
        subprocess.run(["chattr", "+d", str(here)], check=True)  # nodump: a flag of the site's, to be kept
        assert spread_subdirectories(str(here), jbd2=str(listed)) is True, "no journal listed: marked"
        assert "T" in _lsattr_flags(here)
        (listed / f"{loop}-8").mkdir()
        assert spread_subdirectories(str(here), jbd2=str(listed)) is False, "its device's journal listed: unmarked"
        assert "T" not in _lsattr_flags(here) and "d" in _lsattr_flags(here), "the site's own flag stays"
    finally:
        subprocess.run(["umount", str(mount)], check=True)
