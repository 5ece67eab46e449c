"""The bearer token the condor commands present to an HTCondor-CE, obtained from an OIDC issuer.

Why here and not in a sidecar: the old condor-CE plugin's replicas each refreshed the token on
their own and, with an issuer that rotates refresh tokens, invalidated each other's. So there is
exactly one refresher per state directory: replicas sharing it take an ``flock`` on
``<token dir>/refresh.lock``, re-read what the last holder wrote, and refresh only when it is still
due. The newest refresh token (rotated by the issuer) is kept next to the access token (0600), so
whichever replica refreshes next uses the one the issuer still accepts.

- discovery: ``<issuer>/.well-known/openid-configuration`` → ``token_endpoint``;
- grant: refresh_token (when a refresh token is configured) or client_credentials, the client
  authenticated with HTTP Basic (client_secret_basic);
- secrets from files or environment variables only; token values never reach logs, metrics or
  errors (messages carry the issuer, the grant and the OAuth error code);
- the access token is written atomically, 0600, to ``token_file``; the condor commands find it via
  ``BEARER_TOKEN_FILE`` (WLCG discovery) and ``_CONDOR_SCITOKENS_FILE`` (HTCondor's SCITOKENS method).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote_plus, urlsplit

import aiohttp
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.config_files import renamed
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

LOCK_WAIT = 60.0
"""Seconds to wait for another replica's refresh before giving up this round."""
MIN_SLEEP = 1.0
RETRY_MAX = 60.0


