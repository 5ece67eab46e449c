"""Site storage, run for real (runtime none, bash, real files): a claim written by one pod and read back by the
next one of its namespace, subPath and subPathExpr, a claim directory the job creates; and every refusal with
nothing run: an unmapped claim, another namespace's claim, ``subPath: ../x``, a symlink planted in a claim, a
hostPath outside the site's prefixes. Through the gateway and a real submitter too: the 422 at /create, and the
submitter's own refusal (same words) of a job a NATS client forged. Podman and Slurm: test_storage_podman.py,
test_storage_slurm.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from grpclib.exceptions import GRPCError
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.bus.rpc.channel import submitter_client
from interlink_nats.services.scripts import PodRejected, render_job
from nats.aio.client import Client as NATS
from stack import create_body, eventually, full_stack, terminated

RT = pb.ContainerRuntime


def site(root: Path, **claim: Any) -> pb.BuildConfig:
    """Runtime none; claims at ``<root>/projects/{namespace}/{claim}`` (made by the job), hostPaths below
    ``<root>/shared`` only."""
    rule = pb.ClaimRule(namespace="lab-*", path=f"{root}/projects/{{namespace}}/{{claim}}", create=True, **claim)
    rule.create_mode = rule.create_mode or 0o750
    hosts = [pb.HostPathRule(namespace="*", prefix=f"{root}/shared", read_only=False)]
    return pb.BuildConfig(runtime=RT.NONE, storage=pb.StoragePolicy(claims=[rule], host_paths=hosts))


def claim_pod(
    namespace: str, script: str, *, mount: dict[str, Any] | None = None, volume: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod of one container running ``sh -c script`` with volume ``data`` (claim ``results``) at /data."""
    container = {
        "name": "main",
        "image": "unused",
        "command": ["sh", "-c", script],
        "env": [{"name": "RUN", "value": "run-7"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data", **(mount or {})}],
    }
    return {
        "pod": {
            "metadata": {"name": "p", "namespace": namespace, "uid": str(uuid.uuid4())},
            "spec": {
                "containers": [container],
                "volumes": [{"name": "data", **(volume or {"persistentVolumeClaim": {"claimName": "results"}})}],
            },
        },
        "container": [],
    }


def run(tmp_path: Path, data: dict[str, Any], bc: pb.BuildConfig) -> tuple[int, str]:
    """The pod's script run in a job directory of its own: (the container's exit code, its log)."""
    job_dir = tmp_path / "jobs" / data["pod"]["metadata"]["uid"]
    job_dir.mkdir(parents=True)
    (job_dir / layout.SCRIPT_NAME).write_text(render_job(data, bc).script)
    subprocess.run(
        ["bash", layout.SCRIPT_NAME],
        cwd=job_dir,
        env={**os.environ, layout.JOB_DIR_ENV: str(job_dir)},
        capture_output=True,
        timeout=120,
        check=False,
    )
    code = int(layout.exit_path(job_dir, "main").read_text().split()[0])
    return code, layout.log_path(job_dir, "main").read_text()


def write(value: str, name: str) -> str:
    return f'echo {value} > "$INTERLINK_ROOTFS/data/{name}"'


def read(name: str) -> str:
    return f'cat "$INTERLINK_ROOTFS/data/{name}"'


def test_a_claim_written_by_one_pod_is_read_back_by_the_next_of_its_namespace(tmp_path: Path) -> None:
    bc = site(tmp_path)
    assert run(tmp_path, claim_pod("lab-a", write("kept", "out.txt")), bc) == (0, "")
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    assert (claim_dir / "out.txt").read_text() == "kept\n"  # on the site, where the rule says
    assert run(tmp_path, claim_pod("lab-a", read("out.txt")), bc) == (0, "kept\n")


def test_a_created_claim_directory_has_the_sites_mode(tmp_path: Path) -> None:
    bc = site(tmp_path, create_mode=0o2770)
    assert run(tmp_path, claim_pod("lab-a", "true"), bc)[0] == 0
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    assert claim_dir.stat().st_mode & 0o7777 == 0o2770
    assert claim_dir.stat().st_uid == os.geteuid()  # the job's account (accounts: test_storage_accounts.py)


def test_a_claim_the_site_does_not_let_the_job_create_must_exist(tmp_path: Path) -> None:
    bc = site(tmp_path)
    bc.storage.claims[0].create = False
    code, _ = run(tmp_path, claim_pod("lab-a", "touch ran"), bc)
    assert code == 125  # the pod's set-up failed: no container ran
    assert not list(tmp_path.glob("jobs/*/rootfs/main/ran")) and not (tmp_path / "projects").exists()


def test_sub_path_and_sub_path_expr_stay_in_the_claim_and_are_made(tmp_path: Path) -> None:
    bc = site(tmp_path)
    sub = claim_pod("lab-a", write("in-sub", "f"), mount={"subPath": "a/b"})
    expr = claim_pod("lab-a", write("in-expr", "f"), mount={"subPathExpr": "runs/$(RUN)"})
    assert run(tmp_path, sub, bc)[0] == 0
    assert run(tmp_path, expr, bc)[0] == 0
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    assert (claim_dir / "a" / "b" / "f").read_text() == "in-sub\n"
    assert (claim_dir / "runs" / "run-7" / "f").read_text() == "in-expr\n"
    assert run(tmp_path, claim_pod("lab-a", read("runs/run-7/f")), bc) == (0, "in-expr\n")


def test_an_unmapped_claim_is_refused_before_anything_runs(tmp_path: Path) -> None:
    bc = site(tmp_path)
    data = claim_pod("lab-a", "touch ran", volume={"persistentVolumeClaim": {"claimName": "bad..name"}})
    with pytest.raises(PodRejected) as refused:
        render_job(data, bc)
    assert refused.value.field == "spec.volumes[0].persistentVolumeClaim.claimName"
    with pytest.raises(PodRejected, match="the site maps no such claim"):
        render_job(claim_pod("team-x", "touch ran"), bc)  # no rule for team-x's namespace


def test_another_namespaces_claim_cannot_be_named(tmp_path: Path) -> None:
    """lab-a's data, and a pod of team-x naming lab-a's claim: refused; a pod of lab-b naming the same claim name
    gets lab-b's own claim, never lab-a's."""
    bc = site(tmp_path)
    assert run(tmp_path, claim_pod("lab-a", write("secret-of-a", "f")), bc)[0] == 0
    with pytest.raises(PodRejected, match="the site maps no such claim"):
        render_job(claim_pod("team-x", read("f")), bc)
    code, seen = run(tmp_path, claim_pod("lab-b", read("f")), bc)
    assert code != 0 and "secret-of-a" not in seen


@pytest.mark.parametrize("sub", ["../x", "../../lab-b/results", "/etc", "a/../../x"])
def test_a_sub_path_leaving_the_claim_is_refused_at_the_door(tmp_path: Path, sub: str) -> None:
    with pytest.raises(PodRejected) as refused:
        render_job(claim_pod("lab-a", "touch ran", mount={"subPath": sub}), site(tmp_path))
    assert refused.value.field == "spec.containers[0].volumeMounts[0].subPath"


@pytest.mark.parametrize("mount", [{"subPath": "link"}, {"subPath": "link/passwd"}, {"subPathExpr": "$(LINK)"}])
def test_a_symlink_planted_in_the_claim_is_refused_at_job_start(tmp_path: Path, mount: dict[str, str]) -> None:
    """A tenant's symlink to /etc inside its claim: the pod's set-up fails (exit 125) naming the mount, and the
    container never runs; refused rather than resolved inside the claim (docs/security.md, "Site storage")."""
    bc = site(tmp_path)
    claim_dir = tmp_path / "projects" / "lab-a" / "results"
    claim_dir.mkdir(parents=True)
    (claim_dir / "link").symlink_to("/etc")
    data = claim_pod("lab-a", f'touch {tmp_path}/ran; cat "$INTERLINK_ROOTFS/data/passwd"', mount=mount)
    data["pod"]["spec"]["containers"][0]["env"].append({"name": "LINK", "value": "link"})
    code, log = run(tmp_path, data, bc)
    assert code == 125
    assert "leads outside" in log and "spec.containers[0].volumeMounts[0].subPath" in log
    assert not (tmp_path / "ran").exists() and "root:" not in log


def test_a_claim_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    bc = site(tmp_path)
    (tmp_path / "projects" / "lab-a").mkdir(parents=True)
    (tmp_path / "projects" / "lab-a" / "results").symlink_to("/etc")
    code, log = run(tmp_path, claim_pod("lab-a", f"touch {tmp_path}/ran"), bc)
    assert code == 125 and "is a symlink: refused" in log and not (tmp_path / "ran").exists()


def test_host_paths_outside_the_sites_prefixes_are_refused(tmp_path: Path) -> None:
    bc = site(tmp_path)
    (tmp_path / "shared").mkdir()
    for path in ("/etc", "/", str(tmp_path / "projects"), f"{tmp_path}/shared/../projects"):
        with pytest.raises(PodRejected) as refused:
            render_job(claim_pod("lab-a", "true", volume={"hostPath": {"path": path}}), bc)
        assert refused.value.field == "spec.volumes[0].hostPath.path"
    (tmp_path / "shared" / "in").write_text("shared\n")
    (tmp_path / "shared" / "escape").symlink_to("/etc")
    inside = claim_pod("lab-a", read("in"), volume={"hostPath": {"path": f"{tmp_path}/shared"}})
    assert run(tmp_path, inside, bc) == (0, "shared\n")
    escape = claim_pod("lab-a", f"touch {tmp_path}/ran", volume={"hostPath": {"path": f"{tmp_path}/shared/escape"}})
    assert run(tmp_path, escape, bc)[0] == 125 and not (tmp_path / "ran").exists()


# --- through the gateway and a real submitter -------------------------------------------------------------------


async def test_the_gateway_refuses_an_unmapped_claim_and_runs_a_mapped_one(nats_url: str, tmp_path: Path) -> None:
    storage = {
        "claims": [{"namespace": "lab-*", "path": f"{tmp_path}/projects/{{namespace}}/{{claim}}", "create": True}]
    }
    async with full_stack(nats_url, tmp_path / "state", site={"storage": storage}) as stack:
        refused = claim_pod("team-x", "true")["pod"]
        response = await stack.post("/create", create_body(refused))
        assert response.status_code == 422, response.text
        assert "spec.volumes[0].persistentVolumeClaim.claimName" in response.text
        assert "the site maps no such claim" in response.text
        assert not (tmp_path / "state" / "jobs").exists() or not any((tmp_path / "state" / "jobs").iterdir())

        mapped = claim_pod("lab-a", write("via-gateway", "f"))["pod"]
        assert (await stack.post("/create", create_body(mapped))).status_code == 200

        async def done() -> bool:
            return terminated(await stack.status_of(mapped))

        await eventually(done, within=60, what="the mapped claim's pod ran")
        codes = [c["state"]["terminated"]["exitCode"] for c in (await stack.status_of(mapped))["containers"]]
        assert codes == [0]
        assert (tmp_path / "projects" / "lab-a" / "results" / "f").read_text() == "via-gateway\n"


async def test_the_submitter_refuses_a_forged_job_with_the_same_words(
    nats_url: str, client_nc: NATS, tmp_path: Path
) -> None:
    """Any NATS client with the pool's credential can send a job: one naming a claim the site maps nowhere, or
    mapped elsewhere than its script says, is refused (INVALID_ARGUMENT) and nothing is claimed or run."""
    storage = {"claims": [{"namespace": "lab-*", "path": f"{tmp_path}/projects/{{namespace}}/{{claim}}"}]}
    async with full_stack(nats_url, tmp_path / "state", site={"storage": storage}) as stack:
        stub = submitter_client(client_nc, stack.pool, timeout=30)
        field = "spec.volumes[0].persistentVolumeClaim"
        for namespace, site_path, words in (
            ("team-x", "/etc", f"{field}.claimName: the site maps no such claim"),
            ("lab-a", "/etc", f"{field}: the site maps it to '{tmp_path}/projects/lab-a/results', not '/etc'"),
        ):
            uid = str(uuid.uuid4())
            job = pb.JobScript(
                pod=pb.PodRef(uid=uid, namespace=namespace, name="p"),
                script=f"touch {tmp_path}/ran-{uid}",
                containers=["main"],
                storage=[pb.StorageMount(kind=pb.StorageKind.CLAIM, field=field, claim="results", site_path=site_path)],
            )
            with pytest.raises(GRPCError) as refused:
                await stub.submit(pb.SubmitRequest(job=job))
            assert words in str(refused.value.message)
            listed = await stub.list_jobs(pb.ListJobsRequest(include_finished=True))
            assert uid not in [s.pod.uid for s in listed.jobs if s.pod is not None]
        assert not await asyncio.to_thread(lambda: list(tmp_path.glob("ran-*")))


def test_the_claim_and_volume_objects_interlink_sends_select_the_rule(tmp_path: Path) -> None:
    """interLink's PVC branch sends the claims (``persistentvolumes``) and their volumes
    (``persistentVolumeSources``) with the request, or per container: a rule by storage class or by NFS source
    applies only with them, and a claim of another namespace in them is not the pod's."""
    policy = pb.StoragePolicy(
        claims=[
            pb.ClaimRule(namespace="*", storage_class="fast", path=f"{tmp_path}/fast/{{claim}}"),
            pb.ClaimRule(namespace="*", nfs_server="nfs1", nfs_path="/export", path=f"{tmp_path}/nfs/{{volume}}"),
        ]
    )
    bc = pb.BuildConfig(runtime=RT.NONE, storage=policy)
    data = claim_pod("team-x", "true")
    data["persistentvolumes"] = [
        {"metadata": {"name": "results", "namespace": "other"}, "spec": {"storageClassName": "fast"}}
    ]
    with pytest.raises(PodRejected, match="the site maps no such claim"):
        render_job(data, bc)  # the only claim sent is another namespace's
    data["persistentvolumes"].append(
        {"metadata": {"name": "results", "namespace": "team-x"}, "spec": {"storageClassName": "fast"}}
    )
    assert [m.site_path for m in render_job(data, bc).storage] == [f"{tmp_path}/fast/results"]
    nfs = claim_pod("team-x", "true")
    nfs["container"] = [
        {
            "name": "main",
            "persistentVolumes": [
                {
                    "metadata": {"name": "pv-7"},
                    "spec": {
                        "claimRef": {"namespace": "team-x", "name": "results"},
                        "nfs": {"server": "nfs1", "path": "/export/a"},
                    },
                }
            ],
        }
    ]
    assert [m.site_path for m in render_job(nfs, bc).storage] == [f"{tmp_path}/nfs/pv-7"]
    nfs["container"][0]["persistentVolumes"][0]["spec"]["nfs"]["path"] = "/export/../etc"
    with pytest.raises(PodRejected) as refused:
        render_job(nfs, bc)
    assert refused.value.field == "container[0].persistentVolumes[0].spec.nfs.path"
