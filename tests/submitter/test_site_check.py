"""``submitter check`` and ``gateway check`` as an operator runs them: a table, exit 0 or 2, nothing started.

Before: the install guide's check step ran ``submitter run``, which took the pool's jobs and never exited, and a
site whose runtime was missing started fine while every pod exited 127. Each test runs the command against a
real nats-server started from what ``nats-config`` writes (tests/harness/tls.py), with real programs on a real PATH.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from slurm_cluster import SlurmCluster, slurm_for_tests
from tls import SecureStack, stack_fixture

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 90.0
SUBMIT_A = "interlink_nats.v1.SubmitterService.Submit.a"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("site-check"))


def site(tmp_path: Path, stack: SecureStack, *, seed: str = "pool-a", extra: str = "") -> Path:
    path = tmp_path / "a.yaml"
    path.write_text(
        f"pool: a\nstate_dir: {tmp_path / 'state'}\n"
        f"nats: {{url: '{stack.tls_url}', tls_ca_file: {stack.tls.ca_cert}, "
        f"nkey_seed_file: {stack.written.seed_files[seed]}}}\n{extra}"
    )
    return path


def check(args: list[str], env: dict[str, str] | None = None) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit code, the table's rows by name → (status, detail), stderr); never a traceback."""
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=DEADLINE_S, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        name, status, detail = _row(line)
        rows[name] = (status, detail)
    return result.returncode, rows, result.stdout + result.stderr


def _row(line: str) -> tuple[str, str, str]:
    parts = [part for part in line.split("  ") if part.strip()]
    return parts[0].strip(), parts[1].strip(), "  ".join(parts[2:]).strip()


def no_process_left(marker: str) -> None:
    """No process whose command line names ``marker`` (the site file) is alive: the check started nothing."""
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                left.append(cmdline)
    assert not left, left


def test_a_good_shell_site_passes_and_takes_nothing(stack: SecureStack, tmp_path: Path) -> None:
    path = site(tmp_path, stack, extra="backend: shell\nbuild_config: {runtime: none}\n")

    async def watch() -> list[str]:
        seen: list[str] = []

        async def announced(msg: Msg) -> None:
            seen.append(msg.subject)

        nc = await stack.connect("gateway")
        await nc.subscribe("interlink.config.>", cb=announced)
        await nc.flush()
        code, rows, out = await asyncio.to_thread(check, ["submitter", "check", "--config", str(path)])
        await nc.flush()
        await nc.close()
        assert code == 0, out
        assert rows[f"nats subscribe {SUBMIT_A}"][0] == "ok", out
        assert rows["runtime"][0] == "ok" and rows["command bash"][0] == "ok", out
        assert rows["shell capacity"][0] == "ok" and rows["nats connect"][0] == "ok", out
        return seen

    assert asyncio.run(watch()) == []  # nothing announced
    assert not (tmp_path / "state").exists()  # no registry, no job directory, no lock
    no_process_left(str(path))


def test_a_server_without_jetstream_fails_the_stream_row_saying_so(tmp_path: Path) -> None:
    """The row said ``lookup failed: ServiceUnavailableError: nats: ServiceUnavailableError: code=None ...``."""
    from interlink_nats.services.ops.nats_server import NatsServerProcess

    with NatsServerProcess(jetstream=False, work_dir=tmp_path / "nats") as server:
        path = tmp_path / "a.yaml"
        path.write_text(
            f"pool: a\nstate_dir: {tmp_path / 'state'}\nnats: {{url: '{server.url}'}}\n"
            "backend: shell\nbuild_config: {runtime: none}\n"
        )
        code, rows, out = check(["submitter", "check", "--config", str(path)])
    assert code == 2, out
    status, detail = rows["nats stream INTERLINK_EVENTS"]
    assert status == "FAILED" and detail.startswith("the NATS server has no JetStream"), out


def test_a_missing_sbatch_fails_naming_it_and_its_setting(stack: SecureStack, tmp_path: Path) -> None:
    path = site(tmp_path, stack, extra="backend: slurm\nslurm: {sbatch: /opt/nowhere/sbatch}\n")
    code, rows, out = check(["submitter", "check", "--config", str(path)])
    assert code == 2, out
    status, detail = rows["command /opt/nowhere/sbatch"]
    assert status == "FAILED" and "does not exist" in detail and "slurm.sbatch" in detail, out


