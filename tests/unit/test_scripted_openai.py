"""Tests for the scripted OpenAI-compatible fake server."""

from __future__ import annotations

import asyncio
import json
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.chat_gateway import until
from tests.fakes.scripted_openai import (
    ErrorReply,
    Reply,
    ScriptedOpenAI,
    ScriptedOpenAIThread,
    ToolCallSpec,
    estimate_prompt_tokens,
    load_script,
    overflow,
    rate_limited,
    server_error,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def chat(content: str = "hi", *, stream: bool = True, usage: bool = True, **extra: Any) -> Any:
    body: dict[str, Any] = {
        "model": "test-model",
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
    }
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


@pytest.fixture
async def fake() -> AsyncIterator[ScriptedOpenAI]:
    async with ScriptedOpenAI() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as c:
        yield c


async def stream_events(
    client: httpx.AsyncClient, fake: ScriptedOpenAI, body: dict[str, Any]
) -> tuple[httpx.Response, list[Any]]:
    """POST a streaming request; returns the response and the parsed data events."""
    events: list[Any] = []
    async with client.stream("POST", f"{fake.base_url}/chat/completions", json=body) as resp:
        buf = ""
        async for text in resp.aiter_text():
            buf += text
            while "\n\n" in buf:
                block, buf = buf.split("\n\n", 1)
                assert block.startswith("data: "), block
                data = block[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
        assert buf == ""
    return resp, events


def choice_deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]


def reassemble_tool_calls(events: list[Any]) -> dict[int, dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for delta in choice_deltas(events):
        for tc in delta.get("tool_calls", []):
            slot = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            if "id" in tc:
                assert tc["type"] == "function"
                slot["id"] = tc["id"]
            slot["name"] += tc["function"].get("name", "")
            slot["arguments"] += tc["function"].get("arguments", "")
    return calls


# --------------------------------------------------------------------------- streaming


async def test_streamed_text_reassembles_exactly(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    text = "Hello, wörld! 🎉 This is a longer answer\nwith a newline."
    fake.enqueue(Reply(text=text, chunk_size=5))
    resp, events = await stream_events(client, fake, chat())

    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["model"] == "test-model" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}

    deltas = choice_deltas(events)
    pieces = [d["content"] for d in deltas[1:] if "content" in d]
    assert "".join(pieces) == text
    assert all(len(p) <= 5 for p in pieces) and len(pieces) == -(-len(text) // 5)
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "stop" and all(f is None for f in finish[:-1])
    assert deltas[-1] == {}


async def test_tool_calls_stream_reassemble(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    args_a = {"path": "/tmp/x.txt", "lines": [1, 2, 3], "note": 'quote " and ünïcode'}
    args_b = '{"query": "weather in Paris"}'
    fake.enqueue(
        Reply(
            text="Let me check.",
            tool_calls=[
                ToolCallSpec(name="read_file", arguments=args_a, id="call_abc"),
                ToolCallSpec(name="search", arguments=args_b),
            ],
            chunk_size=4,
        )
    )
    _, events = await stream_events(client, fake, chat())

    calls = reassemble_tool_calls(events)
    assert sorted(calls) == [0, 1]
    assert calls[0]["id"] == "call_abc" and calls[0]["name"] == "read_file"
    assert json.loads(calls[0]["arguments"]) == args_a
    assert calls[1]["id"].startswith("call_") and calls[1]["name"] == "search"
    assert calls[1]["arguments"] == args_b
    # Arguments really are split across several chunks.
    arg_chunks = [tc for d in choice_deltas(events) for tc in d.get("tool_calls", []) if "id" not in tc]
    assert len(arg_chunks) > 4
    assert all(len(tc["function"]["arguments"]) <= 4 for tc in arg_chunks)
    text = "".join(d.get("content", "") for d in choice_deltas(events))
    assert text == "Let me check."
    last = [e for e in events if isinstance(e, dict) and e["choices"]][-1]
    assert last["choices"][0]["finish_reason"] == "tool_calls"


async def test_auto_tool_call_ids_are_unique(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(
        Reply(tool_calls=[ToolCallSpec("a", {}), ToolCallSpec("b", {})]),
        Reply(tool_calls=[ToolCallSpec("c", {})]),
    )
    _, first = await stream_events(client, fake, chat())
    _, second = await stream_events(client, fake, chat())
    ids = [c["id"] for c in reassemble_tool_calls(first).values()]
    ids += [c["id"] for c in reassemble_tool_calls(second).values()]
    assert len(set(ids)) == 3


async def test_thinking_arrives_as_reasoning_content(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(Reply(text="42", thinking="Let me think about this carefully.", chunk_size=6))
    _, events = await stream_events(client, fake, chat())
    deltas = choice_deltas(events)
    reasoning = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
    assert "".join(reasoning) == "Let me think about this carefully."
    assert len(reasoning) > 1
    first_text = next(i for i, d in enumerate(deltas) if d.get("content"))
    last_reasoning = max(i for i, d in enumerate(deltas) if "reasoning_content" in d)
    assert last_reasoning < first_text


async def test_usage_chunk_only_when_requested(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(Reply(text="abc", usage=(123, 45)), Reply(text="abc", usage=(123, 45)))

    _, with_usage = await stream_events(client, fake, chat(usage=True))
    usage_chunk = with_usage[-2]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 123,
        "completion_tokens": 45,
        "total_tokens": 168,
    }
    assert with_usage[-1] == "[DONE]"

    _, without = await stream_events(client, fake, chat(usage=False))
    assert all(e["choices"] for e in without if isinstance(e, dict))
    assert all("usage" not in e for e in without if isinstance(e, dict))
    assert without[-1] == "[DONE]"


async def test_estimated_usage_when_not_scripted(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(Reply(text="x" * 40))
    body = chat("y" * 400)
    _, events = await stream_events(client, fake, body)
    usage = events[-2]["usage"]
    assert usage["prompt_tokens"] == estimate_prompt_tokens(body) == 100
    assert usage["completion_tokens"] == 11
    assert usage["total_tokens"] == 111


# --------------------------------------------------------------------------- non-stream


async def test_non_stream_json_shape(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(
        Reply(text="done", thinking="hmm", usage=(10, 2)),
        Reply(tool_calls=[ToolCallSpec("run", {"cmd": "ls"}, id="call_1")]),
    )
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))
    assert r.status_code == 200
    data = r.json()
    assert data["id"].startswith("chatcmpl-")
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int)
    assert data["model"] == "test-model"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "done", "reasoning_content": "hmm"},
            "finish_reason": "stop",
        }
    ]
    assert data["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}

    r = await client.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))
    message = r.json()["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "run", "arguments": '{"cmd": "ls"}'},
            }
        ],
    }
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"


