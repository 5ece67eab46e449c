"""Site storage under real podman (``pytest -m podman``): a claim bound with ``-v`` is written by one pod and read
back by the next of its namespace; ``readOnly`` (the pod's, or forced by the site's rule) makes a write fail;
``subPath`` binds the directory inside the claim; a symlink planted in the claim is refused before podman runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_runs import RT, Job, Runtime, make_pod, sh
from container_runs import start_job as start_job
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from podman_host import IMAGE, PodmanHost

pytestmark = pytest.mark.podman

Start = Callable[[Runtime, dict[str, Any]], Job]


def podman_site(podman_host: PodmanHost, root: Path, *, forced_read_only: bool = False) -> Runtime:
    """Podman; claims of lab-* at ``<root>/{namespace}/{claim}`` (made by the job); read-only when forced."""
    rule = pb.ClaimRule(
        namespace="lab-*",
        path=f"{root}/{{namespace}}/{{claim}}",
        create=True,
        create_mode=0o770,
        read_only=forced_read_only,
    )
    bc = pb.BuildConfig(runtime=RT.PODMAN, storage=pb.StoragePolicy(claims=[rule]))

    def left(uid: str) -> list[str]:
        return [c["Id"] for c in podman_host.containers(f"{layout.LABEL_POD_UID}={uid}")]

    return Runtime("podman", bc, IMAGE, left)


def claim_pod(script: str, *, namespace: str = "lab-a", **mount: Any) -> dict[str, Any]:
    data = make_pod(
        [sh("main", script, IMAGE, volumeMounts=[{"name": "data", "mountPath": "/data", **mount}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "results"}}],
    )
    data["pod"]["metadata"]["namespace"] = namespace
    return data


def test_a_claim_written_in_one_podman_pod_is_read_back_in_the_next(
    podman_host: PodmanHost, start_job: Start, tmp_path: Path
) -> None:
    rt = podman_site(podman_host, tmp_path / "projects")
    writer = start_job(rt, claim_pod("echo from-podman > /data/out.txt"))
    assert writer.wait() == 0 and writer.exit_code("main") == 0, writer.log("main")
    assert (tmp_path / "projects" / "lab-a" / "results" / "out.txt").read_text() == "from-podman\n"
    reader = start_job(rt, claim_pod("cat /data/out.txt"))
    assert reader.wait() == 0 and reader.log("main") == "from-podman\n"
    assert rt.leftovers(writer.uid) == [] and rt.leftovers(reader.uid) == []


@pytest.mark.parametrize("forced", [False, True], ids=["pod-readOnly", "site-forced"])
def test_read_only_claims_refuse_a_write(
    podman_host: PodmanHost, start_job: Start, tmp_path: Path, forced: bool
) -> None:
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    claim_dir.mkdir(parents=True)
    (claim_dir / "in.txt").write_text("kept\n")
    rt = podman_site(podman_host, tmp_path / "projects", forced_read_only=forced)
    mount = {} if forced else {"readOnly": True}
    job = start_job(rt, claim_pod("cat /data/in.txt; echo x > /data/new.txt", **mount))
    job.wait()
    assert job.exit_code("main") != 0
    assert job.log("main").startswith("kept\n") and "Read-only file system" in job.log("main")
    assert not (claim_dir / "new.txt").exists()


def test_sub_path_binds_the_directory_inside_the_claim(
    podman_host: PodmanHost, start_job: Start, tmp_path: Path
) -> None:
    rt = podman_site(podman_host, tmp_path / "projects")
    job = start_job(rt, claim_pod("echo deep > /data/f", subPath="runs/one"))
    assert job.wait() == 0 and job.exit_code("main") == 0, job.log("main")
    assert (tmp_path / "projects" / "lab-a" / "results" / "runs" / "one" / "f").read_text() == "deep\n"


def test_a_planted_symlink_is_refused_before_podman_runs(
    podman_host: PodmanHost, start_job: Start, tmp_path: Path
) -> None:
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    claim_dir.mkdir(parents=True)
    (claim_dir / "etc").symlink_to("/etc")
    rt = podman_site(podman_host, tmp_path / "projects")
    job = start_job(rt, claim_pod("cat /data/passwd", subPath="etc"))
    job.wait()
    assert job.exit_code("main") == 125 and "leads outside" in job.log("main")
    assert podman_host.containers(f"{layout.LABEL_POD_UID}={job.uid}") == []  # podman never made a container