def test_a_missing_runtime_is_named(stack: SecureStack, tmp_path: Path) -> None:
    """apptainer not on PATH: every pod of a shell pool would exit 127, so the check fails on it; the start
    says it in one line (the jobs run it, so the start warns rather than refuses)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (bin_dir / "bash").symlink_to(bash)
    env = {**os.environ, "PATH": str(bin_dir)}
    path = site(tmp_path, stack, extra="backend: shell\nbuild_config: {runtime: apptainer}\n")
    code, rows, out = check(["submitter", "check", "--config", str(path)], env=env)
    assert code == 2, out
    status, detail = rows["runtime"]
    assert status == "FAILED" and "apptainer" in detail and "build_config.executable" in detail, out


def test_another_pools_identity_fails_the_nats_row_naming_the_subject(stack: SecureStack, tmp_path: Path) -> None:
    path = site(tmp_path, stack, seed="pool-b", extra="backend: shell\nbuild_config: {runtime: none}\n")
    code, rows, out = check(["submitter", "check", "--config", str(path)])
    assert code == 2, out
    status, detail = rows[f"nats subscribe {SUBMIT_A}"]
    assert status == "FAILED" and SUBMIT_A in detail and stack.cred("pool-b").public_key in detail, out


def gateway_file(tmp_path: Path, stack: SecureStack, seed: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"nats: {{url: '{stack.tls_url}', tls_ca_file: {stack.tls.ca_cert}, "
        f"nkey_seed_file: {stack.written.seed_files[seed]}}}\n"
    )
    return path


def test_gateway_check_passes_with_its_identity(stack: SecureStack, tmp_path: Path) -> None:
    code, rows, out = check(["gateway", "check", "--config", str(gateway_file(tmp_path, stack, "gateway"))])
    assert code == 0, out
    assert rows["nats subscribe interlink.config.*"][0] == "ok", out


def test_gateway_check_with_a_pools_identity_fails_naming_the_subject(stack: SecureStack, tmp_path: Path) -> None:
    code, rows, out = check(["gateway", "check", "--config", str(gateway_file(tmp_path, stack, "pool-a"))])
    assert code == 2, out
    status, detail = rows["nats subscribe interlink.config.*"]
    assert status == "FAILED" and "interlink.config.*" in detail and "not the gateway's credentials" in detail, out


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_for_tests() as cluster:
        yield cluster


@pytest.mark.slurm
def test_a_real_slurm_site_answers_and_sacct_without_slurmdbd_is_named(
    stack: SecureStack, slurm: SlurmCluster, tmp_path: Path
) -> None:
    """squeue and sinfo run once and answer; sacct asked for (use_sacct) on a cluster without slurmdbd fails,
    naming the setting; no job reaches the queue."""
    extra = "backend: slurm\nslurm: {partition: debug}\nbuild_config: {runtime: none, slurm: {use_sacct: %s}}\n"
    code, rows, out = check(["submitter", "check", "--config", str(site(tmp_path, stack, extra=extra % "true"))])
    assert code == 2, out
    assert rows["slurm squeue"][0] == "ok" and rows["slurm sinfo"][0] == "ok", out
    status, detail = rows["slurm sacct"]
    assert status == "FAILED" and "accounting storage" in detail and "use_sacct" in detail, out

    code, rows, out = check(["submitter", "check", "--config", str(site(tmp_path, stack, extra=extra % "false"))])
    assert code == 0 and "slurm sacct" not in rows, out
    assert slurm.run("squeue", "-h", "-o", "%i").stdout.strip() == ""  # nothing submitted


def test_the_start_says_a_missing_runtime_in_one_line(stack: SecureStack, tmp_path: Path) -> None:
    """``submitter run`` with apptainer off PATH: one warning naming it before it serves (it used to say
    nothing: every pod then exited 127, visible only in the pod's log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (bin_dir / "bash").symlink_to(bash)
    path = site(tmp_path, stack, extra="backend: shell\nbuild_config: {runtime: apptainer}\n")
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, "submitter", "run", "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": str(bin_dir)},
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "serving pool a" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "serving pool a" in log.read_text(), log.read_text()
    finally:
        proc.terminate()
        proc.wait(DEADLINE_S)
    said = [line for line in log.read_text().splitlines() if "apptainer" in line]
    assert len(said) == 1 and "apptainer" in said[0] and "build_config.executable" in said[0], log.read_text()


def test_the_runtime_a_build_config_names_and_where_its_absence_fails() -> None:
    """The renderer's choice (``executable``, else the runtime's name; unset is apptainer; none needs none), FAILED
    only where the jobs run on this host."""
    from interlink_nats.gen.interlink_nats import v1 as pb
    from interlink_nats.kernel.checks import FAILED, OK, WARNING, Check, exit_code, table
    from interlink_nats.submitters.backends.commands import runtime_check, runtime_command, start_warnings

    default = runtime_command(pb.BuildConfig())
    assert default is not None and default.program == "apptainer"
    podman = runtime_command(pb.BuildConfig(runtime=pb.ContainerRuntime.PODMAN, executable="/opt/podman/bin/podman"))
    assert podman is not None and podman.program == "/opt/podman/bin/podman"
    assert runtime_command(pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)) is None
    missing = pb.BuildConfig(runtime=pb.ContainerRuntime.SINGULARITY, executable="/nonexistent/singularity")
    assert runtime_check("shell", missing).status == FAILED
    assert runtime_check("slurm", missing).status == WARNING
    assert start_warnings("slurm", missing) == [f"runtime: {runtime_check('slurm', missing).detail}"]
    assert start_warnings("shell", pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)) == []

    rows = [Check("a", OK, "x"), Check("longer", WARNING, "y")]
    assert table(rows) == "a       ok       x\nlonger  warning  y\n"
    assert exit_code(rows) == 0 and exit_code([*rows, Check("b", FAILED, "z")]) == 2


def test_an_htcondor_site_runs_condor_q_once(stack: SecureStack, tmp_path: Path) -> None:
    """The stand-in condor tools (tests/harness/htcondor_standin.py; no HTCondor daemon runs here): condor_q and
    condor_status asked once each, condor_submit never."""
    import htcondor_standin as standin

    env = {**os.environ, **standin.install(tmp_path / "bin", tmp_path / "condor")}
    extra = "backend: htcondor\nhtcondor: {use_condor_status: true}\nbuild_config: {runtime: none}\n"
    code, rows, out = check(["submitter", "check", "--config", str(site(tmp_path, stack, extra=extra))], env=env)
    assert code == 0, out
    assert rows["htcondor condor_q"][0] == "ok" and rows["htcondor condor_status"][0] == "ok", out
    asked = [call.split()[0] for call in standin.calls(tmp_path / "condor")]
    assert sorted(asked) == ["condor_q", "condor_status"], asked
