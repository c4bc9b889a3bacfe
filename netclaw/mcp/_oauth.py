"""OAuth 2.1 for remote MCP servers: the authorization-code grant with PKCE, dynamic client
registration where the authorization server offers it (or a pre-registered client id),
tokens kept privately and refreshed.

- ``netclaw mcp login NAME`` (:func:`login`) runs the flow once from the CLI: it listens
  on ``127.0.0.1:<oauth.redirect_port>/callback``, prints the authorization URL for a
  person to open, takes the code the browser brings back, and stores the tokens.
- The daemon (:func:`daemon_auth`) uses the stored tokens on every request and refreshes
  them when they expire (a refreshed token is stored again). It never asks a person: with
  no tokens, or tokens the server no longer takes, the server is down with a detail
  saying to run ``netclaw mcp login NAME``.

Tokens live in ``<data_dir>/mcp-oauth/<name>.json`` (mode 0600, in a 0700 folder), with
the client registration and the URL they are for: a changed ``url`` needs a new login.
The SDK's ``OAuthClientProvider`` drives the protocol (discovery, registration, PKCE,
refresh); this module owns storage, the login's two ends, and the daemon's refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2
from aiohttp import web
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from netclaw.config import McpServerConfig
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ToolError

log = logging.getLogger("netclaw.mcp")

LOGIN_TIMEOUT_S = 300.0


class LoginNeeded(ToolError):
    """No usable tokens: a person must run ``netclaw mcp login NAME``."""


def token_path(data_dir: Path, name: str) -> Path:
    return data_dir / "mcp-oauth" / f"{name}.json"


class TokenFile:
    """The SDK's ``TokenStorage`` over one private JSON file (written whole, atomically)."""

    def __init__(self, path: Path, server_url: str, redirect_uri: str | None = None) -> None:
        self.path = path
        self.server_url = server_url
        self.redirect_uri = redirect_uri  # a registration for another callback is not reused

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("server_url") != self.server_url:
            return {}  # for another server (the url changed): a new login is needed
        return data

    def _write(self, **changes: Any) -> None:
        self._save({**self._read(), "server_url": self.server_url, **changes})

    def _save(self, data: dict[str, Any]) -> None:
        """Replace the file with ``data``. The data_dir is made private too when this makes
        it (a login before the daemon's first start): ``mkdir(parents=True)`` gives the
        parents it creates the default mode, not ``mode``."""
        self.path.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path.parent.mkdir(exist_ok=True, mode=0o700)
        part = self.path.with_name(self.path.name + ".part")
        with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            json.dump(data, fh)
        os.replace(part, self.path)

    def has_tokens(self) -> bool:
        return "tokens" in self._read()

    def expires_at(self) -> float | None:
        value = self._read().get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    def forget_tokens(self) -> None:
        """Drop the tokens, keep the client's registration. (Written whole: merged into
        what the file holds, as ``_write`` does, the tokens would stay.)"""
        data = self._read()
        if {"tokens", "expires_at"} & data.keys():
            self._save({k: v for k, v in data.items() if k not in ("tokens", "expires_at")})

    # -- TokenStorage ----------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        raw = (await asyncio.to_thread(self._read)).get("tokens")
        return OAuthToken.model_validate(raw) if raw else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires = time.time() + tokens.expires_in if tokens.expires_in else None
        await asyncio.to_thread(
            self._write, tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = (await asyncio.to_thread(self._read)).get("client_info")
        if not raw:
            return None
        info = OAuthClientInformationFull.model_validate(raw)
        registered = {str(u) for u in info.redirect_uris or ()}
        if self.redirect_uri is not None and registered and self.redirect_uri not in registered:
            return None  # registered for another callback address: register again
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await asyncio.to_thread(
            self._write, client_info=client_info.model_dump(mode="json", exclude_none=True)
        )


class _Provider(OAuthClientProvider):
    """The SDK's provider, plus what it forgets across restarts: when the stored access
    token expires (so an expired one is refreshed before use, not sent and refused)."""

    def __init__(self, store: TokenFile, **kwargs: Any) -> None:
        super().__init__(storage=store, **kwargs)
        self._store = store

    async def _initialize(self) -> None:
        await super()._initialize()
        self.context.token_expiry_time = await asyncio.to_thread(self._store.expires_at)


def _metadata(name: str, config: McpServerConfig, redirect_uri: str) -> OAuthClientMetadata:
    oauth = config.oauth
    assert oauth is not None
    return OAuthClientMetadata(
        redirect_uris=[redirect_uri],
        client_name=oauth.client_name,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none" if oauth.client_id is None else None,
        scope=" ".join(oauth.scopes) if oauth.scopes else None,
    )


def redirect_uri(port: int) -> str:
    return f"http://127.0.0.1:{port}/callback"


async def _preregistered(
    name: str, config: McpServerConfig, environ: Mapping[str, str], store: TokenFile, uri: str
) -> None:
    """A client id from the config (an authorization server without registration)."""
    oauth = config.oauth
    assert oauth is not None
    if oauth.client_id is None:
        return
    secret = None
    if oauth.client_secret_env is not None:
        secret = read_secret(oauth.client_secret_env, environ)
        if secret is None:
            raise ToolError(
                f"mcp.servers.{name}.oauth.client_secret_env: {oauth.client_secret_env} is not set; "
                f"{where_to_put(oauth.client_secret_env)}"
            )
    await store.set_client_info(
        OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=secret,
            redirect_uris=[uri],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="client_secret_post" if secret else "none",
        )
    )


