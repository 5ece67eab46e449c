"""What a shell job gets of the submitter's environment (``shell.job_environment``): the launcher, whose
environment every runner and ``job.sh`` inherits, gets only the variables the site lists; the job then has PATH,
a listed variable and its ``INTERLINK_JOB_DIR``, and none of the secrets in the submitter's environment. A real
launcher and bash, the job's own ``env``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.job_environment import DEFAULT_JOB_ENVIRONMENT
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.shell.config import ShellConfig
from interlink_nats.submitters.core.backend import JobSpec
from interlink_nats.submitters.testing import wait_for
from pydantic import ValidationError

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "admin-cloud-secret-51",
    "HTTPS_PROXY": "http://admin:proxy-password-52@proxy.example:3128",
    "INTERLINK_SUBMITTER_NATS__PASSWORD": "submitter-setting-53",
    "HOME": "/home/submitters-admin-54",
}
DUMP = '#!/bin/bash\nenv > "$INTERLINK_JOB_DIR/env.tmp" && mv "$INTERLINK_JOB_DIR/env.tmp" "$INTERLINK_JOB_DIR/env"\n'


def test_the_setting_is_checked_with_one_line_naming_it() -> None:
    assert ShellConfig().job_environment == DEFAULT_JOB_ENVIRONMENT
    with pytest.raises(ValidationError, match="job_environment") as err:
        ShellConfig.model_validate({"job_environment": ["*"]})
    assert "'*' is not an environment variable name" in str(err.value)


async def test_a_shell_job_sees_none_of_the_submitters_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**SECRETS, "SITE_SCRATCH": "/scratch/site-55"}.items():
        monkeypatch.setenv(key, value)
    config = ShellConfig.model_validate({"job_environment": [*DEFAULT_JOB_ENVIRONMENT, "SITE_*", "INTERLINK_*"]})
    backend = ShellBackend(max_concurrent=1, job_environment=config.job_environment)
    backend.configure(pb.BuildConfig())
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / layout.SCRIPT_NAME).write_text(DUMP)
    await backend.start()
    try:
        await backend.submit(JobSpec("u1", job_dir, job_dir / layout.SCRIPT_NAME))

        async def dumped() -> dict[str, str] | None:
            path = job_dir / "env"
            return dict(line.split("=", 1) for line in path.read_text().splitlines()) if path.exists() else None

        env = await wait_for(dumped, timeout=60, what="the job's env")
    finally:
        await backend.close()
    leaked = {k: v for k, v in env.items() if k in SECRETS or any(s in v for s in SECRETS.values())}
    assert not leaked, leaked
    assert env["PATH"] == os.environ["PATH"] and env["SITE_SCRATCH"] == "/scratch/site-55"
    assert env[layout.JOB_DIR_ENV] == str(job_dir)
