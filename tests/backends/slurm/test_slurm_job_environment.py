"""What a Slurm job gets of the submitter's environment (``slurm.job_environment``): sbatch exports its whole
environment to the job (``--export=ALL``, its default), so the backend gives sbatch only the variables the site
lists, ``SLURM_CONF`` and what interlink-nats sets. On a real one-node Slurm, a job's own ``env`` has PATH, a
listed variable and ``INTERLINK_JOB_DIR``, and none of the secrets in the submitter's environment; with a stand-in
sbatch, every one of the three sbatch calls (single, array, gang) gets the same filtered environment.
"""

from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.job_environment import DEFAULT_JOB_ENVIRONMENT, allows
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend, SlurmConfig
from interlink_nats.submitters.core.backend import ArraySpec, GangSpec, JobSpec
from interlink_nats.submitters.testing import wait_for
from pydantic import ValidationError
from slurm_cluster import SlurmCluster, slurm_for_tests

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "admin-cloud-secret-41",
    "HTTPS_PROXY": "http://admin:proxy-password-42@proxy.example:3128",
    "VAULT_TOKEN": "hvs.admin-vault-token-43",
    "INTERLINK_SUBMITTER_NATS__PASSWORD": "submitter-setting-44",
    "SBATCH_ACCOUNT": "from-env",
    "HOME": "/home/submitters-admin-46",
}
LISTED = {"SITE_SCRATCH": "/scratch/site-45"}
SITE_LIST = [*DEFAULT_JOB_ENVIRONMENT, "SITE_*", "SBATCH_ACCOUNT", "INTERLINK_SUBMITTER_*"]
"""What the test's site lists: the default, a prefix, and two it may not pass (they are removed even if listed)."""

# The job writes its own environment, then renames it: the test reads it whole or not at all.
DUMP = '#!/bin/bash\nenv > "$INTERLINK_JOB_DIR/env.tmp" && mv "$INTERLINK_JOB_DIR/env.tmp" "$INTERLINK_JOB_DIR/env"\n'


@pytest.fixture
def submitters_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**SECRETS, **LISTED}.items():
        monkeypatch.setenv(key, value)


def member(root: Path, name: str) -> JobSpec:
    uid = f"{name}-{uuid.uuid4()}"
    job_dir = root / uid
    job_dir.mkdir(parents=True)
    script = job_dir / layout.SCRIPT_NAME
    script.write_text(DUMP)
    script.chmod(0o700)
    return JobSpec(uid, job_dir, script, namespace="default", name=name)


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def assert_only_what_the_site_chose(env: dict[str, str], *, slurm_conf: str) -> None:
    leaked = {k: v for k, v in env.items() if any(s in v for s in SECRETS.values()) or k in SECRETS}
    assert not leaked, leaked
    assert env.get("PATH") == os.environ["PATH"], "PATH is in the default list"
    assert env.get("SITE_SCRATCH") == LISTED["SITE_SCRATCH"], "listed by the site's prefix SITE_*"
    assert env.get("SLURM_CONF") == slurm_conf, "sbatch needs it to find its cluster"


def test_the_setting_is_checked_with_one_line_naming_it() -> None:
    assert SlurmConfig().job_environment == DEFAULT_JOB_ENVIRONMENT
    assert SlurmConfig.model_validate({"job_environment": ["PATH", "SITE_*"]}).job_environment == ("PATH", "SITE_*")
    for bad, says in (("PATH", "must be a list"), (["*"], "'*' is not"), (["A=B"], "'A=B' is not"), ([""], "'' is")):
        with pytest.raises(ValidationError) as err:
            SlurmConfig.model_validate({"job_environment": bad})
        assert says in str(err.value) and "job_environment" in str(err.value), str(err.value)


async def test_every_sbatch_call_gets_only_the_listed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, submitters_environment: None
) -> None:
    """Single, array and gang: each sbatch (a stand-in that records its environment) gets the same filtered one."""
    monkeypatch.setenv("SLURM_CONF", "/etc/site/slurm.conf")
    seen = tmp_path / "seen"
    seen.mkdir()
    sbatch = tmp_path / "sbatch"
    where = shlex.quote(str(seen))
    sbatch.write_text(f'#!/bin/bash\nn=$(ls {where} | wc -l)\nenv > {where}/"$n"\necho 1$n\n')
    sbatch.chmod(0o755)
    backend = SlurmBackend(SlurmConfig.model_validate({"sbatch": str(sbatch), "job_environment": SITE_LIST}))
    single = member(tmp_path / "jobs", "single")
    await backend.submit(single)
    members = tuple(member(tmp_path / "jobs", f"m{i}") for i in range(2))
    await backend.submit_array(ArraySpec("array-uid", members, tmp_path / "arrays" / "a", namespace="default"))
    gang = GangSpec("gang-uid", "g", tmp_path / "gangs" / "g", members, namespace="default")
    await backend.submit_gang(gang)
    envs = [parse_env((seen / str(n)).read_text()) for n in range(3)]
    for env in envs:
        assert_only_what_the_site_chose(env, slurm_conf="/etc/site/slurm.conf")
        assert not {k for k in env if k.startswith(("SBATCH_", "INTERLINK_SUBMITTER_"))}, "removed even if listed"
    assert envs[0][layout.JOB_DIR_ENV] == str(single.job_dir), "what interlink-nats sets for the job"
    ours = {"SLURM_CONF", layout.JOB_DIR_ENV, layout.JOB_REMOVES_LAYOUT_ENV}
    # bash adds PWD, SHLVL and _ to the environment it records; the default list's names (CONTAINERS_CONF...) may be
    # in this process's environment from another test's podman host
    extra = {k for env in envs for k in env if k not in ours and not allows(SITE_LIST, k)} - {"PWD", "SHLVL", "_"}
    assert not extra, extra


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


@pytest.mark.slurm
@pytest.mark.timeout(300)
async def test_a_slurm_job_sees_none_of_the_submitters_secrets(
    slurm: SlurmCluster, tmp_path: Path, submitters_environment: None
) -> None:
    """A job and a job array's task on a real Slurm: their ``env`` has PATH, the site's listed variable and
    INTERLINK_JOB_DIR, and no secret of the submitter's environment (before, sbatch's --export=ALL passed it all)."""
    backend = SlurmBackend(SlurmConfig.model_validate({"job_environment": SITE_LIST}))
    single = member(tmp_path / "jobs", "single")
    await backend.submit(single)
    task = member(tmp_path / "jobs", "task")
    await backend.submit_array(ArraySpec(f"array-{uuid.uuid4()}", (task,), tmp_path / "arrays" / "a"))

    async def dumped(job: JobSpec) -> dict[str, str] | None:
        path = job.job_dir / "env"
        return parse_env(path.read_text()) if path.exists() else None

    for job in (single, task):
        env = await wait_for(lambda job=job: dumped(job), timeout=120, interval=0.2, what=f"{job.name}'s env")
        assert_only_what_the_site_chose(env, slurm_conf=str(slurm.conf))
        assert env[layout.JOB_DIR_ENV] == str(job.job_dir)
        assert "SBATCH_ACCOUNT" not in env and "INTERLINK_SUBMITTER_NATS__PASSWORD" not in env
