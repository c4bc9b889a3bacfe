"""The built-in demo model (``providers.<name>.type: "demo"``): answers with no model
server, so a first run shows netclaw working end to end before any model is set up.

It is not a model and says so in every answer: it repeats what it was told and names the
command that connects a real one. Everything around it is the real thing — the message is
journaled before it is acknowledged, the turn runs in the session's actor, the answer
streams and is recorded — so what a person sees is how netclaw behaves, minus the
intelligence. It never calls a tool.
"""

from __future__ import annotations

from netclaw.config import ProviderConfig
from netclaw.messages import MessageKind
from netclaw.providers._base import Completion, Delta, OnDelta, ProviderRequest, Usage

SAID_LIMIT = 300  # characters of the person's message repeated back


class DemoProvider:
    def __init__(self, name: str, config: ProviderConfig) -> None:
        self.name = name
        self.config = config

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        text = answer(request)
        if on_delta is not None:
            for word in text.split(" "):  # streamed in words, as a model's answer arrives
                on_delta(Delta("text", word + " "))
        prompt_chars = sum(len(m.content) for m in request.messages)
        usage = Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4))
        return Completion(text=text, usage=usage, finish_reason="stop")

    async def check(self, model: str | None = None) -> str:
        return "the built-in demo model (no model server; its answers are canned, not AI)"

    async def aclose(self) -> None:
        return None


def answer(request: ProviderRequest) -> str:
    """The demo's answer: what the person said, repeated, and how to get a real model."""
    said = next(
        (m.content for m in reversed(request.messages) if m.role == "user" and m.kind is MessageKind.CHAT),
        "",
    ).strip()
    if len(said) > SAID_LIMIT:
        said = said[:SAID_LIMIT] + "…"
    return (
        f"[demo model — not an AI] You said: “{said}”. netclaw journaled your message, ran this "
        "turn in its session and recorded this reply, as it does with a real model. To talk to "
        "one, run `netclaw init --force` with your model server (any OpenAI-compatible server, "
        "or Anthropic) and restart `netclaw run`."
    )
