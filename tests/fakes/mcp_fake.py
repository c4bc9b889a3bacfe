"""An MCP server for netclaw's tests, written with the real SDK (``MCPServer``, mcp 2.x) and
run as a real subprocess.

    python -m tests.fakes.mcp_fake stdio
    python -m tests.fakes.mcp_fake http --port 0 [--require-header NAME=VALUE]
    python -m tests.fakes.mcp_fake sse --port 0     (the legacy HTTP+SSE transport)

A client with ``mode="legacy"`` (netclaw's ``"protocol": "legacy"``) gets the handshake
era (2025-11-25), where tools can say ``execution.taskSupport`` and servers send requests
(sampling, elicitation, roots) to the client.

In HTTP mode it prints ``listening on http://127.0.0.1:<port>/mcp`` once it accepts
connections (``.../sse`` in SSE mode). :class:`HttpProcess` runs it from a test and can
kill it and start it again on the same port. Tools: ``echo``, ``add``, ``env`` (a variable the server sees), ``slow``
(writes ``slow-started``/``slow-finished`` in ``$FAKE_MCP_MARKER_DIR``), ``fail`` (an
``isError`` result), ``image``, ``resource``, ``big``, ``crash`` (the process exits),
``toggle`` (adds or removes ``extra`` and says ``tools/list_changed``), ``wipe``
(``destructiveHint``), ``lookup`` (``readOnlyHint``), ``research`` (listed as requiring
task-augmented execution), ``roots`` (the client's roots), ``signup`` (asks the person for
an email: form elicitation), ``consult`` (asks the client's model: sampling), ``steps``
(progress notifications) and ``traced`` (the ``traceparent`` of the call's ``_meta``). A ``notifications/roots/list_changed`` appends a line to
``$FAKE_MCP_MARKER_DIR/roots-changed``. Resources: ``fake://doc/readme``,
``fake://pixel`` (a PNG) and the template ``fake://note/{name}``. Prompts: ``greet(name,
style?)`` (with completions for ``name``) and ``review(code)`` (several messages and an
image). Each start appends a
line to ``$FAKE_MCP_START_FILE`` if set, so tests can count restarts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import mcp_types as mt
from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import AssistantMessage, Message, UserMessage
from pydantic import BaseModel

# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class Contact(BaseModel):
    """What the ``signup`` tool asks the person for."""

    email: str
    age: int = 0


async def ask_contact() -> Elicit[Contact]:
    return Elicit("Which email address should the account use?", Contact)


async def ask_model(question: str) -> Sample:
    return Sample(
        [mt.SamplingMessage(role="user", content=mt.TextContent(text=question))],
        max_tokens=64,
        system_prompt="Answer in one word.",
    )


async def ask_roots() -> ListRoots:
    """A resolver: the client's roots (a request mid-call, or an input round on 2026-07-28)."""
    return ListRoots()


