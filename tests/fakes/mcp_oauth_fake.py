"""An MCP server that wants OAuth 2.1, and its own authorization server, written with the
real SDK (its auth routes: metadata discovery, dynamic client registration, /authorize
with PKCE, /token for codes and refresh tokens) and run as a real subprocess:

    python -m tests.fakes.mcp_oauth_fake --port 0 [--token-ttl 3600] [--events FILE]

It prints ``listening on http://127.0.0.1:<port>/mcp`` once it accepts connections.
``/authorize`` approves at once (there is no person to ask): it redirects straight back to
the client's ``redirect_uri`` with a code. Access tokens live ``--token-ttl`` seconds.
Each registration, authorization, code exchange and refresh appends a line
(``register``, ``authorize``, ``token``, ``refresh``) to ``--events``, so tests can count
them. Tool: ``whoami`` (the client id the token was issued to).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import socket
import sys
import time
from pathlib import Path

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class AutoApprove:
    """An authorization server whose resource owner always says yes."""

    def __init__(self, ttl: int, events: Path | None) -> None:
        self.ttl = ttl
        self.events = events
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    def _event(self, what: str) -> None:
        if self.events is not None:
            with self.events.open("a") as fh:
                fh.write(what + "\n")

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self._event("register")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self._event("authorize")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.ttl
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.ttl,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self._event("token")
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated
        self._event("refresh")
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-ttl", type=int, default=3600)
    parser.add_argument("--events", type=Path, default=None)
    args = parser.parse_args(argv)
    port = args.port or _free_port()
    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "oauth-fake",
        auth_server_provider=AutoApprove(args.token_ttl, args.events),
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["mcp"]),
            required_scopes=["mcp"],
            validate_token_resource=False,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """The client the caller's token was issued to."""
        token = get_access_token()
        return token.client_id if token is not None else "nobody"

    app = server.streamable_http_app(streamable_http_path="/mcp")
    import uvicorn

    served = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )

    async def serve() -> None:
        task = asyncio.ensure_future(served.serve())
        while not served.started and not task.done():  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.02)
        print(f"listening on {base}/mcp", flush=True)
        await task

    asyncio.run(serve())
    sys.exit(0)


if __name__ == "__main__":
    main()