async def daemon_auth(
    name: str, config: McpServerConfig, data_dir: Path, environ: Mapping[str, str]
) -> httpx2.Auth:
    """The auth the daemon's connection uses: stored tokens, refreshed; never a person.
    LoginNeeded when there are no tokens yet (before any network)."""
    assert config.url is not None and config.oauth is not None
    uri = redirect_uri(config.oauth.redirect_port)
    store = TokenFile(token_path(data_dir, name), config.url, uri)
    if not await asyncio.to_thread(store.has_tokens):
        raise LoginNeeded(f"MCP server {name} needs a login: run `netclaw mcp login {name}`")
    await _preregistered(name, config, environ, store, uri)

    async def refuse(url: str) -> None:
        raise LoginNeeded(
            f"MCP server {name} refused the stored token and it could not be refreshed: "
            f"run `netclaw mcp login {name}`"
        )

    async def no_callback() -> AuthorizationCodeResult:
        raise LoginNeeded(f"MCP server {name} needs a login: run `netclaw mcp login {name}`")

    return _Provider(
        store,
        server_url=config.url,
        client_metadata=_metadata(name, config, uri),
        redirect_handler=refuse,
        callback_handler=no_callback,
    )


async def login(
    name: str,
    config: McpServerConfig,
    data_dir: Path,
    environ: Mapping[str, str],
    *,
    show: Callable[[str], None],
    connect: Callable[[httpx2.Auth], Awaitable[int]],
    timeout_s: float = LOGIN_TIMEOUT_S,
) -> Path:
    """Run the authorization-code flow once: ``show`` gets the URL a person must open;
    ``connect`` makes one MCP connection with the auth (the flow runs inside it) and says
    how many tools it found. The stored tokens' path is returned."""
    assert config.url is not None and config.oauth is not None
    callback = _Callback()
    port = await callback.start(config.oauth.redirect_port)
    try:
        uri = redirect_uri(port)
        store = TokenFile(token_path(data_dir, name), config.url, uri)
        await asyncio.to_thread(store.forget_tokens)  # a login starts afresh
        await _preregistered(name, config, environ, store, uri)

        async def redirect(url: str) -> None:
            show(url)

        async def wait_code() -> AuthorizationCodeResult:
            try:
                return await asyncio.wait_for(callback.result, timeout_s)
            except TimeoutError as exc:
                raise ToolError(f"no answer came back to {uri} within {timeout_s:g}s") from exc

        provider = _Provider(
            store,
            server_url=config.url,
            client_metadata=_metadata(name, config, uri),
            redirect_handler=redirect,
            callback_handler=wait_code,
        )
        await connect(provider)
        if not await asyncio.to_thread(store.has_tokens):
            raise ToolError(f"MCP server {name} let us in without a token: it needs no login")
        return store.path
    finally:
        await callback.stop()


class _Callback:
    """The login's local end: ``GET /callback?code=…&state=…`` from the person's browser."""

    def __init__(self) -> None:
        self.result: asyncio.Future[AuthorizationCodeResult] = asyncio.get_running_loop().create_future()
        self._runner: web.AppRunner | None = None

    async def start(self, port: int) -> int:
        """Listen on 127.0.0.1:``port`` (0: any free port); the port it got."""
        sock = socket.socket()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            sock.close()
            raise ToolError(
                f"cannot listen on 127.0.0.1:{port} for the login's answer ({exc}); "
                "free that port or set oauth.redirect_port"
            ) from exc
        app = web.Application()
        app.router.add_get("/callback", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        return int(sock.getsockname()[1])

    async def _handle(self, request: web.Request) -> web.Response:
        query = request.query
        if "error" in query:
            problem = f"{query['error']}: {query.get('error_description', '')}".strip(": ")
            if not self.result.done():
                self.result.set_exception(ToolError(f"the authorization server said no ({problem})"))
            return web.Response(text=f"netclaw: the login failed ({problem}).", status=400)
        code = query.get("code")
        if not code:
            return web.Response(text="netclaw: this address expects ?code=...&state=...", status=400)
        if not self.result.done():
            self.result.set_result(
                AuthorizationCodeResult(code=code, state=query.get("state"), iss=query.get("iss"))
            )
        return web.Response(text="netclaw: you are logged in. You can close this tab.")

    async def stop(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
        if not self.result.done():
            self.result.cancel()
