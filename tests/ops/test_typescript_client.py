"""The TypeScript example (clients/typescript) calls a Python pool over the secured NATS: the wire convention holds
across languages, with the controller's credential and private inbox, over tls:// with the site CA.

The client is copied to a temp dir, installed with ``npm ci`` from the committed lock file, its messages are
generated there with ``buf generate --template buf.gen.ts.yaml`` (protoc-gen-es from node_modules), and it runs
with ``tsx``. Skipped locally without node/npm; an error in CI (``INTERLINK_NATS_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import missing_service
from fake_submitter import FakeSubmitter, settle
from interlink_nats.services.bus.rpc import RpcServer
from tls import SecureStack, stack_fixture

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runnable copy of the example: dependencies installed, messages generated."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing_service("node and npm (Node.js >= 20)")
    work = tmp_path_factory.mktemp("ts")
    copy = work / "clients" / "typescript"
    shutil.copytree(CLIENT, copy, ignore=shutil.ignore_patterns("node_modules", "gen"))
    install = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if install.returncode != 0:
        pytest.fail(f"npm ci failed:\n{install.stdout}\n{install.stderr}")
    buf = shutil.which("buf") or str(Path(sys.executable).with_name("buf"))
    env = {**os.environ, "PATH": f"{copy / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    gen = subprocess.run(
        [buf, "generate", "--template", str(ROOT / "buf.gen.ts.yaml"), "-o", str(work), str(ROOT / "proto")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert gen.returncode == 0, gen.stdout + gen.stderr
    assert (copy / "src" / "gen" / "interlink_nats" / "v1" / "submitter_pb.ts").is_file()
    return copy


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("ts-nats"))


async def run_describe(stack: SecureStack, client: Path, pool: str) -> tuple[int, str, str]:
    cred = stack.cred("controller")
    env = {
        **os.environ,
        "NATS_URL": stack.tls_url,
        "CA_FILE": str(stack.tls.ca_cert),
        "NKEY_SEED_FILE": str(stack.written.seed_files["controller"]),
        "INBOX_PREFIX": cred.inbox_prefix,
        "POOL": pool,
        "TIMEOUT_MS": "5000",
    }
    proc = await asyncio.create_subprocess_exec(
        str(client / "node_modules" / ".bin" / "tsx"),
        "src/describe.ts",
        cwd=client,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_typescript_client_describes_a_python_pool(stack: SecureStack, ts_client: Path) -> None:
    nc = await stack.connect("pool-a")
    server = RpcServer(nc, [FakeSubmitter("a")], pool="a")
    await server.start()
    await settle(nc)
    try:
        code, out, err = await run_describe(stack, ts_client, "a")
        assert code == 0, out + err
        reply = json.loads(out.strip().splitlines()[-1])
        assert reply["pool"] == "a"
        assert reply["backend"] == "fake"
        seed = stack.written.seed_files["controller"].read_text().strip()
        assert seed not in out + err
        # no submitter for pool b: nats-server's no-responders becomes UNAVAILABLE (code 14) in TypeScript too
        code, out, err = await run_describe(stack, ts_client, "b")
        assert code == 2, out + err
        assert "rpc error 14" in err
    finally:
        await server.stop(grace_s=0)
        await stack.close_clients()
