"""The flag grammar (``backends.slurm.flags``) against the real sbatch: what our parser reads is what sbatch did.

Each corpus entry is submitted held (``--hold``) to a real one-node Slurm and read back with ``scontrol show job``:
the fields the entry names show the values our parser found, and the canonical form our parser hands to sbatch
(``--name=value``) makes a job with the same fields. Words our parser refuses as grammar, sbatch refuses too
(or would read as the batch script). And sbatch's input environment (SBATCH_*) does not reach it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from interlink_nats.submitters.backends.slurm import flags as sf
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import JobSpec
from slurm_cluster import SlurmCluster, slurm_for_tests

pytestmark = pytest.mark.slurm

NOBODY = 65534

# (the words a pod wrote, the scontrol fields sbatch must show for them)
CORPUS: list[tuple[list[str], dict[str, str]]] = [
    (["--arr=0-2", "--acco=other"], {"ArrayTaskId": "0-2", "Account": "other"}),  # abbreviations sbatch accepts
    ([f"--ui={NOBODY}"], {"UserId": f"nobody({NOBODY})"}),
    (["-vAgrp-b"], {"Account": "grp-b"}),
    ([f"--gi={NOBODY}"], {"GroupId": f"nogroup({NOBODY})"}),
    (["--dep=singleton"], {"Dependency": "singleton(unfulfilled)"}),
    (["-t10"], {"TimeLimit": "00:10:00"}),
    (["--time", "1-0", "--time-m=5"], {"TimeLimit": "1-00:00:00", "TimeMin": "00:05:00"}),
    (["-p", "debug", "--comm=x", "--comment", "y"], {"Partition": "debug", "Comment": "y"}),
    (["--nice=5"], {"Nice": "5"}),
    (["--nic"], {"Nice": "100"}),  # an optional value: none given, sbatch's default for a bare --nice
    (["-n2", "--tasks-per=2"], {"NumTasks": "2"}),
    (["-qnormal", "-Ab"], {"Account": "b"}),
    (["--contig", "-Hc1"], {"Contiguous": "1", "CPUs/Task": "1"}),
    (["--deadl=2099-01-01T00:00:00"], {"Deadline": "2099-01-01T00:00:00"}),
    (["-A", "a1", "--account=a2", "-Aa3"], {"Account": "a3"}),  # the last one wins, as take_account reads it
    (["--mem", "100M"], {"MinMemoryNode": "100M"}),  # exact --mem, though --mem-bind, --mem-per-cpu... share it
]

REFUSED = [
    ["--exc"],  # ambiguous: --exclude, --exclusive
    ["--c=1"],
    ["--me=1"],
    ["--bogus=1"],
    ["-y"],
    ["--time"],  # needs a value
    ["-p"],
    ["--contiguous=yes"],  # takes none
    ["not-a-script-file"],  # sbatch reads it as the batch script
    ["--", "-p", "debug"],
    ["--nice", "5"],  # an optional value is never the next word: "5" would be the script
]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


def sbatch(slurm: SlurmCluster, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sbatch", *argv], env=env or slurm.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def held(slurm: SlurmCluster, tmp: Path, words: list[str]) -> dict[str, str]:
    """The fields of a held job submitted with ``words`` (scontrol show job, one ``key=value`` per word)."""
    script = tmp / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    out = sbatch(slurm, "--hold", "--parsable", "--job-name=corpus", "--output=/dev/null", *words, str(script))
    assert out.returncode == 0, (words, out.stderr)
    job_id = out.stdout.strip().split(";")[0]
    shown = slurm.run("scontrol", "show", "job", "-o", job_id).stdout
    slurm.run("scancel", job_id)
    return dict(word.split("=", 1) for word in shown.split() if "=" in word)


COMPARED = (
    *("Account", "ArrayTaskId", "UserId", "GroupId", "Dependency", "TimeLimit", "TimeMin", "Partition", "Comment"),
    *("Nice", "NumTasks", "QOS", "Contiguous", "Deadline", "MinMemoryNode", "CPUs/Task", "Reason"),
)


@pytest.mark.parametrize(("words", "expected"), CORPUS, ids=[" ".join(w) for w, _ in CORPUS])
def test_what_our_parser_reads_is_what_sbatch_did(
    slurm: SlurmCluster, tmp_path: Path, words: list[str], expected: dict[str, str]
) -> None:
    if os.geteuid() != 0 and any(f.name in ("uid", "gid") for f in sf.parse(words, source="corpus")):
        pytest.fail("--uid/--gid need a root submitter, as in CI: run the slurm tests as root")
    ours = sf.parse(words, source="corpus")
    seen = held(slurm, tmp_path, words)
    assert {k: seen.get(k) for k in expected} == expected, seen
    canonical = held(slurm, tmp_path, [f.argv() for f in ours])
    assert {k: canonical.get(k) for k in COMPARED} == {k: seen.get(k) for k in COMPARED}, [f.argv() for f in ours]


@pytest.mark.parametrize("words", REFUSED, ids=[" ".join(w) for w in REFUSED])
def test_what_our_parser_refuses_sbatch_refuses_or_takes_as_the_script(slurm: SlurmCluster, words: list[str]) -> None:
    with pytest.raises(sf.FlagError):
        sf.parse(words, source="corpus")
    out = sbatch(slurm, "--hold", "--parsable", *words)
    assert out.returncode != 0 and not out.stdout.strip(), (words, out.stdout, out.stderr)


async def test_sbatch_reads_nothing_from_the_submitters_sbatch_environment(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SBATCH_ARRAY_INX / SBATCH_ACCOUNT in the submitter's environment made every job an array under another
    account (sbatch reads them as options); the backend runs sbatch without them."""
    bad = {"SBATCH_ARRAY_INX": "0-2", "SBATCH_ACCOUNT": "from-env"}
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    raw = sbatch(slurm, "--hold", "--parsable", "--output=/dev/null", str(script), env={**slurm.env, **bad})
    job_id = raw.stdout.strip()
    shown = slurm.run("scontrol", "show", "job", "-o", job_id).stdout
    slurm.run("scancel", job_id)
    assert "ArrayTaskId=0-2" in shown and "Account=from-env" in shown, "the variables do matter to sbatch"

    for key, value in bad.items():
        monkeypatch.setenv(key, value)
    backend = SlurmBackend(SlurmConfig())
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.sh").write_text("#!/bin/bash\ntrue\n")
    job_id = await backend.submit(JobSpec(uid="env-test", job_dir=job_dir, script=job_dir / "job.sh"))
    shown = slurm.run("scontrol", "show", "job", "-o", job_id).stdout
    slurm.run("scancel", job_id)
    assert "ArrayTaskId" not in shown and "Account=from-env" not in shown, shown


