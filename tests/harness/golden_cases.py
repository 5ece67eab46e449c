"""The golden pods and BuildConfigs (``CASES``): rendered and compared by tests/scripts/test_scripts_golden.py,
run and fuzzed by the script corpus."""

from __future__ import annotations

import base64
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb

RT = pb.ContainerRuntime


UID = "6f1c2e9a-1111-2222-3333-444455556666"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def full_pod() -> dict[str, Any]:
    """Init + two main containers, env, workingDir, GPUs, annotations, a few volumes."""
    mounts = [{"name": "cfg", "mountPath": "/etc/app"}, {"name": "scratch", "mountPath": "/scratch"}]
    return {
        "pod": {
            "metadata": {
                "name": "golden",
                "namespace": "team-a",
                "uid": UID,
                "annotations": {
                    "slurm-job.vk.io/flags": "--partition=gpu --time=01:00:00",
                    "slurm-job.vk.io/pre-exec": "module load cuda\nexport OMP_NUM_THREADS=4",
                    "slurm-job.vk.io/singularity-options": "--cleanenv --contain",
                    "slurm-job.vk.io/singularity-mounts": "--bind /cvmfs:/cvmfs:ro",
                    "slurm-job.vk.io/singularity-commands": "--quiet",
                    "slurm-job.vk.io/mpi-flags": "mpirun -np 2",
                },
            },
            "spec": {
                "initContainers": [
                    {
                        "name": "fetch",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c"],
                        "args": ["echo 'ready' > /scratch/ready"],
                        "volumeMounts": mounts[1:],
                    }
                ],
                "containers": [
                    {
                        "name": "train",
                        "image": "ghcr.io/example/train:1.0",
                        "command": ["python3", "train.py"],
                        "args": ["--epochs", "$(EPOCHS)", "--name", "it's $(POD)"],
                        "workingDir": "/scratch",
                        "env": [{"name": "EPOCHS", "value": "3"}, {"name": "POD", "value": "golden"}],
                        "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}},
                        "volumeMounts": mounts,
                    },
                    {
                        "name": "sidecar",
                        "image": "/cvmfs/images/sidecar.sif",
                        "args": ["--serve", "8080"],
                        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                        "volumeMounts": mounts[1:],
                    },
                ],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 420}},
                    {"name": "scratch", "emptyDir": {}},
                ],
                "activeDeadlineSeconds": 3600,
                "terminationGracePeriodSeconds": 15,
            },
        },
        "container": [
            {"name": "fetch"},
            {"name": "train", "configMaps": [{"metadata": {"name": "app-config"}, "data": {"app.yaml": "lr: 0.1\n"}}]},
            {"name": "sidecar"},
        ],
    }


def none_pod() -> dict[str, Any]:
    data = full_pod()
    data["pod"]["spec"]["containers"][1]["command"] = ["/usr/bin/sidecar"]
    return data


SRV = pb.StoragePolicy(
    host_paths=[pb.HostPathRule(namespace="*", prefix="/srv", read_only=False)],
    claims=[pb.ClaimRule(namespace="ns", path="/lustre/projects/{namespace}/{claim}", create=True, create_mode=0o770)],
    nfs_exports=[pb.NfsExportRule(namespace="*", server="nfs1.example.org", path="/export", site_path="/mnt/nfs1")],
)


BUILD = {
    "apptainer": pb.BuildConfig(
        runtime=RT.APPTAINER,
        executable="/opt/apptainer/bin/apptainer",
        runtime_flags=["--no-home", "--writable-tmpfs"],
        cache_dir="/scratch/cache",
        image_prefix="docker://",
        image_dir="/images",
        binds=["/etc/grid-security"],
        gpu_support=True,
        pre_exec="source /etc/profile.d/site.sh",
        storage=SRV,
    ),
    "singularity": pb.BuildConfig(runtime=RT.SINGULARITY, gpu_support=True, cache_dir="/scratch/cache", storage=SRV),
    "podman": pb.BuildConfig(
        runtime=RT.PODMAN, runtime_flags=["--network=host"], gpu_support=True, binds=["/data:/data:ro"], storage=SRV
    ),
    "none": pb.BuildConfig(runtime=RT.NONE, storage=SRV),
}