def build(name: str = "fake") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def env(name: str) -> str:
        """An environment variable as the server sees it."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        markers = os.environ.get("FAKE_MCP_MARKER_DIR")
        if markers:
            Path(markers, "slow-started").write_text("1")  # noqa: ASYNC240 - a tiny test marker
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:  # the client cancelled the call (notifications/cancelled)
            if markers:
                Path(markers, "slow-cancelled").write_text("1")  # noqa: ASYNC240 - a tiny test marker
            raise
        if markers:
            Path(markers, "slow-finished").write_text("1")  # noqa: ASYNC240 - a tiny test marker
        return "slept"

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the message."""
        raise ToolError(message)

    @server.tool()
    def image() -> list[mt.ContentBlock]:
        """A tiny picture and a caption."""
        return [
            mt.ImageContent(data=base64.b64encode(PIXEL).decode(), mime_type="image/png"),
            mt.TextContent(text="an image"),
        ]

    @server.tool()
    def resource() -> list[mt.ContentBlock]:
        """An embedded text resource."""
        return [mt.EmbeddedResource(resource=mt.TextResourceContents(uri="fake://doc", text="resource text"))]

    @server.tool()
    def big(n: int) -> str:
        """n characters."""
        return "x" * n

    @server.tool()
    def crash() -> str:
        """The server process exits at once."""
        os._exit(3)

    @server.tool(annotations=mt.ToolAnnotations(destructive_hint=True))
    def wipe(path: str) -> str:
        """Delete everything under path (says destructiveHint)."""
        return f"wiped {path}"

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def lookup(key: str) -> str:
        """Read a value (says readOnlyHint)."""
        return f"value of {key}"

    @server.tool()
    def research(topic: str) -> str:
        """Listed as requiring task-augmented execution: a client without tasks must hide it."""
        return topic

    @server.tool()
    async def roots(found: Annotated[mt.ListRootsResult, Resolve(ask_roots)]) -> str:
        """The client's roots, one URI a line."""
        return "\n".join(str(r.uri) for r in found.roots) or "(no roots)"

    @server.tool()
    async def signup(contact: Annotated[ElicitationResult[Contact], Resolve(ask_contact)]) -> str:
        """Ask the person for an email address (form elicitation)."""
        match contact:
            case AcceptedElicitation(data=data):
                return f"signed up {data.email} (age {data.age})"
            case DeclinedElicitation():
                return "the person declined"
            case _:
                return "the person cancelled"

    @server.tool()
    async def consult(question: str, answer: Annotated[mt.CreateMessageResult, Resolve(ask_model)]) -> str:
        """Ask the client's model (sampling)."""
        content = answer.content
        text = content.text if isinstance(content, mt.TextContent) else "?"
        return f"the model said {text!r} ({answer.model})"

    @server.tool()
    def traced(ctx: Context) -> str:
        """The W3C trace context the call came with in its ``_meta`` (``traceparent``), or "none"."""
        meta = ctx.request_context.meta or {}
        return str(meta.get("traceparent", "none"))

    @server.tool()
    async def steps(n: int, ctx: Context) -> str:
        """Report progress n times (notifications/progress), then answer."""
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i} of {n}")
            await asyncio.sleep(0.05)
        return f"{n} steps done"

    # -- resources and prompts ---------------------------------------------------------

    @server.resource(
        "fake://doc/readme", name="readme", mime_type="text/markdown", description="How it works."
    )
    def readme() -> str:
        return "# Fake\nIt answers."

    @server.resource("fake://pixel", name="pixel", mime_type="image/png")
    def pixel() -> bytes:
        return PIXEL

    @server.resource("fake://note/{name}", name="note", description="A note by name.")
    def note(name: str) -> str:
        return f"note {name}"

    @server.prompt(description="Greet someone.")
    def greet(name: str, style: str = "plain") -> str:
        return f"Please greet {name} in a {style} way."

    @server.prompt(description="A conversation to continue, with a picture.")
    def review(code: str) -> list[Message]:
        return [
            UserMessage(f"Review this: {code}"),
            AssistantMessage("What should I look for?"),
            UserMessage(mt.ImageContent(data=base64.b64encode(PIXEL).decode(), mime_type="image/png")),
        ]

    @server.completion()
    async def complete(
        ref: mt.PromptReference | mt.ResourceTemplateReference,
        argument: mt.CompletionArgument,
        context: mt.CompletionContext | None,
    ) -> mt.Completion | None:
        if isinstance(ref, mt.PromptReference) and ref.name == "greet" and argument.name == "name":
            return mt.Completion(values=[n for n in ("Ann", "Bob") if n.startswith(argument.value)])
        return None

    async def extra() -> str:
        return "extra!"

    @server.tool()
    async def toggle(ctx: Context) -> str:
        """Add or remove the tool `extra`, and tell the client its tools changed."""
        names = {t.name for t in await server.list_tools()}
        if "extra" in names:
            server.remove_tool("extra")
            state = "removed"
        else:
            server.add_tool(extra, name="extra", description="Appears and disappears.")
            state = "added"
        await ctx.notify_tools_changed()  # 2026-07-28 clients: their subscriptions/listen stream
        await ctx.session.send_tool_list_changed()  # older clients: the notification
        return state

    async def roots_changed(ctx: object, params: object) -> None:
        markers = os.environ.get("FAKE_MCP_MARKER_DIR")
        if markers:
            with open(Path(markers, "roots-changed"), "a") as fh:  # noqa: ASYNC230 - a tiny test marker
                fh.write("1\n")

    server._lowlevel_server.add_notification_handler(
        "notifications/roots/list_changed", mt.NotificationParams, roots_changed
    )

    listed = server.list_tools

    async def list_with_tasks() -> list[mt.Tool]:
        tools = await listed()
        return [
            t.model_copy(update={"execution": mt.ToolExecution(task_support="required")})
            if t.name == "research"
            else t
            for t in tools
        ]

    server.list_tools = list_with_tasks  # type: ignore[method-assign]
    return server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="fake")
    parser.add_argument("--require-header", default=None, help="NAME=VALUE every HTTP request must carry")
    args = parser.parse_args(argv)
    if start_file := os.environ.get("FAKE_MCP_START_FILE"):
        with open(start_file, "a") as fh:
            fh.write(f"{os.getpid()}\n")
    server = build(args.name)
    if args.transport == "stdio":
        server.run("stdio")
        return
    port = args.port or _free_port()
    path = "/sse" if args.transport == "sse" else "/mcp"
    app = (
        server.sse_app()
        if args.transport == "sse"
        else server.streamable_http_app(streamable_http_path="/mcp")
    )
    if args.require_header:
        header, _, value = args.require_header.partition("=")
        app = _require(app, header.lower().encode(), value.encode())
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    served = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.ensure_future(served.serve())
        while not served.started and not task.done():  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.02)
        print(f"listening on http://127.0.0.1:{port}{path}", flush=True)
        await task

    asyncio.run(serve())
    sys.exit(0)


def _require(app: object, header: bytes, value: bytes) -> object:
    """An ASGI wrapper refusing (401) requests without ``header: value``."""

    async def guarded(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] == "http" and (header, value) not in list(scope.get("headers", [])):  # type: ignore[call-overload]
            await send(
                {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
            )  # type: ignore[operator]
            await send({"type": "http.response.body", "body": b"unauthorized"})  # type: ignore[operator]
            return
        await app(scope, receive, send)  # type: ignore[operator]

    return guarded


REPO_ROOT = Path(__file__).resolve().parents[2]


class HttpProcess:
    """The fake as an HTTP server in a subprocess that a test can kill and start again on
    the same port (``url`` stays the same)."""

    def __init__(self, *args: str, transport: str = "http", env: dict[str, str] | None = None) -> None:
        self.args = args
        self.transport = transport
        self.env = env
        self.port = _free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> str:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fakes.mcp_fake",
                self.transport,
                "--port",
                str(self.port),
                *self.args,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=None if self.env is None else {**os.environ, **self.env},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = line.split()[-1]
        return self.url

    def kill(self) -> None:
        """SIGKILL: no goodbye on any connection."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:  # a graceful server waits for open streams (a client's GET) forever
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None


if __name__ == "__main__":
    main()
