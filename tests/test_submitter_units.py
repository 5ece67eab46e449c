"""Small pure pieces of the submitter: settings sources, log offsets, job files, flags of the registry."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.core.status import container_file_number
from interlink_nats.submitters.jobdirs import files as jobfiles
from interlink_nats.submitters.jobdirs import logs
from interlink_nats.submitters.settings import ConfigFileError, SubmitterSettings, parse_build_config
from interlink_nats.submitters.state.registry import Registry
from pydantic import ValidationError


def test_settings_precedence_is_cli_then_env_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "submitter.toml"
    cfg.write_text(
        'pool = "from-file"\npoll_interval = 9.0\nnats_url = "tls://file:4222"\n'
        '[slurm]\nsbatch = "/opt/slurm/bin/sbatch"\npartition = "file"\n'
        '[build_config]\nruntime = "apptainer"\nimage_prefix = "docker://"\n'
    )
    monkeypatch.setenv("INTERLINK_SUBMITTER_SLURM__PARTITION", "env")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", "wss://a/nats,wss://b/nats")
    s = SubmitterSettings.load(cfg, poll_interval=1.5)
    assert s.pool == "from-file"
    assert s.poll_interval_s == 1.5
    assert s.nats.servers() == ["wss://a/nats", "wss://b/nats"]
    assert s.slurm.partition == "env"
    assert s.slurm.sbatch == "/opt/slurm/bin/sbatch", "env for one nested key keeps the file's others"
    bc = s.read_build_config()
    assert bc.runtime == pb.ContainerRuntime.APPTAINER
    assert bc.image_prefix == "docker://"


def test_yaml_config_and_clear_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("pool: Bad_Pool\n")
    with pytest.raises(ValidationError, match="DNS label"):
        SubmitterSettings.load(cfg)
    cfg.write_text("pool: ok\nnats_url: [http://x]\n")
    with pytest.raises(ValidationError, match="nats://"):
        SubmitterSettings.load(cfg)
    cfg.write_text("pool: [unclosed\n")
    with pytest.raises(ConfigFileError, match=r"s\.yaml"):
        SubmitterSettings.load(cfg)
    with pytest.raises(ConfigFileError, match="invalid"):
        parse_build_config({"no_such_field": 1})


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


def claim_fields(tmp_path: Path) -> dict[str, Any]:
    """One claim's fields but its uid: a pod of one container, owned by instance ``a``."""
    return {
        "namespace": "n",
        "name": "p",
        "owner": "a",
        "job_dir": tmp_path / "j",
        "init_containers": [],
        "containers": ["c"],
        "spec": b"",
        "status": b"",
    }


async def test_registry_claims_once_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    kw = claim_fields(tmp_path)
    created, row = await reg.claim(uid="u1", **kw)
    assert created
    assert row.phase == "submitting"
    again, _ = await reg.claim(uid="u1", **{**kw, "owner": "b"})
    assert not again
    await reg.mark_submitted("u1", "77")
    await reg.close()
    reg = await Registry.open(path)
    row2 = await reg.get("u1")
    assert row2 is not None
    assert (row2.phase, row2.job_id, row2.owner) == ("active", "77", "a")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert await reg.adopt("a", "b") == 1
    assert [r.uid for r in await reg.live("b")] == ["u1"]
    await reg.close()