def volume_pod(kind: str) -> dict[str, Any]:
    """One container mounting one volume of ``kind`` (with the interLink data it needs)."""
    volumes: dict[str, dict[str, Any]] = {
        "configmap": {
            "configMap": {
                "name": "cm",
                "defaultMode": 0o640,
                "items": [{"key": "a.txt", "path": "dir/a.txt", "mode": 0o400}, {"key": "b.bin", "path": "b.bin"}],
            }
        },
        "secret": {"secret": {"secretName": "sec", "defaultMode": 0o644}},
        "projected": {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        "downwardapi": {
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
                ]
            }
        },
        "emptydir": {"emptyDir": {"medium": "Memory"}},
        "hostpath": {"hostPath": {"path": "/srv/shared data", "type": "DirectoryOrCreate"}},
        "subpath": {"configMap": {"name": "cm"}},
        "claim": {"persistentVolumeClaim": {"claimName": "results"}},
        "nfs": {"nfs": {"server": "nfs1.example.org", "path": "/export/home/u1", "readOnly": True}},
    }
    mount: dict[str, Any] = {"name": "vol", "mountPath": "/mnt/vol", "readOnly": kind == "hostpath"}
    if kind == "subpath":
        mount = {"name": "vol", "mountPath": "/etc/a.txt", "subPath": "a.txt"}
    if kind == "claim":
        mount = {"name": "vol", "mountPath": "/mnt/vol", "subPathExpr": "runs/$(POD)"}
    return {
        "pod": {
            "metadata": {"name": f"vol-{kind}", "namespace": "ns", "uid": UID, "labels": {"app": "x", "tier": "batch"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "command": ["ls", "-lR", "/mnt/vol"],
                        "env": [{"name": "POD", "value": "one"}] if kind == "claim" else [],
                        "volumeMounts": [mount],
                    }
                ],
                "volumes": [{"name": "vol", **volumes[kind]}],
            },
        },
        "container": [
            {
                "name": "c",
                "configMaps": [
                    {
                        "metadata": {"name": "cm"},
                        "data": {"a.txt": "line 1\nit's line 2\n"},
                        "binaryData": {"b.bin": base64.b64encode(b"\x00\x01\xfe").decode()},
                    }
                ],
                "secrets": [{"metadata": {"name": "sec"}, "data": {"password": b64("hunter2"), "user": b64("svc")}}],
                "projectedvolumemaps": [
                    {
                        "metadata": {"name": "vol"},
                        "data": {
                            "token": "eyJhbGciOi.token",
                            "ca.crt": "-----BEGIN CERT-----\nMIIB\n",
                            "namespace": "ns",
                        },
                    }
                ],
            }
        ],
    }


def group_member(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as a pod-group member: its containers also get the gang's INTERLINK_GROUP_* variables."""
    meta = data["pod"]["metadata"]
    meta["labels"] = {**meta.get("labels", {}), "kueue.x-k8s.io/pod-group-name": "train"}
    meta["annotations"] = {**meta.get("annotations", {}), "kueue.x-k8s.io/pod-group-total-count": "4"}
    return data


CASES: dict[str, tuple[dict[str, Any], pb.BuildConfig]] = {
    **{f"runtime-{rt}": (none_pod() if rt == "none" else full_pod(), bc) for rt, bc in BUILD.items()},
    **{
        f"volume-{kind}": (volume_pod(kind), BUILD["apptainer"])
        for kind in (
            "configmap",
            "secret",
            "projected",
            "downwardapi",
            "emptydir",
            "hostpath",
            "subpath",
            "claim",
            "nfs",
        )
    },
    **{
        f"volume-{kind}-none": (volume_pod(kind), BUILD["none"])
        for kind in ("configmap", "subpath", "hostpath", "claim")
    },
    "volume-claim-podman": (volume_pod("claim"), BUILD["podman"]),
    **{
        f"group-member-{rt}": (group_member(none_pod() if rt == "none" else full_pod()), bc) for rt, bc in BUILD.items()
    },
}
