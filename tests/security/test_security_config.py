"""The pure core of ``nats-config`` and its file edge: permission model, rotation, modes, no leaked seeds."""

from __future__ import annotations

import itertools
import json
import stat
import subprocess
from pathlib import Path

import nkeys
import pytest
import typer
from interlink_nats.kernel.nats_connection import credential_options
from interlink_nats.kernel.subjects import InvalidPoolNameError
from interlink_nats.services.ops.nats_server import nats_server_binary
from interlink_nats.services.security import (
    NatsConfigOptions,
    Role,
    build_bundle,
    controller_permissions,
    gateway_permissions,
    inbox_prefix,
    pool_permissions,
)
from interlink_nats.services.security.bundle import new_user_seed, public_key_of
from interlink_nats.services.security.cli import nats_config
from interlink_nats.services.security.files import read_existing_seeds, write_bundle
from typer.testing import CliRunner


def fixed_seed_factory() -> object:
    """Deterministic seeds so two builds can be compared byte for byte."""
    counter = itertools.count(1)
    return lambda: nkeys.encode_seed(bytes([next(counter)]) * 32, nkeys.PREFIX_BYTE_USER).decode()


def options(**kw: object) -> NatsConfigOptions:
    return NatsConfigOptions(pools=("a", "b"), **kw)  # type: ignore[arg-type]


def test_bundle_is_deterministic_given_seeds() -> None:
    one = build_bundle(options(), new_seed=fixed_seed_factory())  # type: ignore[arg-type]
    two = build_bundle(options(), new_seed=fixed_seed_factory())  # type: ignore[arg-type]
    assert one.config_text == two.config_text
    assert [c.name for c in one.credentials] == ["gateway", "controller", "pool-a", "pool-b"]


def test_config_and_manifest_hold_no_secret() -> None:
    bundle = build_bundle(options())
    text = bundle.config_text + json.dumps(bundle.manifest())
    for cred in bundle.credentials:
        assert cred.seed.startswith("SU")
        assert cred.seed not in text
        assert cred.seed not in repr(cred)
        assert cred.public_key in bundle.config_text


def test_permission_model() -> None:
    gw, ctl, pool_a = gateway_permissions(), controller_permissions(), pool_permissions("a")
    rpc = "interlink_nats.v1.SubmitterService"
    assert f"{rpc}.*.*" in gw.publish
    assert ctl.publish == (f"{rpc}.Describe.*", "$SRV.>")
    assert not any(s.startswith(rpc) for s in pool_a.publish)
    assert pool_a.subscribe[0] == f"{rpc}.*.a"
    assert set(pool_a.publish) == {
        "interlink.events.a",
        "interlink.live.a",
        "interlink.config.a",
        "interlink.resources.a",
        "$JS.API.STREAM.INFO.INTERLINK_EVENTS",
    }
    assert pool_a.allow_responses is not None
    assert gw.allow_responses is None
    assert ctl.allow_responses is None
    # private inboxes: nobody but its owner can read replies
    assert "_INBOX.pool.a.>" in pool_a.subscribe
    assert "_INBOX.>" not in pool_a.subscribe
    assert "interlink.live.*" in gw.subscribe and "interlink.live.*" not in ctl.subscribe
    assert "_INBOX.gateway.>" in gw.subscribe
    assert "_INBOX.>" not in gw.subscribe
    assert "_INBOX.>" in pool_permissions("a", shared_inboxes=True).subscribe
    # the gateway never gets admin rights on JetStream
    assert not any("DELETE.INTERLINK_EVENTS" in s and "CONSUMER" not in s for s in gw.publish)
    assert not any(s in ("$JS.API.>", ">") for s in gw.publish)


def test_custom_prefix_reaches_every_subject() -> None:
    bundle = build_bundle(options(prefix="site1"))
    assert "site1.events.a" in bundle.config_text
    assert "interlink.events" not in bundle.config_text


def test_inbox_prefixes_are_distinct() -> None:
    prefixes = {inbox_prefix(Role.GATEWAY), inbox_prefix(Role.CONTROLLER), inbox_prefix(Role.POOL, "gateway")}
    assert len(prefixes) == 3


@pytest.mark.parametrize("pools", [("A",), ("a.b",), ("a", "a"), ("*",), ()])
def test_bad_pools_are_rejected(pools: tuple[str, ...]) -> None:
    with pytest.raises((ValueError, InvalidPoolNameError)):
        NatsConfigOptions(pools=pools)


def test_tls_options_must_be_complete() -> None:
    with pytest.raises(ValueError, match="go together"):
        options(tls_cert="/c.pem")
    with pytest.raises(ValueError, match="tls-ca"):
        options(tls_cert="/c.pem", tls_key="/k.pem", tls_verify_clients=True)


