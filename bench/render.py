"""Render throughput: pods per second for a typical pod (2 containers, 30 env vars, 5 volumes), one core.

Goal >= 2,000 pods/s. Prints a table, then ONE JSON object on the last line (median of the reps).
Run: .venv/bin/python bench/render.py [--reps 7] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import time
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job

GOAL = 2000.0
# The site lets team-a's pods mount host directories below /srv: without a rule the pod's hostPath volume is
# refused at the door (site policy, not the pod, decides storage), and the render would measure a rejection.
SITE_STORAGE = pb.StoragePolicy(host_paths=[pb.HostPathRule(namespace="team-a", prefix="/srv", read_only=False)])


def typical_pod() -> dict[str, Any]:
    """2 containers, 30 env vars in all, 5 volumes (configMap, secret, projected SA token, emptyDir, hostPath)."""
    env = [{"name": f"VAR_{i}", "value": f"value-{i} with spaces and 'quotes'"} for i in range(15)]
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app"},
        {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
        {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "data", "mountPath": "/data"},
    ]

    def container(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": "ghcr.io/example/app:1.2.3",
            "command": ["python3", "-m", "app"],
            "args": ["--config", "/etc/app/app.yaml", "--out", "/scratch/$(POD_NAME)"],
            "env": [*env, {"name": "POD_NAME", "value": "job-123"}][-15:],
            "volumeMounts": mounts,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePath": "/dev/termination-log",
        }

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-123-abcde",
            "namespace": "team-a",
            "uid": "6f1c2e9a-1111-2222-3333-444455556666",
            "labels": {"app": "job"},
            "annotations": {"slurm-job.vk.io/flags": "--partition=gpu --qos=normal"},
        },
        "spec": {
            "containers": [container("main"), container("sidecar")],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 420}},
                {"name": "creds", "secret": {"secretName": "app-creds", "defaultMode": 420}},
                {
                    "name": "kube-api-access-x",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                },
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "hostPath": {"path": "/srv/data", "type": "Directory"}},
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": "interlink-vk",
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "virtual-node.interlink/no-schedule", "operator": "Exists"}],
            "enableServiceLinks": True,
            "priority": 0,
            "securityContext": {},
        },
        "status": {"phase": "Pending"},
    }
    data = {
        "configMaps": [{"metadata": {"name": "app-config"}, "data": {"app.yaml": "a: 1\nb: [x, y]\n" * 20}}],
        "secrets": [
            {
                "metadata": {"name": "app-creds"},
                "data": {"user": base64.b64encode(b"svc").decode(), "password": base64.b64encode(b"s3cr3t!").decode()},
            }
        ],
        "projectedvolumemaps": [
            {
                "metadata": {"name": "kube-api-access-x"},
                "data": {
                    "token": "eyJhbGciOi" + "x" * 900,
                    "ca.crt": "-----BEGIN CERTIFICATE-----\n" + "A" * 1200 + "\n-----END CERTIFICATE-----\n",
                    "namespace": "team-a",
                },
            }
        ],
        "emptyDirs": None,
    }
    return {"pod": pod, "container": [{"name": "main", **data}, {"name": "sidecar", **data}], "jobConfig": {}}


def measure(pod: dict[str, Any], bc: pb.BuildConfig, seconds: float) -> float:
    """Pods per second over about ``seconds``."""
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        for _ in range(50):
            render_job(pod, bc)
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    pod = typical_pod()
    results: dict[str, float] = {}
    print(f"{'runtime':<12}{'median pods/s':>16}{'min':>10}{'max':>10}{'us/pod':>10}")
    for name, rt in (
        ("apptainer", pb.ContainerRuntime.APPTAINER),
        ("podman", pb.ContainerRuntime.PODMAN),
        ("none", pb.ContainerRuntime.NONE),
    ):
        bc = pb.BuildConfig(
            runtime=rt, image_dir="/images", gpu_support=True, runtime_flags=["--cleanenv"], storage=SITE_STORAGE
        )
        render_job(pod, bc)  # warm up (template compile, caches)
        reps = [measure(pod, bc, args.seconds) for _ in range(args.reps)]
        med = statistics.median(reps)
        results[name] = med
        print(f"{name:<12}{med:>16.0f}{min(reps):>10.0f}{max(reps):>10.0f}{1e6 / med:>10.1f}")
    script_bytes = len(render_job(pod, pb.BuildConfig(storage=SITE_STORAGE)).script)
    print(
        json.dumps(
            {
                "bench": "render",
                "pods_per_second": round(results["apptainer"]),
                "by_runtime": {k: round(v) for k, v in results.items()},
                "goal": GOAL,
                "meets_goal": min(results.values()) >= GOAL,
                "reps": args.reps,
                "script_bytes": script_bytes,
            }
        )
    )


if __name__ == "__main__":
    main()