# (a script's text, whether sbatch reads a directive from its header, whether the door's check refuses it). sbatch
# splits the script at "\n" alone (``_next_line`` in src/sbatch/opt.c), so a "\r" joins what follows to a comment
# line; it reads a directive only at the very start of a line, and stops at the first command (``_opt_batch_script``).
# The check refuses every line sbatch reads, and on purpose more (an indented or lower-case directive, #PBS...).
HEADERS = [
    ("#!/bin/bash\n#SBATCH --comment=read\ntrue\n", True, True),
    ("#!/bin/bash\n\n# a comment\n#SBATCH --comment=read\ntrue\n", True, True),
    ("#!/bin/bash\r#SBATCH --comment=read\ntrue\n", False, False),
    ("#!/bin/bash\ntrue\n#SBATCH --comment=read\n", False, False),  # after the first command
    ("#!/bin/bash\n  #SBATCH --comment=read\ntrue\n", False, True),  # stricter than this sbatch
]


@pytest.mark.parametrize(("text", "read", "refused"), HEADERS, ids=[repr(t) for t, _, _ in HEADERS])
def test_the_header_check_refuses_whatever_sbatch_reads_as_a_directive(
    slurm: SlurmCluster, tmp_path: Path, text: str, read: bool, refused: bool
) -> None:
    """The door's check (``SlurmBackend.check_script``, on the request's text) against the real sbatch: each
    script sbatch takes a directive from is refused."""
    script = tmp_path / "job.sh"
    script.write_bytes(text.encode())
    out = sbatch(slurm, "--hold", "--parsable", "--job-name=header", "--output=/dev/null", str(script))
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    shown = slurm.run("scontrol", "show", "job", "-o", job_id).stdout
    slurm.run("scancel", job_id)
    assert ("Comment=read" in shown) is read, shown
    backend = SlurmBackend(SlurmConfig())
    if refused:
        with pytest.raises(sf.FlagError, match="is an sbatch directive"):
            backend.check_script(text, field="job.script")
    else:
        backend.check_script(text, field="job.script")
