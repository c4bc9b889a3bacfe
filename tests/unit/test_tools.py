"""ToolRegistry: schemas, failures as error results, concurrent batches; the built-in clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Mapping
from typing import Any

import pytest

from netclaw.errors import ToolError
from netclaw.messages import ToolCall
from netclaw.tools import BUILTIN_TOOLS, CURRENT_TIME, Tool, ToolContext, ToolRegistry, default_registry

OBJ = {"type": "object", "properties": {}}


def make_tool(name: str, handler: Any, description: str = "") -> Tool:
    return Tool(name=name, description=description or f"the {name} tool", parameters=OBJ, handler=handler)


async def echo(args: Mapping[str, Any], ctx: ToolContext) -> str:
    return f"echo:{sorted(args.items())}"


async def boom(args: Mapping[str, Any], ctx: ToolContext) -> str:
    raise KeyError("missing thing")


async def tool_error(args: Mapping[str, Any], ctx: ToolContext) -> str:
    raise ToolError("the file is too large to read")


async def slow(args: Mapping[str, Any], ctx: ToolContext) -> str:
    await asyncio.sleep(float(args.get("s", 5)))
    return "slept"


def call(name: str, arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            make_tool("echo", echo),
            make_tool("boom", boom),
            make_tool("tool_error", tool_error),
            make_tool("slow", slow),
        ]
    )


def test_schemas_and_names(registry: ToolRegistry) -> None:
    schemas = registry.schemas()
    assert [s.name for s in schemas] == ["boom", "echo", "slow", "tool_error"]
    echo_schema = next(s for s in schemas if s.name == "echo")
    assert echo_schema.description == "the echo tool"
    assert echo_schema.parameters == OBJ
    assert registry.names() == ["boom", "echo", "slow", "tool_error"]


def test_allowed_hides_tools_from_schemas(registry: ToolRegistry) -> None:
    assert [s.name for s in registry.schemas(allowed=["echo", "slow", "not-registered"])] == ["echo", "slow"]
    assert registry.schemas(allowed=[]) == []


def test_duplicate_registration_raises(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="echo"):
        registry.register(make_tool("echo", boom))
    with pytest.raises(ValueError):
        ToolRegistry([make_tool("x", echo), make_tool("x", echo)])
    # the original stays
    assert registry.names().count("echo") == 1


async def test_run_success(registry: ToolRegistry) -> None:
    c = call("echo", '{"a": 1}')
    result = await registry.run(c, timeout_s=1)
    assert not result.is_error
    assert result.content == "echo:[('a', 1)]"
    assert result.call is c


async def test_empty_arguments_mean_no_arguments(registry: ToolRegistry) -> None:
    result = await registry.run(call("echo", ""), timeout_s=1)
    assert not result.is_error
    assert result.content == "echo:[]"


async def test_unknown_tool_is_an_error_result(registry: ToolRegistry) -> None:
    result = await registry.run(call("nope"), timeout_s=1)
    assert result.is_error
    assert "nope" in result.content
    assert "no tool" in result.content


@pytest.mark.parametrize("arguments", ["{not json", '{"a": }', "[1, 2"])
async def test_invalid_json_arguments_is_an_error_result(registry: ToolRegistry, arguments: str) -> None:
    result = await registry.run(call("echo", arguments), timeout_s=1)
    assert result.is_error
    assert "not valid JSON" in result.content


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "42", "null", "true"])
async def test_non_object_arguments_is_an_error_result(registry: ToolRegistry, arguments: str) -> None:
    result = await registry.run(call("echo", arguments), timeout_s=1)
    assert result.is_error
    assert "JSON object" in result.content


async def test_handler_that_raises_is_an_error_result(registry: ToolRegistry) -> None:
    result = await registry.run(call("boom"), timeout_s=1)
    assert result.is_error
    assert "boom" in result.content
    assert "KeyError" in result.content
    assert "missing thing" in result.content


async def test_handler_raising_tool_error_is_an_error_result(registry: ToolRegistry) -> None:
    result = await registry.run(call("tool_error"), timeout_s=1)
    assert result.is_error
    assert "the file is too large to read" in result.content
    assert "ToolError" not in result.content  # a ToolError's message is meant for the model as-is


async def test_handler_that_exceeds_the_timeout_is_an_error_result(registry: ToolRegistry) -> None:
    started = time.monotonic()
    result = await registry.run(call("slow", '{"s": 5}'), timeout_s=0.05)
    assert time.monotonic() - started < 3  # not the handler's 5 s
    assert result.is_error
    assert "slow" in result.content
    assert "timed out" in result.content
    assert "0.05" in result.content


async def test_allowed_hides_tools_from_run(registry: ToolRegistry) -> None:
    hidden = await registry.run(call("echo"), timeout_s=1, allowed=["slow"])
    assert hidden.is_error
    assert "echo" in hidden.content
    shown = await registry.run(call("echo"), timeout_s=1, allowed=["echo"])
    assert not shown.is_error


async def test_run_batch_preserves_order_and_runs_concurrently() -> None:
    both_running = asyncio.Barrier(2)  # passed only when the two sleepers run at once

    async def sleeper(args: Mapping[str, Any], ctx: ToolContext) -> str:
        await asyncio.wait_for(both_running.wait(), 5)
        return f"done {args['n']}"

    reg = ToolRegistry([make_tool("sleeper", sleeper), make_tool("echo", echo)])
    calls = [
        call("sleeper", '{"n": 1}', id="a"),
        call("missing", id="b"),
        call("sleeper", '{"n": 2}', id="c"),
        call("echo", '{"x": 0}', id="d"),
    ]
    results = await reg.run_batch(calls, timeout_s=10)
    assert [r.call.id for r in results] == ["a", "b", "c", "d"]
    assert [r.is_error for r in results] == [False, True, False, False]
    assert results[0].content == "done 1"
    assert results[2].content == "done 2"


async def test_run_batch_with_allowed_and_failures_never_raises(registry: ToolRegistry) -> None:
    calls = [call("boom", id="1"), call("echo", id="2"), call("tool_error", id="3"), call("slow", id="4")]
    results = await registry.run_batch(calls, timeout_s=0.05, allowed=(n for n in ["boom", "echo", "slow"]))
    assert [r.call.id for r in results] == ["1", "2", "3", "4"]
    assert [r.is_error for r in results] == [True, False, True, True]
    assert "not available" in results[2].content  # tool_error was not allowed (a generator works too)


async def test_run_batch_of_nothing() -> None:
    assert await ToolRegistry().run_batch([], timeout_s=1) == []


# -- built-in current_time ----------------------------------------------------------------------


def test_builtins_are_in_the_default_registry() -> None:
    assert CURRENT_TIME in BUILTIN_TOOLS
    assert "current_time" in default_registry().names()


def _timestamp(content: str) -> dt.datetime:
    return dt.datetime.fromisoformat(content.split(" ", 1)[0])


@pytest.mark.parametrize(
    ("zone", "offsets_h"),
    [("Asia/Tokyo", {9}), ("Asia/Kolkata", {5.5}), ("UTC", {0}), ("America/New_York", {-5, -4})],
)
async def test_current_time_in_a_timezone(zone: str, offsets_h: set[float]) -> None:
    result = await default_registry().run(call("current_time", f'{{"timezone": "{zone}"}}'), timeout_s=2)
    assert not result.is_error, result.content
    stamp = _timestamp(result.content)
    offset = stamp.utcoffset()
    assert offset is not None
    assert offset.total_seconds() / 3600 in offsets_h
    assert abs((stamp - dt.datetime.now(dt.UTC)).total_seconds()) < 60
    assert zone in result.content


async def test_current_time_defaults_to_utc() -> None:
    result = await default_registry().run(call("current_time", "{}"), timeout_s=2)
    assert not result.is_error
    offset = _timestamp(result.content).utcoffset()
    assert offset is not None
    assert offset.total_seconds() == 0
    assert "UTC" in result.content


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Not a zone", "../../etc/passwd"])
async def test_current_time_unknown_timezone_is_an_error_result(zone: str) -> None:
    result = await default_registry().run(call("current_time", f'{{"timezone": "{zone}"}}'), timeout_s=2)
    assert result.is_error
    assert zone in result.content
    assert "timezone" in result.content


async def test_current_time_non_string_timezone_is_an_error_result() -> None:
    result = await default_registry().run(call("current_time", '{"timezone": 5}'), timeout_s=2)
    assert result.is_error
    assert "timezone" in result.content


async def test_handler_own_timeout_error_is_not_reported_as_the_registry_timeout() -> None:
    async def upstream_timeout(args: Mapping[str, Any], ctx: ToolContext) -> str:
        raise TimeoutError("upstream API did not answer")

    reg = ToolRegistry([make_tool("fetch", upstream_timeout)])
    result = await reg.run(call("fetch"), timeout_s=30)
    assert result.is_error
    assert "upstream API did not answer" in result.content
    assert "after 30s" not in result.content


# -- the tool context ---------------------------------------------------------------------------


async def whoami(args: Mapping[str, Any], ctx: ToolContext) -> str:
    return f"{ctx.session_id}|{ctx.audience}"


async def test_run_passes_the_context_to_the_handler() -> None:
    reg = ToolRegistry([make_tool("whoami", whoami)])
    result = await reg.run(call("whoami"), timeout_s=1, context=ToolContext("slack:T1:C1:1.0", "team"))
    assert not result.is_error
    assert result.content == "slack:T1:C1:1.0|team"


async def test_without_a_context_handlers_get_the_default_one() -> None:
    reg = ToolRegistry([make_tool("whoami", whoami)])
    assert (await reg.run(call("whoami"), timeout_s=1)).content == "|personal"
    assert [r.content for r in await reg.run_batch([call("whoami")], 1)] == ["|personal"]


async def test_run_batch_passes_the_context_to_every_call() -> None:
    reg = ToolRegistry([make_tool("whoami", whoami), make_tool("echo", echo)])
    calls = [call("whoami", id="a"), call("echo", id="b"), call("whoami", id="c")]
    results = await reg.run_batch(calls, timeout_s=1, context=ToolContext("cli:x", "public"))
    assert [r.content for r in results] == ["cli:x|public", "echo:[]", "cli:x|public"]


async def test_context_does_not_change_the_timeout_semantics() -> None:
    reg = ToolRegistry([make_tool("slow", slow)])
    result = await reg.run(call("slow", '{"s": 5}'), timeout_s=0.05, context=ToolContext("s", "team"))
    assert result.is_error
    assert "timed out after 0.05s" in result.content
