"""What an MCP server's tools look like to the model, and their results (pure)."""

from __future__ import annotations

import base64

import mcp_types as mt

from netclaw.mcp._content import MAX_RESULT_CHARS, argument_problem, exposed_tools, result_text

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_tools_are_named_by_server_and_bad_ones_are_skipped_with_a_reason() -> None:
    listed = [
        mt.Tool(name="search", description="Search.", input_schema=OBJECT),
        mt.Tool(name="get", input_schema={"type": "object"}),
        mt.Tool(name="not an identifier", input_schema={"type": "object"}),
        mt.Tool(name="broken", input_schema={"type": "object", "properties": {"q": {"type": "strng"}}}),
        mt.Tool(name="array", input_schema={"type": "array"}),
        mt.Tool(name="x" * 70, input_schema={"type": "object"}),
    ]
    kept, skipped = exposed_tools("issues", listed, None)
    assert [(t.name, t.remote_name, t.description) for t in kept] == [
        ("issues__search", "search", "Search."),
        ("issues__get", "get", "get"),
    ]
    assert len(skipped) == 4
    assert any("issues__broken" in line and "invalid input schema" in line for line in skipped)
    assert any("issues__array" in line and "root must be" in line for line in skipped)
    kept, _ = exposed_tools("issues", listed, ["get"])
    assert [t.name for t in kept] == ["issues__get"]


def test_arguments_are_checked_against_the_schema() -> None:
    assert argument_problem(OBJECT, {"q": "bug"}) is None
    assert argument_problem(OBJECT, {}) == "'q' is a required property"
    assert argument_problem(OBJECT, {"q": 3}) == "q: 3 is not of type 'string'"


def test_results_become_one_capped_text() -> None:
    image = base64.b64encode(b"\x89PNG" + b"\x00" * 96).decode()
    result = mt.CallToolResult(
        content=[
            mt.TextContent(text="first"),
            mt.ImageContent(data=image, mime_type="image/png"),
            mt.EmbeddedResource(resource=mt.TextResourceContents(uri="file:///a.txt", text="inside")),
            mt.ResourceLink(uri="file:///b.txt", name="b"),
        ]
    )
    assert result_text(result) == (
        "first\n[image image/png, 100 bytes: not shown, tool results carry text only]\n"
        "[resource file:///a.txt]\ninside\n[resource link file:///b.txt (b)]"
    )
    assert result_text(mt.CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'
    assert result_text(mt.CallToolResult(content=[])) == "(no output)"
    long = result_text(mt.CallToolResult(content=[mt.TextContent(text="y" * (MAX_RESULT_CHARS + 10))]))
    assert long.endswith(
        f"[output cut: {MAX_RESULT_CHARS + 10:,} characters, the first {MAX_RESULT_CHARS:,} shown]"
    )


def test_status_lines_show_state_transport_restarts_and_detail() -> None:
    from netclaw.cli._status import mcp_line

    up = {"state": "up", "transport": "http", "tools": 10, "restarts": 1, "since": 1.0}
    assert mcp_line(up) == "up (http), 10 tool(s), 1 restart(s)"
    down = {"state": "down", "transport": "stdio", "tools": 0, "restarts": 0, "detail": "OSError: gone"}
    assert mcp_line(down) == "down (stdio): OSError: gone"
