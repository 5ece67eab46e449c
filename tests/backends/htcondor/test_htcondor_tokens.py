"""Level 3 of the htcondor backend's tests: the CE bearer token, against a REAL OAuth2/OIDC issuer.

The issuer is Authlib's authorization server (tests/harness/htcondor_issuer.py) on a free loopback port; it
rotates refresh tokens like an IAM issuer, which is what made the old plugin's replicas lock each
other out.
"""

from __future__ import annotations

import asyncio
import logging
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import missing_service
from interlink_nats.submitters.backends.htcondor.backend import HTCondorBackend, HTCondorConfig
from interlink_nats.submitters.backends.htcondor.tokens import OidcTokenSource, TokenConfig, TokenError
from interlink_nats.submitters.core.backend import BackendUnavailable, JobHandle
from interlink_nats.submitters.settings import SubmitterSettings
from interlink_nats.submitters.testing import wait_for

pytestmark = pytest.mark.htcondor


@pytest.fixture
def issuer_factory() -> Iterator[Any]:
    try:
        from htcondor_issuer import Issuer
    except ImportError:
        missing_service("Authlib and Flask for the OIDC issuer (pip install authlib flask)")
    started: list[Any] = []

    def make(**kw: Any) -> Any:
        iss = Issuer(**kw).__enter__()
        started.append(iss)
        return iss

    yield make
    for iss in started:
        iss.__exit__(None, None, None)


def token_settings(iss: Any, tmp_path: Path, **kw: Any) -> TokenConfig:
    secret = tmp_path / "client-secret"
    if not secret.exists():
        secret.write_text(iss.client_secret + "\n")
    base: dict[str, Any] = {"issuer": iss.url, "client_id": iss.client_id, "client_secret_file": secret}
    base.update(kw)
    return TokenConfig(**base)


def with_refresh_token(iss: Any, tmp_path: Path, **kw: Any) -> TokenConfig:
    rt = tmp_path / "refresh-token"
    rt.write_text(iss.refresh_token_for(iss.client_id))
    return token_settings(iss, tmp_path, refresh_token_file=rt, **kw)


