"""Rootful podman for one test session, configured in a temp dir (see /work/shared/reference/podman-local.md).

Nothing global is touched: storage, run root and the two configuration files live in the temp dir,
and ``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF`` point at them for the tests and every process
they start (gateway, submitter, job scripts). The image is a busybox root filesystem imported with
``podman import``: no registry is needed. :meth:`PodmanHost.leftovers` says what a test left behind.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

IMAGE = "localhost/interlink-bbox:latest"
IMAGE_WITH_ENTRYPOINT = "localhost/interlink-bbox-ep:latest"
"""The same root filesystem with ``ENTRYPOINT ["echo", "entrypoint"]`` and ``CMD ["cmd"]``."""
BUSYBOX = "/bin/busybox"
CONF_ENV = ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF")


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` (from /proc/self/mountinfo; octal escapes left as they are)."""
    prefix = str(root)
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == prefix or point.startswith(prefix + "/"):
            out.append(point)
    return out


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of processes whose argv mentions ``text`` (conmon, podman, runc of this session)."""
    found = []
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in argv:
            found.append(argv.replace(b"\0", b" ").decode(errors="replace").strip())
    return found


class PodmanHost:
    def __init__(self, podman: str) -> None:
        self.podman = podman
        self._tmp = tempfile.TemporaryDirectory(prefix="inl-podman-")
        self.root = Path(self._tmp.name)
        self.storage = self.root / "storage"
        self.graphroot = self.storage / "graph"
        self.env = {
            "CONTAINERS_CONF": str(self.root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
        }
        self._saved: dict[str, str | None] = {}

    def start(self) -> None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        (self.root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{self.graphroot}"\nrunroot = "{self.storage}/run"\n'
        )
        # runc (crun refuses these hybrid cgroups), explicit ulimits (no CAP_SYS_RESOURCE), no network
        # namespace (nothing left in iptables), never pull (no registry: a missing image fails at once).
        (self.root / "containers.conf").write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
            'netns = "none"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'events_logger = "file"\n'
            'cgroup_manager = "cgroupfs"\n'
            'pull_policy = "never"\n'
            f'tmp_dir = "{self.storage}/libpod-tmp"\n'
        )
        for key in CONF_ENV:
            self._saved[key] = os.environ.get(key)
            os.environ[key] = self.env[key]
        self._import_image()

    def _import_image(self) -> None:
        rootfs = self.root / "rootfs"
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            (rootfs / d).mkdir(parents=True)
        shutil.copy(BUSYBOX, rootfs / "bin" / "busybox")
        applets = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True).stdout.split()
        for applet in applets:
            if applet != "busybox":
                (rootfs / "bin" / applet).symlink_to("busybox")
        changes = ["--change", 'ENTRYPOINT ["echo", "entrypoint"]', "--change", 'CMD ["cmd"]']
        for image, extra in ((IMAGE, []), (IMAGE_WITH_ENTRYPOINT, changes)):
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            subprocess.run(
                [self.podman, "import", *extra, "-", image], stdin=tar.stdout, check=True, capture_output=True
            )
            assert tar.stdout is not None
            tar.stdout.close()
            assert tar.wait() == 0
        shutil.rmtree(rootfs)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.podman, *args], check=check, capture_output=True, text=True, timeout=120)

    def containers(self, label: str | None = None) -> list[dict[str, Any]]:
        """``podman ps --all`` as JSON, optionally filtered by one ``key=value`` label."""
        args = ["ps", "--all", "--format", "json"]
        if label is not None:
            args += ["--filter", f"label={label}"]
        return list(json.loads(self.run(*args).stdout or "[]"))

    def leftovers(self, settle: float = 30.0) -> list[str]:
        """What the tests left: containers, and processes of this session (conmon of a container).

        A container's conmon outlives its removal by a moment (it runs podman's exit command): processes
        get ``settle`` seconds to end before they count."""
        found = [f"container {c['Id'][:12]} {c.get('Labels') or {}}" for c in self.containers()]
        deadline = time.monotonic() + settle
        while (procs := _processes_mentioning(str(self.storage))) and time.monotonic() < deadline:
            time.sleep(0.2)
        found += [f"process {p}" for p in procs]
        return found

    def stop(self) -> list[str]:
        """Clean up everything; return what was left behind by the tests (and what clean-up could not remove)."""
        left = self.leftovers()
        self.run("rm", "--all", "--force", "--time", "0", check=False)
        self.run("rmi", "--all", "--force", check=False)
        for point in sorted(_mounts_under(self.root), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        after = [f"mount {m}" for m in _mounts_under(self.root)]
        after += [f"process after clean-up {p}" for p in _processes_mentioning(str(self.storage))]
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._tmp.cleanup()
        return left + after
