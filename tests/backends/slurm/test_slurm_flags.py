"""Backend flags read with sbatch's own grammar, then an allowlist (``backends.slurm.flags``); no Slurm needed.

The same grammar against the real sbatch: tests/backends/slurm/test_slurm_flags_real.py."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import PodRejected, render_job
from interlink_nats.submitters.backends.slurm import flags as sf
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import BackendUnavailable, JobSpec, ReadsScriptOptions, SubmitRejected
from interlink_nats.submitters.core.site_policy import AccountingPolicy
from jobs import pod_dict
from pydantic import ValidationError

# each ran on the old denylist (exact names), each is refused naming the flag as written.
REPRODUCTIONS = [
    (["--arr=0-2", "--acco=other"], "'--arr=0-2' (sbatch --array)"),
    (["--ui=62001"], "'--ui=62001' (sbatch --uid)"),
    (["--gi=0"], "'--gi=0' (sbatch --gid)"),
    (["--dep", "afterok:1"], "'--dep afterok:1' (sbatch --dependency)"),
    (["--wr=id"], "'--wr=id' (sbatch --wrap)"),
    (["--test-o"], "'--test-o' (sbatch --test-only)"),
    (["-vAgrp-b"], "'-vAgrp-b' (sbatch --verbose)"),
    (["-Hp", "debug"], "'-Hp' (sbatch --hold)"),
    (["--export=ALL,SBATCH_ACCOUNT=x"], "'--export=ALL,SBATCH_ACCOUNT=x' (sbatch --export)"),
    (["-ojob.out"], "'-ojob.out' (sbatch --output)"),
    (["--time=5", "-N50"], "'-N50' (sbatch --nodes)"),
]


@pytest.mark.parametrize(("words", "named"), REPRODUCTIONS)
def test_flags_are_refused_by_what_sbatch_reads_not_by_how_they_are_written(words: list[str], named: str) -> None:
    with pytest.raises(sf.FlagError) as err:
        sf.FlagPolicy().check(words, account_by_policy=True)
    assert named in str(err.value) and "not allowed" in str(err.value)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["--bogus=1"], "'--bogus=1': sbatch has no such option"),
        (["--c=1"], "'--c=1' is ambiguous"),
        (["--exc"], "could be --exclude, --exclusive"),
        (["-p"], "'-p' needs a value"),
        (["--time"], "'--time' needs a value"),
        (["--contiguous=yes"], "--contiguous takes no value"),
        (["-y"], "sbatch has no option -y"),
        (["-tp"], None),  # -t with the value "p": fine as grammar
        (["script.sh"], "not an sbatch option"),
        (["--", "-p", "x"], "'--' is not an sbatch option"),
        (["-"], "not an sbatch option"),
        (["--comment=a\nb"], "control character"),
        (["--comment", "a\x00b"], "control character"),
    ],
)
def test_what_sbatch_would_refuse_or_take_as_the_script_is_refused(words: list[str], says: str | None) -> None:
    if says is None:
        assert sf.parse(words, source="pod") == [sf.Flag("time", "p", "-tp")]
        return
    with pytest.raises(sf.FlagError) as err:
        sf.parse(words, source="pod")
    assert says in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_accepted_flags_reach_sbatch_in_canonical_form() -> None:
    words = ["-p", "debug", "-t10", "--time", "5", "--part=x", "-k", "--no-k=yes", "--exclusi=user", "--tasks-per=2"]
    flags = sf.parse(words, source="pod")
    assert [f.argv() for f in flags] == [
        "--partition=debug",
        "--time=10",
        "--time=5",
        "--partition=x",
        "--no-kill",  # an optional value comes only attached: -k alone has none
        "--no-kill=yes",
        "--exclusive=user",
        "--ntasks-per-node=2",  # tasks-per-node is the same option (same val in slurm_opt.c)
    ]
    assert sf.parse(["-kp"], source="pod") == [sf.Flag("no-kill", "p", "-kp")]
    assert sf.parse(["-Ov", "-Aacct", "-A", "b", "--mem="], source="pod")[2:] == [
        sf.Flag("account", "acct", "-Aacct"),
        sf.Flag("account", "b", "-A b"),
        sf.Flag("mem", "", "--mem="),
    ]


def test_the_account_goes_to_site_policy_in_every_spelling() -> None:
    flags = sf.parse(["--acco=a", "-p", "x", "-vAb", "--account", "c"], source="pod")
    rest, asked = sf.take_account(flags)
    assert asked == "c" and [f.name for f in rest] == ["partition", "verbose"]
    assert sf.take_account(sf.parse(["-p", "x"], source="pod"))[1] is None


def test_the_site_changes_the_allowlist_by_canonical_names() -> None:
    config = SlurmConfig.model_validate({"allowed_pod_flags": ["nodes", "qos"]})
    assert config.allowed_pod_flags == {"nodes", "qos"}
    policy = sf.FlagPolicy(config.allowed_pod_flags)
    assert [f.argv() for f in policy.check(["-N2", "--qo=hi"], account_by_policy=False)] == ["--nodes=2", "--qos=hi"]
    with pytest.raises(sf.FlagError, match=r"'-p x' .* not allowed on this pool \(allowed: nodes, qos\)"):
        policy.check(["-p", "x"], account_by_policy=False)
    with pytest.raises(sf.FlagError, match="--account"):  # no accounting policy: the account must be allowed
        policy.check(["-Aother"], account_by_policy=False)
    assert SlurmConfig().allowed_pod_flags == sf.DEFAULT_ALLOWED
    for bad, says in (
        (["nodez"], "'nodez' is not an sbatch option name"),
        (["--nodes"], "'--nodes' is not an sbatch option name"),
        (["tasks-per-node"], "canonical name is 'ntasks-per-node'"),
        (["uid"], "'uid' cannot be allowed"),
        (["array"], "'array' cannot be allowed"),
        ("nodes", "must be a list"),
    ):
        with pytest.raises(ValidationError) as err:
            SlurmConfig.model_validate({"allowed_pod_flags": bad})
        assert says in str(err.value) and "allowed_pod_flags" in str(err.value)
    assert not sf.DEFAULT_ALLOWED & sf.RESERVED and sf.DEFAULT_ALLOWED <= sf.OPTION_NAMES


def test_the_sites_own_flags_are_parsed_too_and_a_flavors_are_the_sites() -> None:
    backend = SlurmBackend()
    with pytest.raises(sf.FlagError, match="pool sbatch flag '--arr=1-3'"):
        backend.configure(pb.BuildConfig(backends=pb.BackendOptions(slurm=pb.SlurmOptions(sbatch_flags=["--arr=1-3"]))))
    with pytest.raises(sf.FlagError, match="flavor big flag '-o/tmp/x'"):
        backend.configure(pb.BuildConfig(flavors={"big": pb.Flavor(backend_flags=["-o/tmp/x"])}))
    flavors = {"short": pb.Flavor(backend_flags=["--qos=short", "-N", "2"]), "none": pb.Flavor()}
    backend.configure(
        pb.BuildConfig(
            backends=pb.BackendOptions(slurm=pb.SlurmOptions(sbatch_flags=["--acco=physics", "-p", "batch"])),
            flavors=flavors,
        )
    )
    assert [f.argv() for f in backend._pool_flags] == ["--account=physics", "--partition=batch"]
    check = backend._flag_policy.check
    picked = check(["--qos=short", "-N", "2", "--time=5"], account_by_policy=False)
    assert [f.argv() for f in picked] == ["--qos=short", "--nodes=2", "--time=5"]
    for own in (["--qos=short"], ["--time=5", "--qos=short", "-N", "2"], ["--qos=short", "-N", "3"]):
        with pytest.raises(sf.FlagError, match="not allowed on this pool"):
            check(own, account_by_policy=False)


@pytest.mark.parametrize(
    "header",
    [
        "#!/bin/bash\n#SBATCH --uid=0\nset -u\n",
        "#!/bin/bash\n\n   #SBATCH --array=0-9\n",
        "#!/bin/bash\n#SLURM --array=0-9\n",
        "#!/bin/bash\n#PBS -t 0-9\n",
        "#!/bin/bash\n#bsub -J x\n",
    ],
)
def test_a_script_whose_header_sbatch_would_read_as_options_is_refused(header: str) -> None:
    with pytest.raises(sf.FlagError, match="sbatch directive"):
        sf.check_script_header(header.splitlines(keepends=True))


def test_directives_after_the_first_command_are_not_options() -> None:
    sf.check_script_header("#!/bin/bash\n# a comment\n\nset -u\n#SBATCH --uid=0\n".splitlines(keepends=True))


async def test_the_backend_refuses_before_running_sbatch(tmp_path: Path) -> None:
    policy = AccountingPolicy.model_validate({"default": {"group": "general"}})
    backend = SlurmBackend(SlurmConfig(sbatch=str(tmp_path / "no-sbatch"), accounting=policy))
    script = tmp_path / "job.sh"

    cases = [
        (("-vAgrp-b",), "#!/bin/bash\ntrue\n", "'-vAgrp-b' (sbatch --verbose)"),
        (("-Agrp-b",), "#!/bin/bash\ntrue\n", "pod flag --account: accounting group is set by the site"),
        (("--acco=other",), "#!/bin/bash\ntrue\n", "pod flag --account: accounting group is set by the site"),
    ]
    for flags, text, says in cases:
        script.write_text(text)
        job = JobSpec(uid="u", job_dir=tmp_path, script=script, backend_flags=flags, namespace="lab")
        with pytest.raises(SubmitRejected) as err:
            await backend.submit(job)
        assert says in str(err.value)
    assert backend.calls == 0


async def test_the_backend_checks_a_scripts_header_on_its_text_and_never_reads_it_back(tmp_path: Path) -> None:
    """``ReadsScriptOptions``: the submitter's door asks the backend about the request's script text
    (``engine.submission.validate_job``); ``submit`` reads nothing from disk, so a file changed behind the
    submitter's back (it never is: the job directory is the submitter's, 0700) goes to sbatch unread."""
    backend = SlurmBackend(SlurmConfig(sbatch=str(tmp_path / "no-sbatch")))
    assert isinstance(backend, ReadsScriptOptions)
    with pytest.raises(sf.FlagError, match=r"^job\.script: line '#SBATCH --uid=0' is an sbatch directive"):
        backend.check_script("#!/bin/bash\n#SBATCH --uid=0\ntrue\n", field="job.script")
    backend.check_script("#!/bin/bash\ntrue\n#SBATCH --uid=0\n", field="job.script")  # after the first command
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --uid=0\ntrue\n")
    with pytest.raises(BackendUnavailable, match="no-sbatch"):  # sbatch's turn: nothing read the file first
        await backend.submit(JobSpec(uid="u", job_dir=tmp_path, script=script, namespace="lab"))
    assert backend.calls == 1


def test_sbatch_runs_without_the_environment_it_would_read_as_options() -> None:
    env = {
        "PATH": "/usr/bin",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SBATCH_ACCOUNT": "other",
        "SBATCH_ARRAY_INX": "0-9",
        "SLURM_CLUSTERS": "elsewhere",
        "SLURM_HINT": "nomultithread",
        "INTERLINK_SUBMITTER_NATS__PASSWORD": "secret",
        "INTERLINK_JOB_DIR": "/j",
    }
    assert sf.sbatch_environment(env) == {
        "PATH": "/usr/bin",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "INTERLINK_JOB_DIR": "/j",
    }


# Words made of option-like pieces: long prefixes of real names, short bundles, values, junk.
_NAMES = sorted(sf.LONG_OPTIONS)
_word = st.one_of(
    st.builds(
        lambda n, k, eq, v: f"--{n[:k]}{eq}{v}",
        st.sampled_from(_NAMES),
        st.integers(0, 20),
        st.sampled_from(["", "="]),
        st.text(string.ascii_letters + "-=:,0", max_size=6),
    ),
    st.builds(lambda s: "-" + s, st.text(string.ascii_letters + "-0=", max_size=5)),
    st.text(string.printable, max_size=8),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(_word, max_size=6), allow=st.frozensets(st.sampled_from(sorted(sf.OPTION_NAMES - sf.RESERVED))))
def test_any_flag_string_parses_to_allowed_canonical_options_or_a_refusal(
    words: list[str], allow: frozenset[str]
) -> None:
    try:
        flags = sf.FlagPolicy(allow).check(words, account_by_policy=False)
    except sf.FlagError as exc:
        refusal = str(exc)
        assert "\n" not in refusal and refusal.startswith("pod flag")
        return
    assert all(f.name in allow and f.name in sf.OPTION_NAMES for f in flags)
    again = sf.parse([f.argv() for f in flags], source="pod")
    assert [(f.name, f.value) for f in again] == [(f.name, f.value) for f in flags], "canonical form reads the same"


def test_no_pod_string_reaches_the_header_sbatch_reads() -> None:
    """The gateway's script header is the site's text: pod strings (commands, annotations, pre-exec) come after
    its first command, so sbatch reads no directive from them."""
    hostile = "x\n#SBATCH --uid=0\n#SBATCH --array=0-9"
    annotations = {"note": hostile, "slurm-job.vk.io/pre-exec": hostile, "slurm-job.vk.io/flags": "--comment=x"}
    pod = pod_dict("0f3bd293-bef1-4af9-b11f-3af7d25b8f85", {"main": hostile}, annotations=annotations)
    script = render_job(pod, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)).script
    assert "#SBATCH --uid=0" in script  # it is there, below the header
    sf.check_script_header(script.splitlines(keepends=True))


def test_the_pool_announces_its_allowlist_and_the_gateway_refuses_early() -> None:
    """The submitter writes its allowlist into the BuildConfig it announces; the gateway's renderer then refuses a
    pod whose flags sbatch would read as another option (422 naming the annotation), before it reaches a pool."""
    bc = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)
    SlurmBackend(SlurmConfig.model_validate({"allowed_pod_flags": ["time", "qos"]})).configure(bc)
    slurm = bc.backends.slurm if bc.backends else None
    assert slurm is not None and slurm.allowed_pod_flags == ["qos", "time"]
    pod = pod_dict("0f3bd293-bef1-4af9-b11f-3af7d25b8f85", {"main": "true"})
    for text in ("--arr=0-2 --acco=other", "-t5 -vAx", "--ti=5 --nod 2"):
        pod["metadata"]["annotations"] = {"slurm-job.vk.io/flags": text}
        with pytest.raises(PodRejected) as err:
            render_job(pod, bc)
        assert err.value.field == 'metadata.annotations["slurm-job.vk.io/flags"]'
        assert "not allowed on this pool (allowed: qos, time)" in str(err.value) or "ambiguous" in str(err.value)
    pod["metadata"]["annotations"] = {"slurm-job.vk.io/flags": "-t5 --qo=hi --acco=x"}  # the account: the pool's policy
    assert render_job(pod, bc).backend_flags == ["-t5", "--qo=hi", "--acco=x"]
    older = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)  # a pool that announces nothing: checked at the pool
    pod["metadata"]["annotations"] = {"slurm-job.vk.io/flags": "--arr=0-2"}
    assert render_job(pod, older).backend_flags == ["--arr=0-2"]
