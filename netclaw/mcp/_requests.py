"""What a server asks of netclaw while it runs a call — progress, elicitation, sampling,
log messages — routed to the session whose call it is.

A call runs with its :class:`~netclaw.tools.ToolContext` in a context variable
(:meth:`ServerRequests.calling`): the SDK runs a server's request in the context of the
call that caused it (the 2026-07-28 input rounds inside ``call_tool``, and on earlier
protocols the request the server relates to that call), so the callbacks find the call's
session there. Should a server send one unrelated to any call, it goes to the only call
in flight, if there is exactly one; otherwise nobody can be asked and it is declined.

- **progress**: every call carries a progress token; each notification becomes a
  ``tool_progress`` output of the call's session.
- **elicitation** (``elicitation: true``, the default): a form or a link is asked of the
  person in the conversation (:meth:`ToolSession.ask`); accept / decline / cancel go back
  as the protocol's answers; where nobody may be asked (a public session, no session) it
  is declined.
- **sampling** (``sampling: true``; off by default): a person allows each request, then
  the session's model answers it and its tokens count toward the session's spend; a
  refusal is the protocol's error ``-1``.
- **log messages**: to the daemon's log (``netclaw.mcp.server``), warnings and errors as
  such, the rest at DEBUG.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

import mcp_types as mt
from mcp.client.session import ClientRequestContext

from netclaw.errors import ProviderError
from netclaw.tools import Question, SampleRefused, SampleRequest, ToolContext

log = logging.getLogger("netclaw.mcp")
server_log = logging.getLogger("netclaw.mcp.server")

_CALL: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("mcp_call", default=None)
USER_REJECTED = -1  # the spec's error code for a sampling request the user rejected
_LEVELS = {"warning": logging.WARNING, "error": logging.ERROR, "critical": logging.ERROR}
_LEVELS |= {"alert": logging.ERROR, "emergency": logging.ERROR}


class ServerRequests:
    """One server's requests to us, and the calls in flight they may belong to."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._in_flight: dict[int, ToolContext] = {}

    @contextlib.contextmanager
    def calling(self, ctx: ToolContext | None) -> Iterator[None]:
        if ctx is None:
            yield
            return
        key = id(ctx)
        self._in_flight[key] = ctx
        token = _CALL.set(ctx)
        try:
            yield
        finally:
            _CALL.reset(token)
            self._in_flight.pop(key, None)

    def _call(self) -> ToolContext | None:
        found = _CALL.get()
        if found is not None:
            return found
        if len(self._in_flight) == 1:
            return next(iter(self._in_flight.values()))
        return None

    def progress_for(self, ctx: ToolContext | None) -> Any:
        """The progress callback of one call (always one: the token asks servers for it)."""

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if ctx is not None and ctx.session is not None:
                ctx.session.progress(ctx.call_id, ctx.tool, value, total, message)

        return progress

    async def elicit(self, context: ClientRequestContext, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        call = self._call()
        if call is None or call.session is None:
            log.info("MCP server %s asked for input outside any call of a session: declined", self.server)
            return mt.ElicitResult(action="decline")
        source = f"MCP server {self.server}"
        if isinstance(params, mt.ElicitRequestURLParams):
            question = Question("url", source, params.message, url=params.url)
        else:
            question = Question("form", source, params.message, schema=dict(params.requested_schema))
        answer = await call.session.ask(call.call_id, call.tool, question)
        if answer.action == "accept" and question.kind == "form":
            return mt.ElicitResult(action="accept", content=dict(answer.content or {}))
        return mt.ElicitResult(action=answer.action)

    async def sample(
        self, context: ClientRequestContext, params: mt.CreateMessageRequestParams
    ) -> mt.CreateMessageResult | mt.ErrorData:
        call = self._call()
        if call is None or call.session is None:
            return mt.ErrorData(code=USER_REJECTED, message="no conversation to ask: sampling refused")
        if params.tools:
            return mt.ErrorData(code=mt.INVALID_PARAMS, message="netclaw does not sample with tools")
        request = SampleRequest(
            source=f"MCP server {self.server}",
            messages=[(m.role, _text(m.content)) for m in params.messages],
            system_prompt=params.system_prompt,
            max_tokens=params.max_tokens,
        )
        try:
            reply = await call.session.sample(call.call_id, call.tool, request)
        except SampleRefused as exc:
            return mt.ErrorData(code=USER_REJECTED, message=str(exc))
        except ProviderError as exc:  # the model failed: the server hears why, the call goes on
            log.warning("MCP server %s: sampling failed: %s", self.server, exc)
            return mt.ErrorData(code=mt.INTERNAL_ERROR, message=f"the model could not answer: {exc}")
        return mt.CreateMessageResult(
            role="assistant",
            content=mt.TextContent(text=reply.text),
            model=reply.model,
            stop_reason=_stop_reason(reply.stop_reason),
        )

    async def server_log(self, params: mt.LoggingMessageNotificationParams) -> None:
        level = _LEVELS.get(params.level, logging.DEBUG)
        where = f" ({params.logger})" if params.logger else ""
        server_log.log(level, "MCP server %s%s says: %s", self.server, where, params.data)


def _text(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} not shown]")
    return "\n".join(parts)


def _stop_reason(reason: str | None) -> str | None:
    return {"stop": "endTurn", "end_turn": "endTurn", "length": "maxTokens", "max_tokens": "maxTokens"}.get(
        reason or "", reason
    )
