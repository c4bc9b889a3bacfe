"""``/prompt``: parsing the command, binding its arguments, rendering a prompt (pure)."""

from __future__ import annotations

import base64

import mcp_types as mt
import pytest

from netclaw.commands import PromptCommand, PromptSyntaxError, parse_command, parse_prompt
from netclaw.mcp._prompts import bind, prompt_line, render, usage

GREET = mt.Prompt(
    name="greet",
    description="Greet\n someone.",
    arguments=[
        mt.PromptArgument(name="name", required=True, description="Who"),
        mt.PromptArgument(name="style"),
    ],
)


def test_parsing() -> None:
    assert parse_prompt("hello") is None and parse_prompt("/promptly") is None
    assert parse_prompt("/prompt") == PromptCommand(None, None)
    assert parse_prompt("  !PROMPT docs") == PromptCommand("docs", None)
    assert parse_prompt("/prompt docs:") == PromptCommand("docs", None)
    assert parse_prompt('/prompt docs:greet "Ann Lee" style=formal x=a=b') == PromptCommand(
        "docs", "greet", (("style", "formal"), ("x", "a=b")), ("Ann Lee",)
    )
    assert parse_prompt("/prompt docs:greet =odd") == PromptCommand("docs", "greet", (), ("=odd",))
    with pytest.raises(PromptSyntaxError, match="cannot read"):
        parse_prompt('/prompt docs:greet "Ann')
    assert parse_command("/prompt") is None  # never a plain command


def test_binding_arguments() -> None:
    assert bind(GREET, PromptCommand("d", "greet", (), ("Ann", "formal"))) == (
        {"name": "Ann", "style": "formal"},
        None,
    )
    assert bind(GREET, PromptCommand("d", "greet", (("name", "Bo"),), ("loud",))) == (
        {"name": "Bo", "style": "loud"},
        None,
    )
    _, problem = bind(GREET, PromptCommand("d", "greet", (), ("a", "b", "c")))
    assert problem is not None and "Too many arguments" in problem and "'c'" in problem
    _, problem = bind(GREET, PromptCommand("d", "greet", (("mood", "x"),)))
    assert problem == "Prompt greet has no argument 'mood' (it takes: name, style)."


def test_lines_and_usage() -> None:
    assert prompt_line("docs", GREET) == "docs:greet(name, style?) — Greet someone."
    text = usage("docs", GREET, [GREET.arguments[0]], {"name": ["Ann", "Bob"]})  # type: ignore[index]
    assert text.splitlines() == [
        "Prompt docs:greet needs name. Its arguments:",
        "  name (required): Who — for example Ann, Bob",
        "  style (optional)",
        "Send: /prompt docs:greet name=…",
    ]


def test_rendering() -> None:
    one = mt.GetPromptResult(messages=[mt.PromptMessage(role="user", content=mt.TextContent(text="hi"))])
    assert render("p", one) == ("hi", ())
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    several = mt.GetPromptResult(
        messages=[
            mt.PromptMessage(role="user", content=mt.TextContent(text="look")),
            mt.PromptMessage(role="assistant", content=mt.TextContent(text="at what?")),
            mt.PromptMessage(
                role="user",
                content=mt.ImageContent(data=base64.b64encode(png).decode(), mime_type="image/png"),
            ),
            mt.PromptMessage(
                role="user",
                content=mt.EmbeddedResource(resource=mt.TextResourceContents(uri="x://a", text="body")),
            ),
        ]
    )
    text, files = render("p", several)
    assert text == "User: look\n\nAssistant: at what?\n\nUser: [resource x://a]\nbody"
    assert [(f.name, f.mime_type, f.data) for f in files] == [("p-1.png", "image/png", png)]
