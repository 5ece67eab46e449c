"""A REAL OAuth2/OIDC token issuer for the token tests: Authlib's authorization server in a Flask app.

Not a hand-written HTTP stub: grant handling, client authentication (client_secret_basic), error
responses (``invalid_grant``, ``invalid_client``) and token generation are Authlib's. The test side
only stores clients and tokens in memory and, like an IAM issuer, rotates refresh tokens: a refresh
revokes the refresh token it used, so two replicas refreshing on their own lock each other out.

    with Issuer(access_lifetime=4) as iss:          # serves http://127.0.0.1:<free port>
        rt = iss.refresh_token_for("ce-client")    # what an admin would hand over once
        iss.revoke(rt); iss.token_requests; iss.valid(access_token)
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from flask import Flask, jsonify
from werkzeug.serving import make_server

SCOPE = "compute.create compute.read compute.modify compute.cancel"


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str = field(repr=False)
    grant_types: tuple[str, ...] = ("refresh_token", "client_credentials")
    scope: str = SCOPE

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return ""

    def get_allowed_scope(self, scope: str) -> str:
        allowed = set(self.scope.split())
        return " ".join(s for s in (scope or self.scope).split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class Token:
    client_id: str
    access_token: str
    refresh_token: str | None
    scope: str
    issued_at: float
    expires_in: int
    refresh_revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope


@dataclass
class User:
    name: str = "grid-robot"

    def get_user_id(self) -> str:
        return self.name


@dataclass
class Store:
    clients: dict[str, Client] = field(default_factory=dict)
    tokens: list[Token] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    token_requests: int = 0


class Issuer:
    """The issuer on a free loopback port (a context manager; see the module docstring)."""

    def __init__(self, *, access_lifetime: int = 3600, client_id: str = "ce-client") -> None:
        self.store = Store()
        self.client_id = client_id
        self.client_secret = secrets.token_urlsafe(24)
        self.store.clients[client_id] = Client(client_id, self.client_secret)
        self.access_lifetime = access_lifetime
        self.app = self._app()
        self._server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-issuer", daemon=True)

    def __enter__(self) -> Issuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
        self._server.server_close()

    # What an IAM administrator does ----------------------------------------------------------

    def refresh_token_for(self, client_id: str, scope: str = SCOPE) -> str:
        """A refresh token issued out of band (as after the device-code flow an IAM user runs once)."""
        token = Token(client_id, secrets.token_urlsafe(16), secrets.token_urlsafe(32), scope, time.time(), 1)
        with self.store.lock:
            self.store.tokens.append(token)
        return str(token.refresh_token)

    def revoke(self, refresh_token: str) -> None:
        with self.store.lock:
            for t in self.store.tokens:
                if t.refresh_token == refresh_token:
                    t.refresh_revoked = True

    def valid(self, access_token: str) -> bool:
        now = time.time()
        with self.store.lock:
            return any(t.access_token == access_token and now < t.issued_at + t.expires_in for t in self.store.tokens)

    @property
    def token_requests(self) -> int:
        return self.store.token_requests

    # The Flask app ----------------------------------------------------------------------------

    def _app(self) -> Flask:
        app = Flask("oidc-issuer")
        app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {
            "refresh_token": self.access_lifetime,
            "client_credentials": self.access_lifetime,
        }
        app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True  # a refresh returns a new (rotated) refresh token
        store = self.store

        def query_client(client_id: str) -> Client | None:
            return store.clients.get(client_id)

        def save_token(token: dict[str, Any], request: Any) -> None:
            record = Token(
                request.client.client_id,
                token["access_token"],
                token.get("refresh_token"),
                token.get("scope", ""),
                time.time(),
                int(token["expires_in"]),
            )
            with store.lock:
                store.tokens.append(record)

        class RotatingRefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
            INCLUDE_NEW_REFRESH_TOKEN = True
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]

            def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
                with store.lock:
                    for t in store.tokens:
                        if t.refresh_token == refresh_token and not t.refresh_revoked:
                            return t
                return None

            def authenticate_user(self, credential: Token) -> User:
                return User()

            def revoke_old_credential(self, credential: Token) -> None:
                with store.lock:
                    credential.refresh_revoked = True

        class ClientCredentials(grants.ClientCredentialsGrant):  # type: ignore[misc]
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]

        server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
        server.register_grant(RotatingRefreshGrant)
        server.register_grant(ClientCredentials)

        @app.get("/.well-known/openid-configuration")
        def discovery() -> Any:
            return jsonify(
                issuer=self.url,
                token_endpoint=f"{self.url}/token",
                grant_types_supported=["refresh_token", "client_credentials"],
                token_endpoint_auth_methods_supported=["client_secret_basic"],
            )

        @app.post("/token")
        def token() -> Any:
            with store.lock:
                store.token_requests += 1
            return server.create_token_response()

        return app