async def test_a_claims_follow_up_runs_after_its_commit_only_when_it_created_the_row(tmp_path: Path) -> None:
    """``claim(then=...)``: Submit writes its job directory in the claim's thread hop, after the commit."""
    import asyncio
    import sqlite3

    path = tmp_path / "r.sqlite3"
    reg = await Registry.open(path)
    kw = claim_fields(tmp_path)
    seen: list[tuple[str, object]] = []

    def committed(uid: str) -> object:
        with sqlite3.connect(path) as other:  # another connection sees only committed rows
            return other.execute("SELECT phase FROM jobs WHERE uid = ?", (uid,)).fetchone()

    def follow_up(uid: str, fail: bool = False) -> None:
        seen.append((uid, committed(uid)))
        if fail:
            raise OSError(f"disk full for {uid}")

    # Concurrent claims share one transaction; a failing follow-up fails its own caller only, unwrapped.
    results = await asyncio.gather(
        reg.claim(uid="u1", then=lambda: follow_up("u1"), **kw),
        reg.claim(uid="u2", then=lambda: follow_up("u2", fail=True), **kw),
        return_exceptions=True,
    )
    assert results[0][0] is True  # type: ignore[index]
    assert results[0][1] == await reg.get("u1"), "the returned row is the row as stored"  # type: ignore[index]
    assert isinstance(results[1], OSError), "the follow-up's own error, not a RegistryError"
    assert sorted(seen) == [("u1", ("submitting",)), ("u2", ("submitting",))], "after the commit"
    row = await reg.get("u2")
    assert row is not None and row.phase == "submitting", "the claim stays durable"
    created, _ = await reg.claim(uid="u1", then=lambda: follow_up("again"), **kw)
    assert not created
    assert [u for u, _ in seen] == ["u1", "u2"], "not run for a row that already existed"
    await reg.close()


@pytest.mark.parametrize(
    "resources",
    [
        {},
        {"cpu_millis": 1500, "memory_bytes": 2**40, "gpus": 1},
        {"cpu_millis": -1, "gpus": -(2**63)},
        {"memory_bytes": 2**63 - 1, "wall_time": dt.timedelta(hours=2, microseconds=5)},
    ],
)
def test_fastwire_encodes_a_specs_resources_exactly_as_betterproto_does(resources: dict[str, object]) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    job = pb.JobScript(pod=pb.PodRef(uid="u"), containers=["c"], resources=pb.ResourceRequest(**resources))  # type: ignore[arg-type]
    assert fastwire.job_spec(job) == bytes(job)


@pytest.mark.parametrize(
    "resp",
    [
        pb.SubmitResponse(),
        pb.SubmitResponse(job_id="6f1c2e9a-1111-2222-3333-444455556666", created=True),
        pb.SubmitResponse(job_id="12345", created=False),
        pb.SubmitResponse(created=True),
        pb.SubmitResponse(job_id="é" * 200, created=True),
        pb.SubmitResponse(job_id="7", status=pb.JobStatus(job_id="7", state=pb.JobState.RUNNING, pool="p")),
    ],
    ids=["empty", "created", "known", "no-id", "long-id", "with-status"],
)
def test_fastwire_encodes_a_submit_reply_exactly_as_betterproto_does(resp: pb.SubmitResponse) -> None:
    from interlink_nats.submitters.core import fastwire

    assert fastwire.submit_response(resp) == bytes(resp)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {
            "init": {"i": "true"},
            "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "annotations": {"slurm-job.vk.io/flags": "--qos=x -N 2"},
            "namespace": "ns-é",
            "name": "ü" * 200,
        },
    ],
)
def test_fastwire_encodes_exactly_what_betterproto_does(kw: dict[str, object]) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire
    from interlink_nats.submitters.core.status import JobMeta, map_status
    from jobs import pod_job

    job = pod_job("u-1", {"a": "true", "b": "false"}, **kw)  # type: ignore[arg-type]
    spec = pb.JobScript(
        pod=job.pod,
        init_containers=job.init_containers,
        containers=job.containers,
        resources=job.resources,
        backend_flags=job.backend_flags,
        layout=job.layout,
    )
    assert fastwire.job_spec(job) == bytes(spec)
    assert pb.JobScript.parse(fastwire.job_spec(job)) == spec
    meta = JobMeta(
        job.pod.uid,
        job.pod.namespace,
        job.pod.name,
        "pool-a",
        "",
        tuple(job.init_containers),
        tuple(job.containers),
        "shell",
    )
    assert fastwire.pending_status(
        job.pod.uid, job.pod.namespace, job.pod.name, "pool-a", job.init_containers, job.containers
    ) == bytes(map_status(meta, None, {}, now=0.0))