class TokenConfig(BaseModel):
    """How the submitter obtains the bearer token the condor commands present: the ``htcondor.token``
    settings section and what :class:`OidcTokenSource` takes.

    Secrets come from files or the environment, never from the command line or the config file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str
    """OIDC issuer URL; its token endpoint is found via ``<issuer>/.well-known/openid-configuration``."""
    client_id: str
    client_secret_file: Path | None = None
    client_secret_env: str = "INTERLINK_HTCONDOR_CLIENT_SECRET"
    """Name of the environment variable holding the client secret (when no file is given)."""
    refresh_token_file: Path | None = None
    refresh_token_env: str = "INTERLINK_HTCONDOR_REFRESH_TOKEN"
    grant: Literal["auto", "refresh_token", "client_credentials"] = "auto"
    """auto: the refresh-token grant when a refresh token is configured, else client credentials."""
    scope: str = "compute.create compute.read compute.modify compute.cancel"
    audience: str | None = None
    token_file: Path | None = None
    """Where the access token is written (0600); default ``<state_dir>/htcondor/token``."""
    refresh_margin_s: float = Field(300.0, ge=0, validation_alias=renamed("refresh_margin_s", "refresh_margin"))
    """Refresh this many seconds before expiry (at most half the token's lifetime)."""
    ca_file: Path | None = None
    http_timeout_s: float = Field(30.0, gt=0, validation_alias=renamed("http_timeout_s", "http_timeout"))


class TokenError(Exception):
    """The token could not be obtained; the message never contains a secret."""


@dataclass(frozen=True, slots=True)
class TokenState:
    """What a refresh leaves behind (the access token itself lives in its own file)."""

    expires_at: float
    obtained_at: float
    refresh_token: str | None = None

    def due(self, now: float, margin: float) -> bool:
        lifetime = max(0.0, self.expires_at - self.obtained_at)
        return now >= self.expires_at - min(margin, lifetime / 2)


def _read_secret(path: Path | None, env: str, what: str) -> str | None:
    if path is not None:
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise TokenError(f"cannot read the {what} file {path}: {exc.strerror}") from None
        if not value:
            raise TokenError(f"the {what} file {path} is empty")
        return value
    value = os.environ.get(env, "").strip()
    return value or None


def _write_private(path: Path, data: str) -> None:
    """Atomically replace ``path`` with ``data``, mode 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class OidcTokenSource:
    """Keeps ``token_file`` holding a valid access token; see the module docstring."""

    def __init__(
        self,
        settings: TokenConfig,
        state_dir: Path,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.dir = (settings.token_file.parent if settings.token_file else state_dir / "htcondor").resolve()
        self.token_file = settings.token_file or self.dir / "token"
        self._state_file = self.dir / "token.state.json"
        self._lock_file = self.dir / "refresh.lock"
        self._clock = clock
        self._endpoint: str | None = None
        self._state: TokenState | None = None
        self._guard = asyncio.Lock()
        self.refreshes = 0
        """Refreshes this process made (tests and metrics read it)."""
        _check_issuer(settings.issuer)

    # Public -----------------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """Environment for the condor commands: where they find the token."""
        path = str(self.token_file)
        return {"BEARER_TOKEN_FILE": path, "_CONDOR_SCITOKENS_FILE": path}

    @property
    def expires_at(self) -> float | None:
        return self._state.expires_at if self._state else None

    async def ensure_fresh(self) -> None:
        """Return at once when the token is valid for longer than the margin; else refresh (once for all)."""
        state = self._state
        if state is not None and not state.due(self._clock.time(), self.settings.refresh_margin_s):
            return
        async with self._guard:
            await asyncio.to_thread(self.dir.mkdir, parents=True, exist_ok=True, mode=0o700)
            self._state = await self._load()
            if self._state is not None and not self._state.due(self._clock.time(), self.settings.refresh_margin_s):
                return
            fd = await asyncio.to_thread(self._lock)
            try:
                # Another replica may have refreshed while we waited for the lock.
                self._state = await self._load()
                if self._state is not None and not self._state.due(self._clock.time(), self.settings.refresh_margin_s):
                    return
                self._state = await self._refresh(self._state)
            finally:
                await asyncio.to_thread(_unlock, fd)

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh before expiry until ``stop``; failures are logged (without secrets) and retried."""
        delay = MIN_SLEEP
        while not stop.is_set():
            try:
                await self.ensure_fresh()
                delay = MIN_SLEEP
                state = self._state
                wait = RETRY_MAX if state is None else self._seconds_until_due(state)
            except TokenError as exc:
                log.warning("bearer token refresh failed: %s (retrying in %.0fs)", exc, delay)
                wait, delay = delay, min(delay * 2, RETRY_MAX)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(MIN_SLEEP, wait)):  # not wait_for: on 3.11 it can swallow a cancel
                    await stop.wait()

    # Internals --------------------------------------------------------------------------------

    def _seconds_until_due(self, state: TokenState) -> float:
        lifetime = max(0.0, state.expires_at - state.obtained_at)
        return state.expires_at - min(self.settings.refresh_margin_s, lifetime / 2) - self._clock.time()

    def _lock(self) -> int:
        fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TokenError(f"another process holds {self._lock_file} for more than {LOCK_WAIT:g}s") from None
                time.sleep(0.05)

    async def _load(self) -> TokenState | None:
        def read() -> TokenState | None:
            try:
                raw = json.loads(self._state_file.read_text())
            except (OSError, ValueError):
                return None
            rotated = raw.get("refresh_token") if isinstance(raw, dict) else None
            rotated = rotated if isinstance(rotated, str) and rotated else None
            if not self.token_file.exists():
                # No access token to use, but the issuer may have rotated the refresh token: the configured
                # one is then stale (invalid_grant). A state that is due at once keeps the rotated one.
                return TokenState(0.0, 0.0, rotated) if rotated else None
            try:
                return TokenState(float(raw["expires_at"]), float(raw["obtained_at"]), rotated)
            except (KeyError, TypeError, ValueError):
                return TokenState(0.0, 0.0, rotated) if rotated else None

        return await asyncio.to_thread(read)

    async def _discover(self, session: aiohttp.ClientSession, tls: ssl.SSLContext | bool) -> str:
        if self._endpoint is not None:
            return self._endpoint
        url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            async with session.get(url, ssl=tls) as resp:
                status, body = resp.status, await _json(resp)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TokenError(f"cannot reach the OIDC issuer {self.settings.issuer}: {type(exc).__name__}") from None
        if status != 200:
            raise TokenError(f"OIDC discovery at {url} answered HTTP {status}")
        endpoint = body.get("token_endpoint")
        if not isinstance(endpoint, str):
            raise TokenError(f"OIDC discovery at {url} has no token_endpoint")
        _check_issuer(endpoint)
        self._endpoint = endpoint
        return endpoint

    def _grant(self, previous: TokenState | None) -> tuple[str, dict[str, str], list[str]]:
        """(grant name, form fields, secrets to keep out of messages)."""
        cfg = self.settings
        refresh = (previous.refresh_token if previous else None) or _read_secret(
            cfg.refresh_token_file, cfg.refresh_token_env, "refresh token"
        )
        grant: str = cfg.grant
        if grant == "auto":
            grant = "refresh_token" if refresh else "client_credentials"
        form: dict[str, str] = {"grant_type": grant}
        if grant == "refresh_token":
            if not refresh:
                raise TokenError(f"no refresh token: set {cfg.refresh_token_env} or htcondor.token.refresh_token_file")
            form["refresh_token"] = refresh
        if cfg.scope:
            form["scope"] = cfg.scope
        if cfg.audience:
            form["audience"] = cfg.audience
        return grant, form, [refresh] if refresh else []

    async def _refresh(self, previous: TokenState | None) -> TokenState:
        cfg = self.settings
        secret = _read_secret(cfg.client_secret_file, cfg.client_secret_env, "client secret")
        grant, form, secrets = self._grant(previous)
        if secret:
            secrets.append(secret)
        tls: ssl.SSLContext | bool = True
        if cfg.ca_file:
            try:
                tls = ssl.create_default_context(cafile=str(cfg.ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise TokenError(f"cannot use the CA file {cfg.ca_file}: {exc}") from None
        if not secret:
            form["client_id"] = cfg.client_id  # a public client
        headers = {"Authorization": _basic_auth(cfg.client_id, secret)} if secret else {}
        timeout = aiohttp.ClientTimeout(total=cfg.http_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            endpoint = await self._discover(session, tls)
            try:
                async with session.post(endpoint, data=form, headers=headers, ssl=tls) as resp:
                    status, body = resp.status, await _json(resp)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise TokenError(f"cannot reach the token endpoint of {cfg.issuer}: {type(exc).__name__}") from None
        if status != 200 or "access_token" not in body:
            code = _scrub(str(body.get("error") or f"HTTP {status}"), secrets)
            detail = _scrub(str(body.get("error_description") or ""), secrets)
            hint = " (the refresh token was revoked or has expired: issue a new one)" if code == "invalid_grant" else ""
            raise TokenError(
                f"the issuer {cfg.issuer} refused the {grant} grant: {code}{': ' + detail if detail else ''}{hint}"
            )
        access = body["access_token"]
        if not isinstance(access, str) or not access:
            raise TokenError(f"the issuer {cfg.issuer} returned an empty access token")
        now = self._clock.time()
        try:
            lifetime = float(body.get("expires_in") or 3600)
        except (TypeError, ValueError):
            lifetime = 3600.0
        rotated = body.get("refresh_token") if isinstance(body.get("refresh_token"), str) else None
        keep = rotated or (form.get("refresh_token") if grant == "refresh_token" else None)
        state = TokenState(now + lifetime, now, keep)
        await asyncio.to_thread(self._store, access, state)
        self.refreshes += 1
        log.info("bearer token from %s refreshed (%s grant), valid for %.0fs", cfg.issuer, grant, lifetime)
        return state

    def _store(self, access: str, state: TokenState) -> None:
        # The token first: a reader that sees the new state must find the new token.
        _write_private(self.token_file, access + "\n")
        _write_private(
            self._state_file,
            json.dumps(
                {"expires_at": state.expires_at, "obtained_at": state.obtained_at, "refresh_token": state.refresh_token}
            ),
        )


def _unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


async def _json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        data = await resp.json(content_type=None)
    except (ValueError, aiohttp.ClientError):
        return {}
    return data if isinstance(data, dict) else {}


def _basic_auth(client_id: str, secret: str) -> str:
    """client_secret_basic (RFC 6749 2.3.1): both parts form-urlencoded, then HTTP Basic."""
    raw = f"{quote_plus(client_id)}:{quote_plus(secret)}".encode()
    return "Basic " + base64.b64encode(raw).decode()


def _scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text[:300]


def _check_issuer(url: str) -> None:
    """HTTPS only, except on loopback (a test issuer or a local proxy)."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return
    raise TokenError(f"OIDC URL {url!r} must use https:// (http:// only on loopback)")