async def test_models_endpoint(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    r = await client.get(f"{fake.base_url}/models")
    assert r.status_code == 200
    assert r.json() == {"object": "list", "data": [{"id": "scripted", "object": "model"}]}


# --------------------------------------------------------------------------- scripting


async def test_queue_order_then_echo(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    url = f"{fake.base_url}/chat/completions"
    fake.enqueue(Reply(text="one"), Reply(text="two"))
    assert fake.pending() == 2
    got = []
    for content in ["a", "b", "c"]:
        r = await client.post(url, json=chat(content, stream=False))
        got.append(r.json()["choices"][0]["message"]["content"])
    assert got == ["one", "two", "echo: c"]
    assert fake.pending() == 0
    assert [req["messages"][-1]["content"] for req in fake.requests] == ["a", "b", "c"]

    fake.set_responder(lambda req: Reply(text=f"custom {len(req['messages'])}"))
    r = await client.post(url, json=chat(stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "custom 1"
    fake.set_responder(None)
    r = await client.post(url, json=chat("back", stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "echo: back"


async def test_route_by_marker_beats_queue(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    seen: list[dict[str, Any]] = []

    async def summarize(req: dict[str, Any]) -> Reply:
        seen.append(req)
        await asyncio.sleep(0)
        return Reply(text="SUMMARY")

    fake.route("<<compact>>", summarize)
    fake.enqueue(Reply(text="queued"))
    url = f"{fake.base_url}/chat/completions"

    body = chat(stream=False)
    body["messages"].insert(
        0, {"role": "system", "content": [{"type": "text", "text": "do <<compact>> now"}]}
    )
    r = await client.post(url, json=body)
    assert r.json()["choices"][0]["message"]["content"] == "SUMMARY"
    assert fake.pending() == 1 and len(seen) == 1

    r = await client.post(url, json=chat(stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "queued"


async def test_error_reply_status_body_and_retry_after(
    fake: ScriptedOpenAI, client: httpx.AsyncClient
) -> None:
    url = f"{fake.base_url}/chat/completions"
    fake.enqueue(
        rate_limited(2.5),
        ErrorReply(status=401, message="bad key", code="invalid_api_key"),
        ErrorReply(status=502, body="<html>Bad Gateway</html>"),
        server_error(),
    )

    r = await client.post(url, json=chat())
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2.5"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"

    r = await client.post(url, json=chat(stream=False))
    assert r.status_code == 401
    assert "retry-after" not in r.headers
    assert r.json() == {
        "error": {
            "message": "bad key",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }

    r = await client.post(url, json=chat())
    assert r.status_code == 502
    assert r.text == "<html>Bad Gateway</html>"

    r = await client.post(url, json=chat())
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "server_error"


async def test_overflow_body(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(overflow())
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat())
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded"
    assert "maximum context length" in err["message"]


async def test_context_window_enforced(client: httpx.AsyncClient) -> None:
    async with ScriptedOpenAI(context_window=100) as fake:
        url = f"{fake.base_url}/chat/completions"
        fake.enqueue(Reply(text="fits"), Reply(text="fits too"))
        big = chat("z" * 404, stream=False)  # 101 tokens
        r = await client.post(url, json=big)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert fake.pending() == 2  # an overflow does not consume a step

        # Tool-call arguments count too.
        body = chat("z" * 200, stream=False)
        body["messages"].append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": "a" * 204},
                    }
                ],
            }
        )
        r = await client.post(url, json=body)
        assert r.status_code == 400

        r = await client.post(url, json=chat("z" * 400, stream=False))  # exactly 100
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "fits"


async def test_delay(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(Reply(text="slow", delay_s=0.3), Reply(text="abcdef", chunk_size=1, chunk_delay_s=0.05))
    t0 = time.monotonic()
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))
    assert r.status_code == 200
    assert time.monotonic() - t0 >= 0.3

    t0 = time.monotonic()
    _, events = await stream_events(client, fake, chat())
    assert time.monotonic() - t0 >= 0.05 * 8  # role + 6 text + finish + usage chunks
    assert "".join(d.get("content", "") for d in choice_deltas(events)) == "abcdef"


async def test_drop_after_chunks_breaks_the_stream(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    fake.enqueue(Reply(text="x" * 80, chunk_size=8, drop_after_chunks=3))
    received: list[str] = []
    with pytest.raises(httpx.TransportError):
        async with client.stream("POST", f"{fake.base_url}/chat/completions", json=chat()) as resp:
            assert resp.status_code == 200
            async for text in resp.aiter_text():
                received.append(text)
    body = "".join(received)
    assert body.count("data: ") == 3
    assert "[DONE]" not in body

    # Non-stream: the connection closes with no response at all.
    fake.enqueue(Reply(text="never", drop_after_chunks=0))
    with pytest.raises(httpx.TransportError):
        await client.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))

    # The server keeps serving afterwards.
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat("ok", stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "echo: ok"


async def test_hang_then_stop_returns_promptly(client: httpx.AsyncClient) -> None:
    fake = ScriptedOpenAI()
    await fake.start()
    fake.enqueue(Reply(hang=True), Reply(text="slow", delay_s=30))
    url = f"{fake.base_url}/chat/completions"
    hung = asyncio.create_task(client.post(url, json=chat()))
    delayed = asyncio.create_task(client.post(url, json=chat(stream=False)))
    for _ in range(100):
        if len(fake.requests) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(fake.requests) == 2
    assert not hung.done()

    t0 = time.monotonic()
    await fake.stop()
    assert time.monotonic() - t0 < 5.0  # not the 30 s the second answer waits
    for task in (hung, delayed):
        with pytest.raises(httpx.TransportError):
            await asyncio.wait_for(task, 2.0)


async def test_invalid_requests_get_400(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    url = f"{fake.base_url}/chat/completions"
    r = await client.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"

    r = await client.post(url, json=[1, 2])
    assert r.status_code == 400
    r = await client.post(url, json={"messages": []})
    assert r.status_code == 400
    assert "model" in r.json()["error"]["message"]
    r = await client.post(url, json={"model": "m"})
    assert r.status_code == 400
    assert "messages" in r.json()["error"]["message"]
    assert fake.requests == []

    # Still alive.
    r = await client.post(url, json=chat("alive", stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "echo: alive"


async def test_responder_exception_gives_500(fake: ScriptedOpenAI, client: httpx.AsyncClient) -> None:
    def boom(req: dict[str, Any]) -> Reply:
        raise RuntimeError("kaput")

    fake.set_responder(boom)
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat())
    assert r.status_code == 500
    assert "kaput" in r.json()["error"]["message"]
    assert isinstance(fake.errors[0], RuntimeError)


# --------------------------------------------------------------------------- thread + CLI


def test_thread_variant_from_sync_code() -> None:
    with ScriptedOpenAIThread() as fake:
        assert fake.base_url.startswith("http://127.0.0.1:")
        fake.enqueue(Reply(text="from thread", usage=(1, 2)))
        fake.route("MARK", lambda req: Reply(text="routed"))
        with httpx.Client(timeout=5.0) as c:
            r = c.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))
            assert r.json()["choices"][0]["message"]["content"] == "from thread"
            r = c.post(f"{fake.base_url}/chat/completions", json=chat("MARK", stream=False))
            assert r.json()["choices"][0]["message"]["content"] == "routed"
            with c.stream("POST", f"{fake.base_url}/chat/completions", json=chat("s")) as resp:
                body = resp.read().decode()
            assert '"content": "echo: s"' in body and body.endswith("data: [DONE]\n\n")
        assert len(fake.requests) == 3
        assert fake.pending() == 0
        fake.enqueue(Reply(hang=True))
        hung = httpx.Client(timeout=10.0)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                hung.post(f"{fake.base_url}/chat/completions", json=chat())
            except BaseException as exc:  # noqa: BLE001 - handed to the asserting thread
                errors.append(exc)

        th = threading.Thread(target=call, daemon=True)
        th.start()
        deadline = time.monotonic() + 2
        while len(fake.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 5.0  # __exit__ with a hanging request (it would wait for good)
    th.join(2)
    hung.close()
    assert errors and isinstance(errors[0], httpx.TransportError)


async def test_think_delays_the_echo_not_a_scripted_reply(
    fake: ScriptedOpenAI, client: httpx.AsyncClient
) -> None:
    fake.echo_think_s = 0.3
    fake.enqueue(Reply(text="scripted"))
    r = await client.post(f"{fake.base_url}/chat/completions", json=chat(stream=False))
    assert r.json()["choices"][0]["message"]["content"] == "scripted"
    assert len(fake.answered) == 1
    t0 = time.monotonic()
    echoed = asyncio.ensure_future(
        client.post(f"{fake.base_url}/chat/completions", json=chat("x", stream=False))
    )
    await until(lambda: len(fake.requests) == 2, what="the echo's request")  # its answer waits
    assert len(fake.answered) == 1
    r = await echoed
    assert r.json()["choices"][0]["message"]["content"] == "echo: x"
    assert time.monotonic() - t0 >= 0.3


def start_cli(*args: str, stderr: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.scripted_openai", "--port", "0", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def test_cli_think_is_checked() -> None:
    proc = start_cli("--think", "-1", stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "--think must be 0 or more seconds, not -1" in err


@pytest.fixture
def cli_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "text": "scripted",
                    "tool_calls": [{"name": "t", "arguments": {"a": 1}}],
                    "usage": [7, 3],
                },
                {"error": 429, "retry_after": 1, "code": "rate_limit_exceeded", "message": "slow"},
            ]
        )
    )
    proc = start_cli("--script", str(script), "--think", "0.2")
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=10), "no LISTENING line"
        line = proc.stdout.readline().strip()
        assert line.startswith("LISTENING http://127.0.0.1:"), line
        yield proc, line.split(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_cli_serves_script(cli_server: tuple[subprocess.Popen[str], str]) -> None:
    proc, base_url = cli_server
    assert base_url.endswith("/v1")
    with httpx.Client(timeout=5.0) as c:
        r = c.post(f"{base_url}/chat/completions", json=chat(stream=False))
        data = r.json()
        assert data["choices"][0]["message"]["content"] == "scripted"
        assert data["choices"][0]["message"]["tool_calls"][0]["function"] == {
            "name": "t",
            "arguments": '{"a": 1}',
        }
        assert data["usage"]["total_tokens"] == 10
        r = c.post(f"{base_url}/chat/completions", json=chat())
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        t0 = time.monotonic()
        r = c.post(f"{base_url}/chat/completions", json=chat("tail", stream=False))
        assert r.json()["choices"][0]["message"]["content"] == "echo: tail"
        assert time.monotonic() - t0 >= 0.2  # --think: the echo waits before it answers
    proc.terminate()
    assert proc.wait(5) == 0


def test_load_script(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            [
                {"text": "a", "delay_s": 0.1, "chunk_delay_s": 0.01, "thinking": "t"},
                {"error": 500},
                {"overflow": True},
            ]
        )
    )
    steps = load_script(path)
    assert steps[0] == Reply(text="a", delay_s=0.1, chunk_delay_s=0.01, thinking="t")
    assert steps[1] == ErrorReply(status=500)
    assert isinstance(steps[2], ErrorReply) and steps[2].code == "context_length_exceeded"