async def test_first_fetch_writes_a_valid_token_0600_where_condor_finds_it(issuer_factory: Any, tmp_path: Path) -> None:
    iss = issuer_factory()
    src = OidcTokenSource(with_refresh_token(iss, tmp_path), tmp_path / "state")
    await src.ensure_fresh()
    token = src.token_file.read_text().strip()
    assert iss.valid(token)
    assert stat.S_IMODE(src.token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(src.token_file.parent.stat().st_mode) == 0o700
    assert src.environment() == {
        "BEARER_TOKEN_FILE": str(src.token_file),
        "_CONDOR_SCITOKENS_FILE": str(src.token_file),
    }
    await src.ensure_fresh()
    assert iss.token_requests == 1, "a valid token is not fetched again"


async def test_client_credentials_when_no_refresh_token_is_configured(
    issuer_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    iss = issuer_factory()
    monkeypatch.setenv("INTERLINK_HTCONDOR_CLIENT_SECRET", iss.client_secret)
    src = OidcTokenSource(TokenConfig(issuer=iss.url, client_id=iss.client_id), tmp_path)
    await src.ensure_fresh()
    assert iss.valid(src.token_file.read_text().strip())


async def test_the_token_is_refreshed_before_it_expires_with_the_rotated_refresh_token(
    issuer_factory: Any, tmp_path: Path
) -> None:
    iss = issuer_factory(access_lifetime=6)
    src = OidcTokenSource(with_refresh_token(iss, tmp_path, refresh_margin=3), tmp_path / "state")
    stop = asyncio.Event()
    runner = asyncio.create_task(src.run(stop))
    try:
        tokens: list[str] = []
        for _ in range(3):  # three lifetimes: each refresh must use the refresh token the last one returned

            async def changed() -> str | None:
                text = src.token_file.read_text().strip() if src.token_file.exists() else ""
                return text if text and text not in tokens else None

            token = await wait_for(changed, timeout=30, interval=0.05, what="a new access token")
            if tokens:
                assert iss.valid(tokens[-1]), "the previous token was replaced before it expired"
            assert iss.valid(token)
            tokens.append(token)
    finally:
        stop.set()
        await runner
    assert iss.token_requests == 3


async def test_a_rotated_refresh_token_is_kept_when_the_access_token_file_is_missing(
    issuer_factory: Any, tmp_path: Path
) -> None:
    """The first refresh rotated the configured refresh token (the issuer revoked it); losing the access-token
    file (a cleaned tmpfs, an operator) must not send the stale configured one again (invalid_grant)."""
    iss = issuer_factory()
    settings = with_refresh_token(iss, tmp_path)
    first = OidcTokenSource(settings, tmp_path / "state")
    await first.ensure_fresh()
    first.token_file.unlink()
    again = OidcTokenSource(settings, tmp_path / "state")  # a restart: only the files are left
    await again.ensure_fresh()
    assert iss.valid(again.token_file.read_text().strip())
    assert iss.token_requests == 2


async def test_a_revoked_refresh_token_gives_a_clear_error_without_secrets(
    issuer_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    iss = issuer_factory()
    settings = with_refresh_token(iss, tmp_path)
    assert settings.refresh_token_file is not None
    refresh = settings.refresh_token_file.read_text()
    iss.revoke(refresh)
    src = OidcTokenSource(settings, tmp_path / "state")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(TokenError) as err:
        await src.ensure_fresh()
    message = str(err.value)
    assert "invalid_grant" in message
    assert "revoked or has expired" in message
    assert iss.url in message
    for secret in (refresh, iss.client_secret):
        assert secret not in message
        assert secret not in caplog.text
    assert not src.token_file.exists()

    # The backend turns it into "unavailable", still without a secret.
    backend = HTCondorBackend(HTCondorConfig(), pool="p", token=src)
    with pytest.raises(BackendUnavailable) as unavailable:
        await backend.start()
    assert "invalid_grant" in str(unavailable.value)
    assert refresh not in str(unavailable.value)


async def test_replicas_sharing_a_state_dir_share_one_refresher(issuer_factory: Any, tmp_path: Path) -> None:
    iss = issuer_factory(access_lifetime=4)
    settings = with_refresh_token(iss, tmp_path, refresh_margin=2)
    state = tmp_path / "shared-state"
    replicas = [OidcTokenSource(settings, state) for _ in range(3)]
    deadline = time.monotonic() + 9  # a few lifetimes, every replica asking all the time
    while time.monotonic() < deadline:
        await asyncio.gather(*(r.ensure_fresh() for r in replicas))
        token = replicas[0].token_file.read_text().strip()
        assert iss.valid(token)
        await asyncio.sleep(0.1)
    refreshes = sum(r.refreshes for r in replicas)
    assert refreshes == iss.token_requests
    assert 2 <= refreshes <= 6, f"one refresh per ~2 s for all replicas together, not one each: {refreshes}"

    # What the lock prevents: replicas refreshing on their own with a rotating issuer lock each other out.
    alone = [OidcTokenSource(with_refresh_token(iss, tmp_path), tmp_path / f"own{i}") for i in range(2)]
    await alone[0].ensure_fresh()
    with pytest.raises(TokenError, match="invalid_grant"):
        await alone[1].ensure_fresh()


async def test_condor_commands_present_the_token(
    issuer_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import classad2  # noqa: F401
    except ImportError:
        missing_service("the HTCondor Python bindings the stand-ins use (pip install htcondor)")
    import htcondor_standin as standin

    for key, value in standin.install(tmp_path / "bin", tmp_path / "condor").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STANDIN_REQUIRE_TOKEN", "1")
    handle = [JobHandle("u", tmp_path, "1.0")]
    without = HTCondorBackend(HTCondorConfig(mode="remote", collector="ce:9619", schedd="ce"), pool="p")
    with pytest.raises(BackendUnavailable, match="AUTHENTICATE"):
        await without.poll(handle)
    iss = issuer_factory()
    src = OidcTokenSource(with_refresh_token(iss, tmp_path), tmp_path / "state")
    backend = HTCondorBackend(HTCondorConfig(mode="remote", collector="ce:9619", schedd="ce"), pool="p", token=src)
    await backend.start()
    try:
        assert await backend.poll(handle) == {}
    finally:
        await backend.close()


def test_secrets_have_no_command_line_option_and_the_site_file_only_names_them(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "pool: grid\nbackend: htcondor\nhtcondor:\n  mode: remote\n  collector: ce.example:9619\n  schedd: ce.example\n"
        "  token:\n    issuer: https://iam.example\n    client_id: ce-client\n"
        "    client_secret_file: /run/secrets/iam-client-secret\n"
    )
    settings = SubmitterSettings.load(site)
    assert settings.htcondor.token is not None
    assert settings.htcondor.token.client_secret_file == Path("/run/secrets/iam-client-secret")
    with pytest.raises(ValueError, match="client_secret"):
        SubmitterSettings.load(
            None, pool="g", htcondor={"token": {"issuer": "https://x", "client_id": "c", "client_secret": "s"}}
        )
    with pytest.raises(TokenError, match="https"):
        OidcTokenSource(TokenConfig(issuer="http://iam.example", client_id="c"), tmp_path)
