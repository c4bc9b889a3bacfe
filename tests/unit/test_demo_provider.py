"""The built-in demo model: no server, labelled as no AI in every answer, repeating what the
person said (not the context netclaw adds to a turn), streamed, never a tool call."""

from __future__ import annotations

import asyncio

from netclaw.config import ProviderConfig
from netclaw.llm import Delta, ProviderRequest
from netclaw.messages import ChatMessage, MessageKind
from netclaw.providers import make_provider


def test_the_demo_answers_what_was_said_labelled_and_streamed() -> None:
    provider = make_provider("main", ProviderConfig(type="demo"))
    messages = [
        ChatMessage("s", "system", "You are netclaw.", 0.0),
        ChatMessage("u1", "user", "an old message", 0.0),
        ChatMessage("a1", "assistant", "an old answer", 0.0),
        ChatMessage("u2", "user", "  what time is it?  ", 0.0),
        ChatMessage("c", "user", "[context: it is noon]", 0.0, kind=MessageKind.CONTEXT),
    ]
    pieces: list[Delta] = []
    done = asyncio.run(provider.complete(ProviderRequest("demo", messages), pieces.append))
    assert done.text.startswith("[demo model — not an AI] You said: “what time is it?”.")
    assert "".join(p.text for p in pieces).strip() == done.text and len(pieces) > 5
    assert done.tool_calls == () and done.usage is not None and done.usage.output_tokens > 0
    assert "no model server" in asyncio.run(provider.check("demo"))
    long = [ChatMessage("u", "user", "x" * 1000, 0.0)]
    assert "x" * 300 + "…”" in asyncio.run(provider.complete(ProviderRequest("demo", long))).text
