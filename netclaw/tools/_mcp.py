"""MCP servers as tools: one supervised client session per configured server.

Each :class:`McpServer` owns one connection (the official ``mcp`` SDK's ``Client`` over
stdio or streamable HTTP) inside one task on the I/O loop — the SDK's transports are
anyio context managers that must be entered and left by the same task. The task is a
supervisor: connect, list the tools, then watch (a ping every ``PING_INTERVAL_S``, or a
call that finds the connection gone); when the server fails to start, exits or stops
answering, its tools disappear from the model's list and the task reconnects with
backoff, and they come back when it answers again. Nothing here can stop the daemon.

:class:`~netclaw.tools._mcp_hub.McpHub` is the registry's view of all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx2
import mcp_types as mt
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost

from netclaw import __version__
from netclaw.config import McpServerConfig
from netclaw.credentials import read_secret, where_to_put
from netclaw.errors import ToolError
from netclaw.retry import RetryPolicy, backoff_delay
from netclaw.runtime import cancel_and_wait
from netclaw.tools._mcp_content import ServerTool, argument_problem, exposed_tools, result_text
from netclaw.tools._mcp_hub import McpServerStatus, McpState
from netclaw.tools._registry import Tool, ToolContext

log = logging.getLogger(__name__)

PING_INTERVAL_S = 10.0  # how soon a server that died quietly between calls is noticed
PING_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 30.0
RESTART_POLICY = RetryPolicy(max_retries=1_000_000, base_delay_s=1.0, max_delay_s=60.0)


class ServerGone(Exception):
    """The connection died under a call: the supervisor reconnects."""


class McpServer:
    """One configured server, supervised."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        on_tools_changed: Callable[[], None] = lambda: None,
        environ: Mapping[str, str] = os.environ,
        policy: RetryPolicy = RESTART_POLICY,
    ) -> None:
        self.name = name
        self.config = config
        self._environ = environ
        self._policy = policy
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._tools: dict[str, ServerTool] = {}
        self._state: McpState = "starting"
        self._error: str | None = None
        self._restarts = 0
        self._attempted = asyncio.Event()  # the first connection attempt ended (either way)
        self._broken = asyncio.Event()  # a call found the connection gone
        self._relist = asyncio.Event()  # the server said its tools changed
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- the registry's view --------------------------------------------------------------

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.config.url is not None else "stdio"

    def status(self) -> McpServerStatus:
        error = None if self._state == "up" else self._error
        return McpServerStatus(
            self.name, self.transport, self._state, len(self._tools), self._restarts, error
        )

    def tools(self) -> list[Tool]:
        return [self._as_tool(t) for t in self._tools.values()] if self._state == "up" else []

    def _as_tool(self, tool: ServerTool) -> Tool:
        async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
            return await self.call(tool, args)

        return Tool(tool.name, tool.description, tool.schema, handler)

    async def call(self, tool: ServerTool, args: Mapping[str, Any]) -> str:
        """Run one call; every failure is a ToolError the model sees."""
        problem = argument_problem(tool.schema, args)
        if problem is not None:
            raise ToolError(f"invalid arguments for {tool.name}: {problem}")
        client = self._client
        if client is None or self._state != "up":
            raise ToolError(
                f"MCP server {self.name!r} is not connected right now ({self._error or 'starting'})"
            )
        timeout = self.config.timeout_s
        try:
            async with asyncio.timeout(timeout):
                result = await client.call_tool(tool.remote_name, dict(args))
        except TimeoutError as exc:
            raise ToolError(
                f"{tool.name}: MCP server {self.name!r} did not answer within {timeout:g}s"
            ) from exc
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:  # the server exited under us: reconnect
                self._broken.set()
                raise ToolError(
                    f"MCP server {self.name!r} went away during {tool.name}; it is being restarted"
                ) from exc
            raise ToolError(f"{tool.name} failed on MCP server {self.name!r}: {exc.message}") from exc
        except (OSError, httpx2.HTTPError, RuntimeError, EOFError) as exc:
            # The transport is gone (process exited, connection refused): reconnect.
            self._broken.set()
            raise ToolError(
                f"MCP server {self.name!r} went away during {tool.name}: {_describe(exc)}"
            ) from exc
        text = result_text(result)
        if result.is_error:
            raise ToolError(f"{tool.name} reported an error: {text}")
        return text

    # -- supervision ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"mcp:{self.name}")

    async def first_attempt(self) -> None:
        await self._attempted.wait()

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._state = "stopped"

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                await self._connected_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure of a server means "reconnect"
                self._error = _describe(exc)
                # A server that was up starts its backoff afresh; one that never came up backs off.
                failures = 1 if self._state == "up" else failures + 1
                log.warning("MCP server %s is down: %s", self.name, self._error)
            finally:
                self._client = None
                was_up = self._state == "up"
                self._state = "down"
                if self._tools:
                    self._tools = {}
                    self._on_tools_changed()
                self._attempted.set()
            if was_up:
                self._restarts += 1
            delay = backoff_delay(max(failures - 1, 0), self._policy)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _connected_once(self) -> None:
        client = Client(
            self._transport(),
            message_handler=self._on_message,
            client_info=mt.Implementation(name="netclaw", version=__version__),
            cache=None,  # list_changed is ours to act on; no stale tool list
        )
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await client.__aenter__()
        try:
            self._client = client
            await self._list_tools(client)
            self._state = "up"
            self._error = None
            self._attempted.set()
            log.info("MCP server %s is up: %d tool(s)", self.name, len(self._tools))
            listener = asyncio.ensure_future(self._listen(client))
            try:
                await self._watch(client)
            finally:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener
        finally:
            self._client = None
            with contextlib.suppress(BaseException):
                await client.__aexit__(None, None, None)

    async def _watch(self, client: Client) -> None:
        """Return (raise) when the connection is lost; relist tools when told to."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_INTERVAL_S):
                    await _first(self._broken.wait(), self._relist.wait())
            if self._broken.is_set():
                self._broken.clear()
                raise ServerGone("the connection was lost")
            if self._relist.is_set():
                self._relist.clear()
                await self._list_tools(client)
                continue
            await self._probe(client)

    async def _probe(self, client: Client) -> None:
        """Is it still answering? A ``tools/list`` (``ping`` is gone from 2026-07-28 on),
        which also notices a tool list that changed without a word."""
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await self._list_tools(client, quiet=True)
        except TimeoutError as exc:
            raise ServerGone(f"no answer within {PING_TIMEOUT_S:g}s") from exc

    async def _listen(self, client: Client) -> None:
        """Tool-list changes on a 2026-07-28 connection come on a ``subscriptions/listen``
        stream; older servers send ``notifications/tools/list_changed`` (``_on_message``)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _event in changes:
                    self._relist.set()
        except ListenNotSupportedError:
            return
        except SubscriptionLost:
            self._broken.set()  # the stream dropped with the connection: reconnect now
        except (MCPError, OSError) as exc:
            log.debug("MCP server %s: no tool-list changes from now on: %s", self.name, _describe(exc))

    async def _list_tools(self, client: Client, *, quiet: bool = False) -> None:
        listed: list[mt.Tool] = []
        cursor: str | None = None
        while True:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        kept, skipped = exposed_tools(self.name, listed, self.config.tools)
        tools = {t.name: t for t in kept}
        if quiet and tools == self._tools:
            return
        for line in skipped:
            log.warning("MCP server %s: skipping tool %s", self.name, line)
        self._tools = tools
        self._on_tools_changed()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport said %s", self.name, _describe(message))

    def _transport(self) -> Any:
        config = self.config
        if config.url is not None:
            headers = {
                header: self._secret(var, f"headers_env.{header}")
                for header, var in config.headers_env.items()
            }
            http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
            return streamable_http_client(config.url, http_client=http)
        assert config.command is not None
        env = {name: self._secret(var, f"env_env.{name}") for name, var in config.env_env.items()}
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=env or None, cwd=config.cwd
        )
        # The server's stderr joins ours: under systemd both land in the journal.
        return stdio_client(params, errlog=sys.stderr)

    def _secret(self, var: str, key: str) -> str:
        value = read_secret(var, self._environ)
        if value is None:
            raise ToolError(f"mcp.servers.{self.name}.{key}: {var} is not set; {where_to_put(var)}")
        return value


async def _first(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _describe(exc: BaseException) -> str:
    """One line for a person; exception groups (anyio task groups) say what is inside."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, ToolError) else f"{type(exc).__name__}: {text}"


__all__: Sequence[str] = ["McpServer"]
