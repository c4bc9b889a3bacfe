"""One configured MCP server, supervised: its connection, its tools, and every call to it.

Each :class:`McpServer` owns one connection (the official ``mcp`` SDK's ``Client`` over
stdio, streamable HTTP or HTTP+SSE) inside one task on the I/O loop — the SDK's
transports are anyio context managers that must be entered and left by the same task,
and whose task groups cancel *that* task when the transport fails. The task is a
supervisor: connect, list the tools, then watch (a probe every ``PING_INTERVAL_S``, a
call or a change stream that finds the connection gone); when the server fails to start,
exits or stops answering, its tools disappear from the model's list and the task
reconnects with full-jitter backoff, whatever the transport. Every state change is
logged and kept as ``detail`` for ``/healthz``. Nothing here can stop the daemon.

Besides its tools, a server is asked here for its resources (offered to the model as two
tools, :mod:`._resources`), prompts and completions (``/prompt``, :mod:`._prompts`), and
the roots it may work in are served from here; what a server asks during a call (progress,
elicitation, sampling) goes through :mod:`._requests` to the call's session. Every request
goes through :meth:`McpServer.use`: one timeout, one way to report a failure, and a
connection found gone is reconnected.

The connection is entered with ``async with`` so that the exception which ended it
reaches the SDK's task groups: a transport failure arrives as a cancellation of the
supervisor, and only an exit that sees that cancellation turns it back into the
transport's error (issue 28: exiting with ``(None, None, None)`` let it escape and end
the supervisor, so an HTTP server was never reconnected).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as mt
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from netclaw import __version__, attachments
from netclaw.config import McpServerConfig
from netclaw.errors import ToolError
from netclaw.mcp import _resources
from netclaw.mcp._content import ConvertedResult, ServerTool, argument_problem, convert_result, exposed_tools
from netclaw.mcp._requests import ServerRequests
from netclaw.mcp._transport import open_transport, transport_kind
from netclaw.mcp._types import McpServerStatus, McpState
from netclaw.messages import Attachment
from netclaw.process import traces
from netclaw.process.runtime import cancel_and_wait
from netclaw.retry import RetryPolicy, backoff_delay
from netclaw.security.policy import ToolHints
from netclaw.tools import Tool, ToolContext, ToolReply, deadline

log = logging.getLogger("netclaw.mcp")
T = TypeVar("T")

PING_INTERVAL_S = 10.0  # how soon a server that died quietly between calls is noticed
PING_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 30.0


def restart_policy(max_delay_s: float = 60.0) -> RetryPolicy:
    return RetryPolicy(max_retries=1_000_000, base_delay_s=1.0, max_delay_s=max_delay_s)


class ServerGone(Exception):
    """The connection died under a call or a probe: the supervisor reconnects."""


class McpServer:
    """One configured server, supervised."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        on_tools_changed: Callable[[], None] = lambda: None,
        environ: Mapping[str, str] = os.environ,
        policy: RetryPolicy | None = None,
        data_dir: Path | None = None,
        roots: Callable[[], Sequence[Path]] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._data_dir = data_dir  # images from results are kept per session there; OAuth tokens too
        self._roots = roots  # the folders the server may work in (None: no roots capability)
        self._requests = ServerRequests(name)  # what the server asks of us, routed to the call's session
        self.capabilities: mt.ServerCapabilities | None = None  # while connected
        self.protocol_version: str | None = None
        self._environ = environ
        self._policy = policy or restart_policy()
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._tools: dict[str, ServerTool] = {}
        self._state: McpState = "starting"
        self._detail: str | None = None  # why it is not up (or "connecting")
        self._since = time.time()
        self._restarts = 0
        self._attempted = asyncio.Event()  # the first connection attempt ended (either way)
        self._broken = asyncio.Event()  # a call or a change stream found the connection gone
        self._relist = asyncio.Event()  # the server said its tools changed
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()  # reconnect now, whatever the backoff says
        self._task: asyncio.Task[None] | None = None

    # -- the registry's view --------------------------------------------------------------

    @property
    def transport(self) -> str:
        return transport_kind(self.config)

    def status(self) -> McpServerStatus:
        return McpServerStatus(
            self.name,
            self.transport,
            self._state,
            len(self._tools),
            self._restarts,
            None if self._state == "up" else self._detail,
            self._since,
        )

    def tools(self) -> list[Tool]:
        if self._state != "up":
            return []
        found = [self._as_tool(t) for t in self._tools.values()]
        if self.has("resources") and self.config.resources:
            found += [t for t in self._resource_tools() if t.name not in self._tools]
        return found

    def has(self, capability: str) -> bool:
        """The connected server offers ``capability`` (``resources``, ``prompts``, ``completions``)."""
        return self.capabilities is not None and getattr(self.capabilities, capability, None) is not None

    def _resource_tools(self) -> list[Tool]:
        list_name, read_name = _resources.tool_names(self.name)
        list_text, read_text = _resources.descriptions(self.name)
        read_only = ToolHints(read_only=True)

        async def listing(args: Mapping[str, Any], ctx: ToolContext) -> str:
            resources, templates = await self.list_resources()
            return _resources.listing_text(self.name, resources, templates)

        async def read(args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
            problem = argument_problem(_resources.READ_SCHEMA, args)
            if problem is not None:
                raise ToolError(f"invalid arguments for {read_name}: {problem}")
            with self._requests.calling(ctx):
                result = await self.read_resource(str(args["uri"]))
            converted = convert_result(_resources.as_tool_result(result))
            return ToolReply(converted.text, images=await self._keep_images(read_name, converted, ctx))

        return [
            Tool(list_name, list_text, _resources.LIST_SCHEMA, listing, read_only, untrusted=True),
            Tool(read_name, read_text, _resources.READ_SCHEMA, read, read_only, untrusted=True),
        ]

    # -- resources and prompts (for the model's tools, chat commands and `netclaw mcp`) ----

    async def list_resources(self) -> tuple[list[mt.Resource], list[mt.ResourceTemplate]]:
        resources = await self._pages(
            "resources/list", lambda c, cursor: c.list_resources(cursor=cursor), lambda r: r.resources
        )
        templates = await self._pages(
            "resources/templates/list",
            lambda c, cursor: c.list_resource_templates(cursor=cursor),
            lambda r: r.resource_templates,
        )
        return resources, templates

    async def read_resource(self, uri: str) -> mt.ReadResourceResult:
        return await self.use(f"reading {uri}", lambda client: client.read_resource(uri))

    async def list_prompts(self) -> list[mt.Prompt]:
        if not self.has("prompts"):
            return []
        return await self._pages(
            "prompts/list", lambda c, cursor: c.list_prompts(cursor=cursor), lambda r: r.prompts
        )

    async def get_prompt(self, name: str, arguments: Mapping[str, str]) -> mt.GetPromptResult:
        return await self.use(f"prompt {name}", lambda client: client.get_prompt(name, dict(arguments)))

    async def complete_prompt_argument(
        self, prompt: str, argument: str, value: str, context: Mapping[str, str] | None = None
    ) -> list[str]:
        """Suggestions the server offers for one argument of a prompt (none if it offers none)."""
        if not self.has("completions"):
            return []
        ref = mt.PromptReference(name=prompt)
        result = await self.use(
            f"completing {prompt}.{argument}",
            lambda client: client.complete(
                ref, {"name": argument, "value": value}, dict(context or {}) or None
            ),
        )
        return list(result.completion.values)

    async def list_tools_now(self) -> list[mt.Tool]:
        """The server's own tool list as it answers now (for operators; nothing filtered)."""
        return await self._pages(
            "tools/list", lambda c, cursor: c.list_tools(cursor=cursor), lambda r: r.tools
        )

    async def _pages(
        self,
        what: str,
        fetch: Callable[[Client, str | None], Awaitable[Any]],
        items: Callable[[Any], Sequence[Any]],
        max_pages: int = 50,
    ) -> list[Any]:
        found: list[Any] = []
        cursor: str | None = None
        for _ in range(max_pages):  # a server whose cursor never ends cannot hang us
            page = await self.use(what, lambda client, cursor=cursor: fetch(client, cursor))  # type: ignore[misc]
            found.extend(items(page))
            cursor = page.next_cursor
            if not cursor:
                break
        return found

    def _as_tool(self, tool: ServerTool) -> Tool:
        async def handler(args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
            converted = await self.call(tool, args, ctx)
            return ToolReply(converted.text, images=await self._keep_images(tool.name, converted, ctx))

        # Everything a server answers (errors included) is the server's text, not netclaw's.
        return Tool(tool.name, tool.description, tool.schema, handler, tool.hints, untrusted=True)

    async def _keep_images(
        self, what: str, converted: ConvertedResult, ctx: ToolContext
    ) -> tuple[Attachment, ...]:
        """The result's images, stored with the session's files (they stay in its history)."""
        if not converted.images or self._data_dir is None or not ctx.session_id:
            return ()
        files = [
            attachments.IncomingFile(
                f"{what}-{i + 1}.{image.mime_type.rpartition('/')[2]}", image.mime_type, image.data
            )
            for i, image in enumerate(converted.images)
        ]
        stored = await asyncio.to_thread(attachments.store, self._data_dir, ctx.session_id, files)
        return tuple(f for f in stored if f.kind == "image")

    async def call(
        self, tool: ServerTool, args: Mapping[str, Any], ctx: ToolContext | None = None
    ) -> ConvertedResult:
        """Run one call; every failure is a ToolError the model sees. With the call's
        context, the server's progress reaches its session (a progress token goes with
        every call) and its requests (elicitation, sampling) are asked there."""
        problem = argument_problem(tool.schema, args)
        if problem is not None:
            raise ToolError(f"invalid arguments for {tool.name}: {problem}")
        progress = self._requests.progress_for(ctx)
        # The call's span (telemetry.traces), as MCP carries trace context: in the request's _meta.
        meta: Any = dict(traces.outgoing()) or None
        with self._requests.calling(ctx):
            result = await self.use(
                tool.name,
                lambda client: client.call_tool(
                    tool.remote_name, dict(args), progress_callback=progress, meta=meta
                ),
            )
        if result.is_error:
            raise ToolError(f"{tool.name} reported an error: {convert_result(result, max_images=0).text}")
        return convert_result(result)

    async def use(
        self, what: str, request: Callable[[Client], Awaitable[T]], timeout: float | None = None
    ) -> T:
        """One request to the server (``what`` names it for people), within ``timeout``
        (the server's ``timeout_s``). Every failure is a ToolError saying what happened; a
        connection found gone is reconnected."""
        client = self._client
        if client is None or self._state != "up":
            raise ToolError(
                f"MCP server {self.name!r} is not connected right now ({self._detail or 'starting'})"
            )
        limit = timeout or self.config.timeout_s
        try:
            async with asyncio.timeout(limit) as until:
                with deadline(until):  # stands still while the server's question waits for a person
                    return await request(client)
        except TimeoutError as exc:
            raise ToolError(f"{what}: MCP server {self.name!r} did not answer within {limit:g}s") from exc
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:  # the server went away under us: reconnect
                self._lost(client)
                raise ToolError(
                    f"MCP server {self.name!r} went away during {what}; it is being reconnected"
                ) from exc
            raise ToolError(f"{what} failed on MCP server {self.name!r}: {exc.message}") from exc
        except (OSError, httpx2.HTTPError, RuntimeError, EOFError) as exc:
            # The transport is gone (process exited, connection refused): reconnect.
            self._lost(client)
            raise ToolError(
                f"MCP server {self.name!r} went away during {what}: {describe(exc)}; it is being reconnected"
            ) from exc

    def _lost(self, client: Client) -> None:
        """A call found ``client``'s connection gone: reconnect, unless that already happened."""
        if self._client is client:
            self._broken.set()

    # -- supervision ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"mcp:{self.name}")

    async def first_attempt(self) -> None:
        await self._attempted.wait()

    def reconnect_now(self) -> None:
        """Cut the backoff short (after ``netclaw mcp login``), or drop a live connection
        and make a new one."""
        self._wake.set()
        if self._client is not None:
            self._broken.set()

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._set_state("stopped", "stopped")

    def _set_state(self, state: McpState, detail: str | None) -> None:
        """The one place the state changes: recorded with its time, and logged."""
        changed = state != self._state
        self._state, self._detail = state, detail
        if changed:
            self._since = time.time()

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            was_up = False
            try:
                await self._connected_once()
                reason = "the connection ended"
            except asyncio.CancelledError:
                if self._stopping.is_set():
                    raise
                # A transport cancelled us without taking its cancellation back: not a
                # stop (that sets _stopping first). Undo it and reconnect like any failure.
                _uncancel()
                reason = "the connection was cut (cancelled by the transport)"
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure of a server means "reconnect"
                reason = describe(exc)
            finally:
                self._client = None
                self.capabilities = None
                was_up = self._state == "up"
                if self._tools:
                    self._tools = {}
                    self._on_tools_changed()
            if self._stopping.is_set():
                return
            # A server that was up starts its backoff afresh; one that never came up backs off.
            failures = 1 if was_up else failures + 1
            if was_up:
                self._restarts += 1
            delay = backoff_delay(failures - 1, self._policy)
            self._set_state("down", reason)
            if was_up:
                log.warning("MCP server %s is down: %s; reconnecting in %.1f s", self.name, reason, delay)
            else:
                log.warning(
                    "MCP server %s: connection attempt %d failed: %s; next attempt in %.1f s",
                    self.name,
                    failures,
                    reason,
                    delay,
                )
            self._attempted.set()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(self._stopping.wait(), self._wake.wait()), delay)

    async def _connected_once(self) -> None:
        auth = None
        if self.config.oauth is not None:
            from netclaw.mcp._oauth import daemon_auth

            assert self._data_dir is not None, "OAuth needs the data dir for its tokens"
            auth = await daemon_auth(self.name, self.config, self._data_dir, self._environ)
        client = Client(
            open_transport(self.name, self.config, self._environ, auth),
            message_handler=self._on_message,
            list_roots_callback=self._list_roots if self._roots is not None else None,
            elicitation_callback=self._requests.elicit if self.config.elicitation else None,
            sampling_callback=self._requests.sample if self.config.sampling else None,
            logging_callback=self._requests.server_log,
            log_level="info",
            client_info=mt.Implementation(name="netclaw", version=__version__),
            cache=None,  # list_changed is ours to act on; no stale tool list
            mode=self.config.protocol,
        )
        # `async with`, not __aenter__/__aexit__ by hand: see the module docstring.
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await stack.enter_async_context(client)
            self._broken.clear()  # news about an earlier connection
            self._relist.clear()
            self._client = client
            self.capabilities = client.server_capabilities
            self.protocol_version = client.protocol_version
            await self._list_tools(client)
            self._set_state("up", None)
            self._attempted.set()
            log.info(
                "MCP server %s is up (%s, protocol %s): %d tool(s)",
                self.name,
                self.transport,
                client.protocol_version,
                len(self._tools),
            )
            listener = asyncio.ensure_future(self._listen(client))
            stack.push_async_callback(cancel_and_wait, listener)
            await self._watch(client)

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
        except MCPError as exc:
            raise ServerGone(f"the liveness probe failed: {exc.message}") from exc

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
            self._lost(client)  # the stream dropped with the connection: reconnect now
        except (MCPError, OSError, httpx2.HTTPError) as exc:
            log.debug("MCP server %s: no tool-list changes from now on: %s", self.name, describe(exc))

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
        kept, skipped = exposed_tools(
            self.name, listed, self.config.tools, trust_annotations=self.config.trust_annotations
        )
        tools = {t.name: t for t in kept}
        if quiet and tools == self._tools:
            return
        for line in skipped.values():
            log.warning("MCP server %s: skipping tool %s", self.name, line)
        self._tools = tools
        self._on_tools_changed()

    async def _list_roots(self, context: ClientRequestContext) -> mt.ListRootsResult:
        folders = self._roots() if self._roots is not None else ()
        return mt.ListRootsResult(roots=[mt.Root(uri=f.as_uri(), name=f.name or str(f)) for f in folders])

    async def roots_changed(self) -> None:
        """Tell the server its roots changed (``notifications/roots/list_changed``; the
        2026-07-28 protocol has no such notification: a server asks again when it needs them)."""
        client = self._client
        if client is None or self._roots is None or self.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        with contextlib.suppress(Exception), warnings.catch_warnings():  # best effort: a dead one reconnects
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # deprecated only from 2026-07-28 on
            await client.session.send_roots_list_changed()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport said %s", self.name, describe(message))


async def _first(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _uncancel() -> None:
    task = asyncio.current_task()
    while task is not None and task.cancelling():
        task.uncancel()


def describe(exc: BaseException) -> str:
    """One line for a person; exception groups (anyio task groups) say what is inside."""
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        return "; ".join(describe(e) for e in inner) or "cancelled"
    if isinstance(exc, ServerGone | ToolError):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


__all__: Sequence[str] = ["McpServer", "describe", "restart_policy"]
