"""A real one-node Slurm (Debian slurm-wlm + munge) in a temp dir, on free ports: for the slurm tests.

Follows shared/reference/slurm-local.md (beside the project): no systemd, no /etc edits; every client call
needs ``SLURM_CONF`` (pass ``cluster.env``). Teardown cancels jobs first (running jobs would
otherwise survive the daemons), then stops slurmd/slurmctld, kills our own slurmstepds (found
by SLURM_CONF in their environment, never by name alone) and stops munged.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")

_CONF = """\
ClusterName=test
SlurmctldHost=localhost
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.sock
CredType=cred/munge
SlurmctldPort={port1}
SlurmdPort={port2}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool{per_node}
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd{per_node}.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd{per_node}.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/log/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=300
KillWait=2
OverTimeLimit=0
SchedulerParameters={scheduler_parameters}
{node_lines}
PartitionName=debug Nodes={node_names} Default=YES MaxTime=INFINITE State=UP
"""
_MULTI = """\
SlurmdParameters=config_overrides
"""
"""Several slurmds on this one host (``nodes`` > 1), each its own node on its own port: the CPUs and memory
are the configuration's (``config_overrides``), not what slurmd finds, so they may add up to more than the host."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    def __init__(self, nodes: int = 1, cpus: int | None = None, *, queue_depth: int | None = None) -> None:
        """One node ``localnode`` with this host's CPUs (the default), or ``nodes`` nodes ``node1``... of ``cpus``.

        ``queue_depth``: ``SchedulerParameters=default_queue_depth``, how many jobs (each task of an array counts)
        slurmctld's event-triggered scheduling considers; None keeps Slurm's default (100)."""
        self.scheduler_parameters = "batch_sched_delay=0,sched_min_interval=0" + (
            f",default_queue_depth={queue_depth}" if queue_depth else ""
        )
        self.dir = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
        self.conf = self.dir / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.cpus = cpus or os.cpu_count() or 1
        self.mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8) // nodes
        self.nodes = ["localnode"] if nodes == 1 else [f"node{i}" for i in range(1, nodes + 1)]
        self._procs: list[subprocess.Popen[bytes]] = []

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)

    def start(self) -> SlurmCluster:
        d = self.dir
        d.chmod(0o755)
        for sub in ("munge", "state", "spool", "log"):
            (d / sub).mkdir(mode=0o755)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        user = pwd.getpwuid(os.getuid()).pw_name
        multi = len(self.nodes) > 1
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={self.cpus} RealMemory={self.mem_mb}"
            + (f" Port={_port()}" if multi else "")
            for n in self.nodes
        )
        conf = _CONF.format(
            d=d,
            user=user,
            port1=_port(),
            port2=_port(),
            per_node="-%n" if multi else "",
            node_lines=node_lines,
            node_names=",".join(self.nodes),
            scheduler_parameters=self.scheduler_parameters,
        )
        # One node declaring more CPUs than the host has (a benchmark's) also needs config_overrides.
        self.conf.write_text(conf + (_MULTI if multi or self.cpus > (os.cpu_count() or 1) else ""))
        for n in self.nodes if multi else ():
            (d / f"spool-{n}").mkdir(mode=0o755)
        m = d / "munge"
        subprocess.run(
            [
                "munged",
                f"--key-file={key}",
                f"--socket={m}/munge.sock",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            ],
            check=True,
            timeout=30,
        )
        daemons = [["slurmctld", "-D", "-c"], *(["slurmd", "-D", "-N", n] for n in self.nodes)]
        for cmd in daemons:
            with (d / "log" / f"{'-'.join(c for c in cmd if not c.startswith('-'))}.out").open("wb") as out:
                self._procs.append(
                    subprocess.Popen(
                        [*cmd, "-f", str(self.conf)],
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.run("sinfo", "-h", "-N", "-o", "%t").stdout.split() == ["idle"] * len(self.nodes):
                return self
            time.sleep(0.2)
        tail = (d / "log" / "slurmctld.out").read_text()[-3000:]
        self.stop()
        raise RuntimeError(f"slurm did not come up: {tail}")

    def stop(self) -> None:
        self.run("scancel", "--full", "--partition=debug")
        for _ in range(40):
            if not self.run("squeue", "-h").stdout.strip():
                break
            time.sleep(0.25)
        for p in self._procs:
            p.terminate()
        for p in self._procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs = []
        marker = f"SLURM_CONF={self.conf}".encode()
        for pid in subprocess.run(["pgrep", "-x", "slurmstepd"], capture_output=True, text=True).stdout.split():
            try:
                if marker in Path(f"/proc/{pid}/environ").read_bytes():
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        self._stop_munged()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_munged(self) -> None:
        """TERM munged and wait until it is gone: it writes its seed file into our dir as it exits, and a removal
        before that left ``munge/munged.seed`` behind in /tmp after every cluster."""
        with contextlib.suppress(OSError, ValueError):
            pidfd = os.pidfd_open(int((self.dir / "munge" / "munged.pid").read_text().strip()))
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGTERM)
                if not select.select([pidfd], [], [], 30)[0]:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    select.select([pidfd], [], [], 30)
            finally:
                os.close(pidfd)


@contextlib.contextmanager
def slurm_for_tests(nodes: int = 1, cpus: int | None = None) -> Iterator[SlurmCluster]:
    """A started cluster whose ``SLURM_CONF`` this process's commands inherit (the backend's sbatch, squeue...),
    put back as it was afterwards. Without Slurm the run fails (``missing_service``), never skips silently."""
    from conftest import missing_service

    missing = missing_binaries()
    if missing:
        missing_service(f"Slurm ({', '.join(missing)}; apt-get install -y slurm-wlm munge)")
    cluster = SlurmCluster(nodes=nodes, cpus=cpus).start()
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        cluster.stop()