def test_every_node_of_a_cluster_from_flag_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's servers: repeated or comma-separated --nats-url, a comma-separated env var, a YAML list."""
    nodes = ["nats://n0:4222", "nats://n1:4222", "nats://n2:4222"]
    repeated = ["nats://n0:4222,nats://n1:4222", nodes[2]]
    assert SubmitterSettings.load(None, pool="a", nats_url=repeated).nats.servers() == nodes
    cfg = tmp_path / "s.yaml"
    cfg.write_text("pool: a\nnats_url: [nats://n0:4222, 'nats://n1:4222,nats://n2:4222']\n")
    assert SubmitterSettings.load(cfg).nats.servers() == nodes
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", ",".join(nodes))
    assert SubmitterSettings.load(None, pool="a").nats.servers() == nodes


def _plain_submit_requests() -> list[bytes]:
    """Encodings as every client sends them (betterproto2's own)."""
    from interlink_nats.gen.interlink_nats import v1 as pb
    from jobs import pod_job

    rendered = pod_job("u-1", {"a": "true", "b": "false"}, init={"i": "true"}, namespace="ns-é", name="ü" * 200)
    messages = [
        pb.SubmitRequest(job=pb.JobScript()),
        pb.SubmitRequest(job=pb.JobScript(pod=pb.PodRef())),
        pb.SubmitRequest(job=rendered),
        pb.SubmitRequest(job=pod_job("u-2", {"main": "true"}, limits={"cpu": "2", "memory": "1Gi"})),
        pb.SubmitRequest(
            job=pb.JobScript(
                pod=pb.PodRef(uid="u", name="n"),
                script="x" * 70_000,
                containers=["", "c"],
                init_containers=[""],
                resources=pb.ResourceRequest(),
                backend_flags=["", "--qos=x"],
            )
        ),
    ]
    return [bytes(m) for m in messages]