def test_rotation_replaces_only_the_named_identity() -> None:
    first = build_bundle(options())
    existing = {c.name: c.seed for c in first.credentials}
    again = build_bundle(options(), existing)
    assert again.config_text == first.config_text
    rotated = build_bundle(options(), existing, rotate=["a"])
    changed = {c.name for c in rotated.credentials if c.seed != existing[c.name]}
    assert changed == {"pool-a"}
    assert first.credential("pool-a").public_key not in rotated.config_text
    with pytest.raises(ValueError, match="unknown identity"):
        build_bundle(options(), existing, rotate=["zzz"])


def test_shared_seed_is_refused() -> None:
    seed = new_user_seed()
    with pytest.raises(ValueError, match="own seed"):
        build_bundle(options(), {"pool-a": seed, "pool-b": seed})


def test_public_key_of_rejects_non_user_seed() -> None:
    account_seed = nkeys.encode_seed(b"\x01" * 32, nkeys.PREFIX_BYTE_ACCOUNT).decode()
    with pytest.raises(ValueError, match="user"):
        public_key_of(account_seed)


def test_rendered_config_is_accepted_by_nats_server(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    from interlink_nats.services.security.devtls import make_ca, make_server_cert

    ca, ca_key = make_ca()
    c, k = make_server_cert(ca, ca_key, ["localhost"])
    cert.write_bytes(c)
    key.write_bytes(k)
    (tmp_path / "ca.pem").write_bytes(ca)
    for opts in (
        options(jetstream_store_dir=str(tmp_path / "js")),
        options(
            jetstream_store_dir=str(tmp_path / "js"),
            tls_cert=str(cert),
            tls_key=str(key),
            http_port=8222,
            max_payload=8 << 20,
        ),
        options(
            jetstream_store_dir=str(tmp_path / "js"),
            tls_cert=str(cert),
            tls_key=str(key),
            tls_ca=str(tmp_path / "ca.pem"),
            tls_verify_clients=True,
            client_tls=False,
            shared_inboxes=True,
        ),
    ):
        conf = tmp_path / "n.conf"
        conf.write_text(build_bundle(opts).config_text)
        run = subprocess.run([nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stdout + run.stderr


def test_files_are_private_and_seeds_reused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    bundle = build_bundle(options())
    result = write_bundle(bundle, out)
    for path in [result.config_file, result.manifest_file, *result.seed_files.values()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert read_existing_seeds(out) == {c.name: c.seed for c in bundle.credentials}
    smaller = build_bundle(NatsConfigOptions(pools=("a",)), read_existing_seeds(out))
    assert write_bundle(smaller, out).stale == ["pool-b"]


def test_connect_options_point_at_the_seed_file_not_the_seed(tmp_path: Path) -> None:
    bundle = build_bundle(options())
    result = write_bundle(bundle, tmp_path)
    opts = credential_options(seed_file=result.seed_files["pool-a"], role="pool", pool="a")
    assert opts == {"nkeys_seed": str(result.seed_files["pool-a"]), "inbox_prefix": "_INBOX.pool.a"}
    with pytest.raises(FileNotFoundError):
        credential_options(seed_file=tmp_path / "missing.nk")


def test_cli_writes_files_and_prints_no_seed(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("nats-config")(nats_config)
    app.command("noop")(lambda: None)
    out = tmp_path / "out"
    args = [
        "nats-config",
        "--pools",
        "a,b",
        "--out",
        str(out),
        "--dev-tls",
        "localhost,127.0.0.1",
        "--mount-path",
        "/config",
        "--jetstream-store-dir",
        "/data/js",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    seeds_written = read_existing_seeds(out)
    assert set(seeds_written) == {"gateway", "controller", "pool-a", "pool-b"}
    for seed in seeds_written.values():
        assert seed not in result.output
    conf = (out / "nats-server.conf").read_text()
    assert '"/config/tls/server.pem"' in conf
    assert stat.S_IMODE((out / "tls" / "server-key.pem").stat().st_mode) == 0o600
    rotated = CliRunner().invoke(app, [*args, "--rotate", "pool-b"])
    assert rotated.exit_code == 0, rotated.output
    after = read_existing_seeds(out)
    assert after["pool-a"] == seeds_written["pool-a"]
    assert after["pool-b"] != seeds_written["pool-b"]
    bad = CliRunner().invoke(app, ["nats-config", "--pools", "Bad_Pool", "--out", str(out)])
    assert bad.exit_code != 0
