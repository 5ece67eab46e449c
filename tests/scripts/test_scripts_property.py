"""Property: whatever text a pod carries (quotes, $(), backticks, newlines, globs, unicode), the executed
script reproduces it exactly and runs nothing else (a canary file is never created)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.services.scripts import expand, render_job

CANARY = Path(tempfile.gettempdir()) / f"interlink-nats-canary-{os.getpid()}"
INJECTIONS = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"'; touch {CANARY}; '",
    f'"; touch {CANARY}; "',
    f"\ntouch {CANARY}\n",
    f"${{IFS}}touch${{IFS}}{CANARY}",
    f"x' && touch {CANARY} #",
    "*",
    "?[a-z]*",
    "$HOME",
    "~",
    "\\",
    "-n",
    "--",
    "!!",
    "$(EXISTING)",
    "$$(EXISTING)",
    "'",
    '"',
    "\t\r\n",
    "é漢字🙂",
    "",
]
# Names the test harness itself (python, env) would react to; a pod setting them is legitimate but noisy.
HARNESS_ENV = ("PYTHON", "LD_", "LC_", "LANG", "INTERLINK_")

chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
text = st.one_of(
    st.sampled_from(INJECTIONS),
    st.text(chars, max_size=24),
    st.text(chars, max_size=4).map(lambda s: s + INJECTIONS[0]),
)
env_name = st.text(  # what Kubernetes accepts (>= 1.30): printable ASCII but '='
    st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters="="), min_size=1, max_size=12
).filter(lambda n: not n.startswith(HARNESS_ENV) and n not in ("PATH", "EXISTING", "EXPECT_WD"))
component = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=10
).filter(lambda c: c not in (".", ".."))
dns_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)

DUMP = r"""
import json, os, sys, base64
root = os.environ["INTERLINK_ROOTFS"]
files = {}
for d, _, names in os.walk(root, followlinks=True):
    for n in names:
        p = os.path.join(d, n)
        files[os.path.relpath(p, root)] = base64.b64encode(open(p, "rb").read()).decode()
in_workdir = os.path.samefile(os.getcwd(), root + os.environ["EXPECT_WD"])
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "in_workdir": in_workdir, "files": files}))
"""


@st.composite
def pods(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod using every quoted channel, and what the container must observe."""
    cname = draw(dns_label)
    env_items = draw(st.lists(st.tuples(env_name, text), max_size=6, unique_by=lambda t: t[0]))
    args = draw(st.lists(text, max_size=6))
    workdir = "/wd/" + "/".join(draw(st.lists(component, min_size=1, max_size=2)))  # apart from the mounts
    env_items = [("EXISTING", "yes"), ("EXPECT_WD", workdir), *env_items]
    mount = "/m/" + "/".join(draw(st.lists(component, min_size=1, max_size=3)))
    keys = draw(st.lists(component, min_size=1, max_size=3, unique=True))
    contents = [draw(text) for _ in keys]
    item_path = "/".join(draw(st.lists(component, min_size=1, max_size=2)))
    secret_bytes = draw(st.binary(max_size=32))
    annotation = draw(text)
    pod_name = draw(
        st.from_regex(r"[a-z0-9]([-a-z0-9]{0,9}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,9}[a-z0-9])?)?", fullmatch=True)
    )
    flags = draw(st.lists(text, max_size=3))

    volumes = [
        {"name": "cm", "configMap": {"name": "cm"}},
        {"name": "items", "configMap": {"name": "cm", "items": [{"key": keys[0], "path": item_path}]}},
        {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "down", "downwardAPI": {"items": [
            {"path": "ann", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
    ]  # fmt: skip
    mounts = [
        {"name": "cm", "mountPath": mount},
        {"name": "items", "mountPath": "/items"},
        {"name": "sec", "mountPath": "/sec"},
        {"name": "down", "mountPath": "/down"},
    ]
    container = {
        "name": cname,
        "image": "unused",
        "command": [sys.executable, "-X", "utf8", "-c", DUMP],
        "args": args,
        "env": [{"name": n, "value": v} for n, v in env_items],
        "workingDir": workdir,
        "volumeMounts": mounts,
    }
    data = {
        "pod": {
            "metadata": {
                "name": pod_name,
                "namespace": "ns",
                "uid": "uid",
                "annotations": {"note": annotation, "slurm-job.vk.io/flags": shlex.join(flags)},
            },
            "spec": {"containers": [container], "volumes": volumes},
        },
        "container": [
            {
                "name": cname,
                "configMaps": [{"metadata": {"name": "cm"}, "data": dict(zip(keys, contents, strict=True))}],
                "secrets": [{"metadata": {"name": "sec"}, "data": {"s": base64.b64encode(secret_bytes).decode()}}],
            }
        ],
    }
    env: dict[str, str] = {}
    for n, v in env_items:
        env[n] = expand(v, env)
    files = {f"{mount.strip('/')}/{k}": c.encode() for k, c in zip(keys, contents, strict=True)}
    files[f"items/{item_path}"] = contents[0].encode()
    files["sec/s"] = secret_bytes
    files["down/ann"] = annotation.encode()
    files["down/name"] = pod_name.encode()
    expected = {
        "name": cname,
        "argv": [expand(a, env) for a in args],
        "env": env,
        "files": files,
        "flags": flags,
    }
    return data, expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pods())
def test_pod_text_is_reproduced_exactly_and_nothing_else_runs(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    data, expected = case
    job = render_job(data, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    assert job.backend_flags == expected["flags"]
    with tempfile.TemporaryDirectory() as tmp:
        job_dir = Path(tmp)
        (job_dir / layout.SCRIPT_NAME).write_text(job.script)
        proc = subprocess.run(
            ["bash", layout.SCRIPT_NAME],
            cwd=job_dir,
            env={**os.environ, layout.JOB_DIR_ENV: str(job_dir)},
            capture_output=True,
            timeout=60,
        )
        name = expected["name"]
        output = layout.log_path(job_dir, name).read_text()
        assert proc.returncode == 0, (proc.stderr, output)
        assert layout.exit_path(job_dir, name).read_text() == "0\n"
        seen = json.loads(output.strip().splitlines()[-1])
    assert not CANARY.exists(), "pod text was executed"
    assert seen["argv"] == expected["argv"]
    for key, value in expected["env"].items():
        assert seen["env"].get(key) == value, key
    assert seen["in_workdir"]
    got = {path: base64.b64decode(b64) for path, b64 in seen["files"].items()}
    for path, content in expected["files"].items():
        assert got.get(path) == content, path
