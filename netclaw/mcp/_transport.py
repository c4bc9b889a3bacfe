"""How netclaw reaches one configured MCP server: a stdio subprocess, streamable HTTP, or
the legacy HTTP+SSE transport of older servers; HTTP ones with the headers ``headers_env``
names and, with ``oauth``, OAuth 2.1 tokens (:mod:`._oauth`, passed in as ``auth``)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import httpx2
from mcp import StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from netclaw.config import McpServerConfig
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ToolError

HTTP_TIMEOUT_S = 30.0
SSE_READ_TIMEOUT_S = 300.0  # a quiet server stream is fine; the liveness probe notices a dead one


def transport_kind(config: McpServerConfig) -> str:
    """``stdio``, ``http`` (streamable HTTP) or ``sse`` (the legacy HTTP+SSE transport)."""
    if config.url is None:
        return "stdio"
    return "sse" if config.transport == "sse" else "http"


def open_transport(
    name: str, config: McpServerConfig, environ: Mapping[str, str], auth: httpx2.Auth | None = None
) -> Any:
    """A fresh transport (an async context manager the SDK's ``Client`` enters)."""
    kind = transport_kind(config)
    if kind == "stdio":
        assert config.command is not None
        env = {var: _secret(name, environ, src, f"env_env.{var}") for var, src in config.env_env.items()}
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=env or None, cwd=config.cwd
        )
        # The server's stderr joins ours: under systemd both land in the journal.
        return _naming(stdio_client(params, errlog=sys.stderr), config.command)
    assert config.url is not None
    headers = {
        header: _secret(name, environ, var, f"headers_env.{header}")
        for header, var in config.headers_env.items()
    }
    if kind == "sse":
        return sse_client(
            config.url,
            headers=headers,
            timeout=HTTP_TIMEOUT_S,
            sse_read_timeout=SSE_READ_TIMEOUT_S,
            auth=auth,
        )
    http = httpx2.AsyncClient(
        headers=headers, auth=auth, timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=SSE_READ_TIMEOUT_S)
    )
    return _owning(streamable_http_client(config.url, http_client=http), http)


class _naming:
    """The stdio transport, whose failure to start names the command: uvloop's spawning
    raises a missing or unrunnable program's OSError without its file name."""

    def __init__(self, inner: Any, command: str) -> None:
        self._inner = inner
        self._command = command

    async def __aenter__(self) -> Any:
        try:
            return await self._inner.__aenter__()
        except BaseException as exc:
            _name_file(exc, self._command)
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        result: bool | None = await self._inner.__aexit__(*exc)
        return result


def _name_file(exc: BaseException, command: str) -> None:
    if isinstance(exc, BaseExceptionGroup):  # anyio's task groups
        for inner in exc.exceptions:
            _name_file(inner, command)
    elif isinstance(exc, OSError) and exc.filename is None:
        exc.filename = command


class _owning:
    """The streamable-HTTP transport with the HTTP client it was given, closed with it."""

    def __init__(self, inner: Any, http: httpx2.AsyncClient) -> None:
        self._inner = inner
        self._http = http

    async def __aenter__(self) -> Any:
        await self._http.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._http.aclose()
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return bool(await self._inner.__aexit__(*exc))
        finally:
            await self._http.aclose()


def _secret(name: str, environ: Mapping[str, str], var: str, key: str) -> str:
    value = read_secret(var, environ)
    if value is None:
        raise ToolError(f"mcp.servers.{name}.{key}: {var} is not set; {where_to_put(var)}")
    return value
