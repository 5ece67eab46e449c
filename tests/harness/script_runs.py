"""Running rendered scripts for real with bash and runtime ``none``, for the ``test_scripts_exec*`` tests.

A pod's containers are small Python programs (``py``, ``DUMP``); ``run`` renders and runs the script in a job
directory and the helpers read back what it left there (exit codes, logs, dumps). The ``job_dir`` fixture is
imported by name by each test module.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import render_job
from interlink_nats.submitters.jobdirs.files import prepare_job_dir
from storage_sites import OPEN_HOST_PATHS

NONE = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE, storage=OPEN_HOST_PATHS)
PY = sys.executable
BASH = shutil.which("bash") or "/bin/bash"

# A container program: dumps argv, env, cwd and every file of its rootfs (content + mode) as JSON.
DUMP = r"""
import json, os, sys, base64
roots = [os.environ["INTERLINK_ROOTFS"]]
files = {}
for r in roots:
    for d, _, names in os.walk(r, followlinks=True):
        for n in names:
            p = os.path.join(d, n)
            files[os.path.relpath(p, r)] = {"b64": base64.b64encode(open(p, "rb").read()).decode(),
                                            "mode": os.stat(p).st_mode & 0o777}
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "files": files}))
"""


def pod(
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "00000000-0000-0000-0000-000000000001",
                "labels": {"app": "x"},
            },
            "spec": {"containers": containers, "initContainers": init or [], "volumes": volumes or [], **spec},
        },
        "container": [],
    }


def py(name: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "unused", "command": [PY, "-c", code], "args": list(args), **extra}


def run(
    job_dir: Path,
    data: dict[str, Any],
    timeout: float = 60,
    *,
    prepared: bool = False,
    path: str = "",
    env: dict[str, str] | None = None,
) -> int:
    """Run the script in ``job_dir``: written alone (the script makes its own layout), or ``prepared`` by
    the submitter's ``prepare_job_dir``; ``path`` replaces PATH; ``env`` adds to the environment."""
    job = render_job(data, NONE)
    script = job.script
    if prepared:
        prepare_job_dir(job_dir, script, job.layout)
    else:
        (job_dir / layout.SCRIPT_NAME).write_text(script)
    full = {**os.environ, layout.JOB_DIR_ENV: str(job_dir), **({"PATH": path} if path else {}), **(env or {})}
    proc = subprocess.run(
        [BASH, layout.SCRIPT_NAME], cwd=job_dir, env=full, timeout=timeout, capture_output=True, text=True
    )
    return proc.returncode


def exit_code(job_dir: Path, name: str) -> int:
    return int(layout.exit_path(job_dir, name).read_text())


def log(job_dir: Path, name: str) -> str:
    return layout.log_path(job_dir, name).read_text()


def dump(job_dir: Path, name: str) -> dict[str, Any]:
    return json.loads(log(job_dir, name).strip().splitlines()[-1])


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    return d


def volume_pod(tmp_path: Path) -> dict[str, Any]:
    host = tmp_path / "host"
    host.mkdir()
    (host / "h.txt").write_text("from host")
    mounts = [
        {"name": "cfg", "mountPath": "/etc/cfg"},
        {"name": "items", "mountPath": "/etc/items"},
        {"name": "sec", "mountPath": "/sec", "readOnly": True},
        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        {"name": "downward", "mountPath": "/info"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "host", "mountPath": "/host"},
        {"name": "cfg", "mountPath": "/app/app.conf", "subPath": "app.conf"},
    ]
    c = py("main", DUMP, volumeMounts=mounts)
    data = pod(
        [c],
        volumes=[
            {"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 0o644}},
            {
                "name": "items",
                "configMap": {
                    "name": "app-config",
                    "items": [
                        {"key": "app.conf", "path": "sub/dir/renamed.conf", "mode": 0o400},
                        {"key": "blob", "path": "blob.bin"},
                    ],
                },
            },
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o644}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {
                "name": "downward",
                "downwardAPI": {
                    "items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                    ]
                },
            },
            {"name": "scratch", "emptyDir": {}},
            {"name": "host", "hostPath": {"path": str(host), "type": "Directory"}},
            {"name": "unused", "secret": {"secretName": "creds"}},
        ],
    )
    data["container"] = [
        {
            "name": "main",
            "configMaps": [
                {
                    "metadata": {"name": "app-config"},
                    "data": {"app.conf": "x=1\n"},
                    "binaryData": {"blob": base64.b64encode(b"\x00\xff\x01").decode()},
                }
            ],
            "secrets": [
                {
                    "metadata": {"name": "creds"},
                    "data": {
                        "password": base64.b64encode(b"hunter2\n").decode(),
                        "key.bin": base64.b64encode(b"\x00\x01").decode(),
                    },
                }
            ],
            "projectedvolumemaps": [
                {
                    "metadata": {"name": "token"},
                    "data": {"token": "eyJ.tok", "ca.crt": "-----BEGIN-----\nX\n", "namespace": "ns"},
                }
            ],
        }
    ]
    return data


def only_commands(tmp_path: Path, *names: str) -> str:
    """A PATH with only these commands: a script that needs another one fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    return str(bin_dir)