def _frame(number: int, payload: bytes) -> bytes:
    """A length-delimited field (lengths < 128 only: one byte)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _unusual_submit_requests() -> list[bytes]:
    """Encodings the hand decoder leaves to betterproto2 (valid or not)."""
    from interlink_nats.gen.interlink_nats import v1 as pb

    job = bytes(pb.JobScript(pod=pb.PodRef(uid="u"), script="s", containers=["c"]))
    jobs = [
        job + _frame(2, b"t"),  # the script twice: the last wins
        job + _frame(1, _frame(1, b"v")),  # the pod twice
        job + _frame(7, b"z"),  # an unknown field
        job + b"\x40\x01",  # an unknown varint field
        _frame(1, _frame(4, b"n") + b"\x20\x01"),  # an unknown varint field in the pod
        _frame(2, b"\xc3\x28"),  # invalid UTF-8 in the script
        _frame(1, _frame(3, b"\xff\xfe")),  # invalid UTF-8 in the pod's name
    ]
    return [
        *(_frame(1, j) for j in jobs),
        b"",  # no job at all
        _frame(1, job) * 2,  # the job twice
        _frame(2, b""),  # an unknown field of SubmitRequest
    ]


@pytest.mark.parametrize("data", _plain_submit_requests())
def test_fastwire_decodes_a_plain_submit_request_by_hand_exactly_as_betterproto_does(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    expected = pb.SubmitRequest.FromString(data)

    def not_here(cls: object, data: bytes) -> None:
        raise AssertionError("a plain request is decoded by hand")

    monkeypatch.setattr(pb.SubmitRequest, "parse", classmethod(not_here))
    got = fastwire.submit_request(data)
    assert got == expected
    assert bytes(got) == data


@pytest.mark.parametrize("data", _unusual_submit_requests())
def test_fastwire_leaves_an_unusual_submit_request_to_betterproto(data: bytes) -> None:
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.submitters.core import fastwire

    try:
        expected = pb.SubmitRequest.FromString(data)
    except Exception as exc:  # the same error, from the same parser
        with pytest.raises(type(exc)):
            fastwire.submit_request(data)
        return
    got = fastwire.submit_request(data)
    assert got == expected
    assert bytes(got) == bytes(expected)


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
    assert jobfiles.layout_entries(field) == entries
    if declared_by == "field":
        script, declared = "#!/bin/bash\ntrue\n", field
    else:
        script, declared = f"#!/bin/bash\n{layout.layout_line(entries)}\ntrue\n", []
    for _ in range(2):  # a retried submission makes the same layout again
        jobfiles.prepare_job_dir(job_dir, script, declared)
        assert oct((job_dir / "volumes/cfg").stat().st_mode & 0o777) == "0o755"
        assert oct((job_dir / "volumes/scratch/a").stat().st_mode & 0o777) == "0o700"
        assert os.readlink(job_dir / "rootfs/main/etc/app") == str(job_dir.absolute() / "volumes/cfg")
        assert (job_dir / "volumes/cfg/inside").is_dir()
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


async def test_the_batch_runner_groups_what_queued_meanwhile_and_answers_each_item_alone() -> None:
    """Items queued while a batch runs make the next batch; an item's error reaches only its caller;
    ``call`` runs after what was queued before it; a closed runner takes nothing more."""
    import asyncio
    import threading

    from interlink_nats.submitters.state.batching import BatchRunner

    started, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def work(items: Sequence[int]) -> list[int | BaseException]:
        seen.append(list(items))
        if list(items) == [0]:
            started.set()
            release.wait(30)
        return [ValueError(i) if i == 2 else i * 10 for i in items]

    runner: BatchRunner[int, int] = BatchRunner(work, name="test-batches")
    first = asyncio.ensure_future(runner.run(0))
    assert await asyncio.to_thread(started.wait, 30)
    rest = [asyncio.ensure_future(runner.run(i)) for i in (1, 2, 3)]
    later = asyncio.ensure_future(runner.call(lambda: len(seen)))
    await asyncio.sleep(0)  # one loop turn: the four calls above have queued their items
    release.set()
    assert await first == 0
    assert await rest[0] == 10 and await rest[2] == 30
    with pytest.raises(ValueError, match=r"^2$"):
        await rest[1]
    assert await later == 2, "call() ran after the batch queued before it"
    assert seen == [[0], [1, 2, 3]] and runner.batches == 2
    await runner.close()
    with pytest.raises(RuntimeError):
        await runner.run(4)


def test_remove_job_dir_outlasts_a_script_still_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scancel does not wait for the job's clean-up: a file it writes while the directory is being removed must
    not leave the directory behind (it did: tests/test_slurm.py's cancel test failed once in CI)."""
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


async def test_publish_acked_fails_as_jetstream_publish_does(nats_url: str) -> None:
    """The outbox's publish skips building a PubAck, not the checks, against a real JetStream: a stored message
    passes, an error answer (a full stream) raises APIError, no stream raises, and so does a silent one."""
    import uuid

    import nats
    import nats.errors
    import nats.js.errors
    from interlink_nats.submitters.state.outbox import publish_acked
    from nats.js.api import DiscardPolicy, StreamConfig

    name = f"ACKED_{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], max_msgs=1, discard=DiscardPolicy.NEW))
        await publish_acked(nc, f"{name}.a", b"x")
        with pytest.raises(nats.js.errors.APIError):  # the server's answer: maximum messages exceeded
            await publish_acked(nc, f"{name}.a", b"y")
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await publish_acked(nc, f"no-stream-{name}.a", b"x")
        silent = await nc.subscribe(f"SILENT_{name}")  # a responder that never answers: the request times out
        with pytest.raises(nats.errors.TimeoutError):
            await publish_acked(nc, f"SILENT_{name}", b"x", ack_wait_s=0.5)
        await silent.unsubscribe()
        await js.delete_stream(name)
    finally:
        await nc.close()


