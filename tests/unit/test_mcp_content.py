"""What an MCP server's tools look like to the model, and their results (pure)."""

from __future__ import annotations

import base64

import mcp_types as mt

from netclaw.mcp._content import (
    MAX_RESULT_CHARS,
    ResultImage,
    argument_problem,
    convert_result,
    exposed_tools,
    result_text,
)
from netclaw.security.policy import ToolHints

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
    assert "issues__broken" in skipped["broken"] and "invalid input schema" in skipped["broken"]
    assert "root must be" in skipped["array"]
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
        "first\n[image image/png, 100 bytes: not shown (tool results carry text only here)]\n"
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


def test_task_required_tools_are_skipped_and_annotations_become_hints() -> None:
    listed = [
        mt.Tool(name="research", input_schema=OBJECT, execution=mt.ToolExecution(task_support="required")),
        mt.Tool(name="maybe", input_schema=OBJECT, execution=mt.ToolExecution(task_support="optional")),
        mt.Tool(name="rm", input_schema=OBJECT, annotations=mt.ToolAnnotations(destructive_hint=True)),
        mt.Tool(name="cat", input_schema=OBJECT, annotations=mt.ToolAnnotations(read_only_hint=True)),
        mt.Tool(  # contradictory: read-only wins
            name="odd",
            input_schema=OBJECT,
            annotations=mt.ToolAnnotations(read_only_hint=True, destructive_hint=True),
        ),
        mt.Tool(name="plain", input_schema=OBJECT, annotations=mt.ToolAnnotations()),
    ]
    kept, skipped = exposed_tools("fs", listed, None)
    assert [t.name for t in kept] == ["fs__maybe", "fs__rm", "fs__cat", "fs__odd", "fs__plain"]
    assert list(skipped) == ["research"] and "task-augmented" in skipped["research"]
    hints = {t.remote_name: t.hints for t in kept}
    assert hints["rm"] == ToolHints(destructive=True)
    assert hints["cat"] == hints["odd"] == ToolHints(read_only=True)
    assert hints["plain"] == hints["maybe"] == ToolHints()
    untrusted, _ = exposed_tools("fs", listed, None, trust_annotations=False)
    assert all(t.hints == ToolHints() for t in untrusted)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_images_are_set_aside_within_caps_and_the_rest_are_placeholders() -> None:
    png, jpeg = b"\x89PNG" + b"\x01" * 20, b"\xff\xd8\xff" + b"\x02" * 20
    result = mt.CallToolResult(
        content=[
            mt.TextContent(text="look"),
            mt.ImageContent(data=b64(png), mime_type="image/png"),
            mt.ImageContent(data=b64(b"<svg/>"), mime_type="image/svg+xml"),
            mt.EmbeddedResource(
                resource=mt.BlobResourceContents(uri="x://j", blob=b64(jpeg), mime_type="image/jpeg")
            ),
            mt.ImageContent(data=b64(png * 10), mime_type="image/png"),
            mt.ImageContent(data=b64(png), mime_type="image/png"),
            mt.AudioContent(data=b64(b"RIFF" * 5), mime_type="audio/wav"),
        ]
    )
    converted = convert_result(result, max_images=2, max_image_bytes=100)
    assert converted.images == (ResultImage("image/png", png), ResultImage("image/jpeg", jpeg))
    assert converted.text.splitlines() == [
        "look",
        "[image image/svg+xml, 6 bytes: not shown (not a format models read)]",
        "[image image/png, 240 bytes: not shown (over the 100-byte limit)]",
        "[image image/png, 24 bytes: not shown (only the first 2 images of a result are shown)]",
        "[audio audio/wav, 20 bytes: not shown, models here read no audio]",
    ]
    only_image = convert_result(
        mt.CallToolResult(content=[mt.ImageContent(data=b64(png), mime_type="image/png")])
    )
    assert only_image.text == "" and len(only_image.images) == 1


def test_audience_priority_and_structured_content() -> None:
    user_only = mt.Annotations(audience=["user"])
    low = mt.Annotations(priority=0.1)
    result = mt.CallToolResult(
        content=[
            mt.TextContent(text="for you", annotations=mt.Annotations(audience=["assistant"])),
            mt.TextContent(text="for the person", annotations=user_only),
            mt.TextContent(text="z" * 300, annotations=low),
            mt.TextContent(text="important", annotations=mt.Annotations(priority=0.9)),
        ],
        structured_content={"n": 1},
    )
    text = convert_result(result, max_chars=250).text
    assert "for you" in text and "important" in text and '{"n": 1}' in text
    assert "for the person" not in text and "z" * 50 not in text
    assert "[1 content block(s) meant only for the user left out]" in text
    assert "[1 low-priority content block(s) left out for length]" in text
    # Structured content the text already carries is not repeated (the SDKs' {"result": ...}).
    same = mt.CallToolResult(content=[mt.TextContent(text="hi")], structured_content={"result": "hi"})
    assert convert_result(same).text == "hi"
    json_text = mt.CallToolResult(content=[mt.TextContent(text='{"a": [1]}')], structured_content={"a": [1]})
    assert convert_result(json_text).text == '{"a": [1]}'
    extra = mt.CallToolResult(content=[mt.TextContent(text="done")], structured_content={"rows": 3})
    assert convert_result(extra).text == 'done\n{"rows": 3}'