def test_new_setting_names_and_the_old_ones_they_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NATS section and unit-suffixed names; the flat and unit-less names of before stay accepted, each
    layer keeping its strength (env over file) and, within one layer, the new name winning."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "pool: a\nnats:\n  url: tls://file:4222\n  connect_timeout_s: 2\npoll_interval_s: 9\nkill_grace: 3\n"
        "slurm:\n  command_timeout: 7\nhtcondor:\n  hold_timeout_s: 60\n  token: {issuer: https://i, client_id: c,"
        " refresh_margin: 10}\n"
    )
    monkeypatch.setenv("INTERLINK_SUBMITTER_POLL_INTERVAL", "4")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS__USER", "env-user")
    monkeypatch.setenv("INTERLINK_SUBMITTER_RECONNECT_WAIT_MAX", "11")
    s = SubmitterSettings.load(cfg, announce_interval=12.0, announce_interval_s=13.0)
    assert s.nats.servers() == ["tls://file:4222"]
    assert (s.nats.user, s.nats.connect_timeout_s, s.nats.reconnect_wait_max_s) == ("env-user", 2.0, 11.0)
    assert s.poll_interval_s == 4.0, "the old variable in the environment beats the new key in the file"
    assert (s.kill_grace_s, s.announce_interval_s) == (3.0, 13.0)
    assert s.slurm.command_timeout_s == 7.0
    assert s.htcondor.hold_timeout_s == 60.0
    assert s.htcondor.token.refresh_margin_s == 10.0
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS__URL", "nats://new:4222")
    monkeypatch.setenv("INTERLINK_SUBMITTER_NATS_URL", "nats://old:4222")
    assert SubmitterSettings.load(None, pool="a").nats.servers() == ["nats://new:4222"]


def test_backend_sections_are_validated_by_the_backends_own_models() -> None:
    with pytest.raises(ValidationError, match=r"slurm\.command_timeout_s\n.*greater than 0"):
        SubmitterSettings.load(None, pool="a", slurm={"command_timeout_s": 0})
    with pytest.raises(ValidationError, match=r"htcondor\.mode"):
        SubmitterSettings.load(None, pool="a", backend="htcondor", htcondor={"mode": "far"})
    with pytest.raises(ValidationError, match="unknown backend 'pbs': one of shell, slurm, htcondor"):
        SubmitterSettings.load(None, pool="a", backend="pbs")


def test_a_shell_submitter_does_not_import_the_other_backends(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from interlink_nats.submitters.settings import SubmitterSettings\n"
        "from interlink_nats.submitters.runtime import make_backend\n"
        "import interlink_nats.submitters.cli\n"
        f"make_backend(SubmitterSettings.load(None, pool='a', state_dir={str(tmp_path)!r}))\n"
        "loaded = [m for m in sys.modules if m.startswith('interlink')]\n"
        "print(sorted(m for m in loaded if m.endswith(('slurm', 'htcondor', 'tokens'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["slurm", "--pool", "a", "--nats-url", "nats://n:4222", "--poll-interval", "2", "--partition", "p"],
            {
                "backend": "slurm",
                "pool": "a",
                "nats": {"url": ["nats://n:4222"]},
                "poll_interval_s": 2.0,
                "slurm": {"partition": "p"},
            },
        ),
        (
            ["htcondor", "--poll-interval-s", "3", "--mode", "remote", "--schedd", "ce"],
            {"backend": "htcondor", "poll_interval_s": 3.0, "htcondor": {"mode": "remote", "schedd": "ce"}},
        ),
        (["shell", "--max-concurrent-jobs", "4"], {"backend": "shell", "shell": {"max_concurrent_jobs": 4}}),
        (["slurm", "--no-use-sacct"], {"backend": "slurm", "slurm": {"use_sacct": False}}),
    ],
)
def test_each_backend_command_takes_the_common_options_and_its_own_flags(
    argv: list[str], expected: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlink_nats.submitters import cli
    from typer.testing import CliRunner

    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "_serve", lambda config, level, json_logs, overrides: seen.update(overrides))
    result = CliRunner().invoke(cli.app, argv)
    assert result.exit_code == 0, result.output
    assert {key: value for key, value in seen.items() if value is not None} == expected
