"""Traces of a turn (telemetry.traces) as a collector receives them: the running daemon
exports over OTLP/HTTP to a real receiver on 127.0.0.1 that decodes the protobuf wire
format (tests/fakes/otlp_receiver.py); the span tree, its parents and the GenAI
attributes are read from there, and the provider's fake shows the propagated header."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, settings_data, wait_until, write_config
from tests.fakes.otlp_receiver import OtlpReceiverThread, ReceivedSpan
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.subagent_script import FamilyScript
from tests.integration import test_compaction as compaction

StartDaemon = Callable[..., DaemonHandle]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
ROOT = "invoke_agent netclaw"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiverThread]:
    """(Asked for before start_daemon, so it outlives the daemons: their last export at a stop
    reaches it.)"""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within 50 ms, not the default 5 s
    with OtlpReceiverThread() as server:
        yield server


def traced(receiver_url: str, **telemetry: Any) -> dict[str, Any]:
    return {"traces": True, "endpoint": receiver_url, **telemetry}


def register_lookup(handle: DaemonHandle) -> None:
    async def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"found {args.get('q')}"

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert handle.daemon.tools is not None
    handle.daemon.tools.register(Tool("lookup", "Look something up.", schema, lookup))


def one_trace(receiver: OtlpReceiverThread, trace_id: str) -> list[ReceivedSpan]:
    return [s for s in receiver.spans if s.trace_id == trace_id]


def test_a_turn_with_two_tool_rounds_and_a_fallback_is_one_trace_under_the_callers_span(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        telemetry=traced(receiver.base_url),
        providers={"local": {"type": "openai", "base_url": scripted.base_url, "max_retries": 0}},
        models={
            "main": {"provider": "local", "model": "scripted", "fallbacks": ["spare"]},
            "spare": {
                "provider": "local",
                "model": "scripted-spare",
                "price": {"input": 1.0, "output": 2.0},
            },
        },
    )
    register_lookup(handle)
    scripted.enqueue(
        ErrorReply(status=503, message="overloaded"),  # main fails: the turn goes on on spare
        Reply(tool_calls=[ToolCallSpec("lookup", {"q": "one"}, id="call_1")], usage=(100, 10)),
        Reply(tool_calls=[ToolCallSpec("lookup", {"q": "two"}, id="call_2")], usage=(120, 12)),
        Reply(text="all found", usage=(140, 14)),
    )
    answer = handle.send("cli:traced", "find both", wait=True, headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200, answer.text
    spans = wait_until(
        lambda: (found := one_trace(receiver, TRACE_ID)) and any(s.name == ROOT for s in found) and found,
        10,
        "the turn's spans at the collector",
    )
    # Every span of the turn is in the caller's trace, the root under the caller's span.
    (root,) = [s for s in spans if s.name == ROOT]
    assert root.parent_id == PARENT_ID
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["netclaw.session.id"] == "cli:traced"
    assert root.attributes["netclaw.channel"] == "cli"
    assert root.attributes["netclaw.turn"] == 1
    assert root.attributes["netclaw.turn.status"] == "completed"
    assert root.attributes["gen_ai.usage.input_tokens"] == 360
    assert root.resource["service.name"] == "netclaw"
    assert "model_switched" in root.events
    children = [s for s in spans if s.parent_id == root.span_id]
    assert {s.name for s in children} == {
        "queue",
        "journal persist",
        "chat scripted",
        "chat scripted-spare",
        "execute_tool lookup",
    }
    assert all(s.trace_id == TRACE_ID for s in spans)
    assert all(root.start_ns <= s.start_ns and s.end_ns <= root.end_ns for s in children)
    # The model calls: the failed one, then three on the fallback, in order.
    calls = sorted((s for s in children if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [s.name for s in calls] == ["chat scripted"] + ["chat scripted-spare"] * 3
    failed, *answered = calls
    assert failed.status_code == 2 and failed.attributes["error.type"] == "provider_unavailable"
    assert failed.kind == 3  # CLIENT
    for call in answered:
        assert call.status_code != 2
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.provider.name"] == "openai"
        assert call.attributes["gen_ai.request.model"] == "scripted-spare"
        assert call.attributes["gen_ai.response.model"] == "scripted-spare"
        assert call.attributes["gen_ai.conversation.id"] == "cli:traced"
    # Time to first token: of the answer that streamed text (tool calls stream none).
    assert answered[-1].attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert "first_token" in answered[-1].events
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in answered] == [100, 120, 140]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in answered] == [10, 12, 14]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in answered] == [
        ["tool_calls"],
        ["tool_calls"],
        ["stop"],
    ]
    assert answered[0].attributes["netclaw.cost"] == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
    # The tools: one span per call, each between the call that asked and the next.
    tools = sorted((s for s in children if s.name == "execute_tool lookup"), key=lambda s: s.start_ns)
    assert [t.attributes["gen_ai.tool.call.id"] for t in tools] == ["call_1", "call_2"]
    for tool, asked, next_call in zip(tools, answered[:-1], answered[1:], strict=True):
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "lookup"
        assert tool.attributes["netclaw.tool.outcome"] == "ok"
        assert asked.end_ns <= tool.start_ns and tool.end_ns <= next_call.start_ns
    # No content unless capture_content says so.
    assert not any("gen_ai.input.messages" in s.attributes for s in spans)
    assert not any("gen_ai.tool.call.result" in s.attributes for s in spans)
    # The provider saw each call's own span as its parent.
    sent = [h.get("traceparent") for h in scripted.headers]
    assert sent == [f"00-{TRACE_ID}-{c.span_id}-01" for c in calls]
    assert scrape(handle)["netclaw_trace_spans_dropped_total"] == 0


def scrape(handle: DaemonHandle) -> dict[str, float]:
    """/metrics as name{labels} -> value (the labels as written)."""
    text = httpx.get(f"{handle.base_url}/metrics", timeout=5).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
            if "{" in name:  # also the family's total over its labels
                family = name.partition("{")[0]
                values[family] = values.get(family, 0.0) + float(value)
    return values


def test_metrics_say_where_a_turns_time_went_with_traces_off(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon()
    register_lookup(handle)
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"q": "one"}), ToolCallSpec("nothing_such", {})]),
        Reply(text="found it"),
    )
    assert handle.send("cli:timed", "find it", wait=True).status_code == 200
    values = scrape(handle)
    assert values['netclaw_model_seconds_count{model="scripted"}'] == 2
    assert values['netclaw_model_first_token_seconds_count{model="scripted"}'] == 1  # one streamed text
    assert values['netclaw_tool_seconds_count{tool="lookup"}'] == 1
    assert not any("nothing_such" in name for name in values)  # an invented tool makes no series
    assert values["netclaw_queue_wait_seconds_count"] == 1
    assert values['netclaw_trace_spans_dropped_total{reason="queue_full"}'] == 0
    assert values["netclaw_trace_spans_exported_total"] == 0


def test_content_is_captured_only_when_asked_and_then_redacted(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(telemetry=traced(receiver.base_url, capture_content=True))
    register_lookup(handle)
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"q": secret}, id="call_s")]),
        Reply(text="done"),
    )
    assert handle.send("cli:content", f"look up {secret}", wait=True).status_code == 200
    spans = wait_until(
        lambda: (s := receiver.spans) and any(x.name == ROOT for x in s) and s, 10, "the turn's spans"
    )
    (tool,) = [s for s in spans if s.name == "execute_tool lookup"]
    chats = [s for s in spans if s.name == "chat scripted"]
    assert "found" in tool.attributes["gen_ai.tool.call.result"]
    assert "[redacted" in tool.attributes["gen_ai.tool.call.arguments"]
    inputs = json.loads(chats[0].attributes["gen_ai.input.messages"])
    assert any(m["role"] == "user" and "look up" in m["parts"][0]["content"] for m in inputs)
    output = json.loads(chats[-1].attributes["gen_ai.output.messages"])
    assert output[0]["parts"][0]["content"] == "done"
    assert not any(secret in json.dumps(s.attributes) for s in spans)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_collector_that_is_down_costs_dropped_spans_not_slow_turns(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "4")  # a failed export retries for 4 s
    handle = start_daemon(telemetry=traced(f"http://127.0.0.1:{closed_port()}"))
    took = []
    for n in range(3):
        started = time.monotonic()
        assert handle.send(f"cli:down{n}", "hello", wait=True).status_code == 200
        took.append(time.monotonic() - started)
    # The exporter retries for 4 s while these turns run: one that waited on it would take that.
    assert max(took) < 1.0, took

    wait_until(
        lambda: scrape(handle)['netclaw_trace_spans_dropped_total{reason="export_failed"}'] > 0,
        15,
        "the failed export counted",
    )


RUN_WITHOUT_OTEL = """
import sys, json
blocked = sys.argv[1] == "blocked"
if blocked:  # as if the telemetry extra were not installed
    sys.modules["opentelemetry"] = None
from netclaw.config import settings_model
from netclaw.daemon import Daemon
from netclaw.errors import ConfigError
settings = settings_model()(**json.loads(sys.argv[2]))
daemon = Daemon(settings)
try:
    daemon.start()
except ConfigError as exc:
    print("ERROR", exc)
    raise SystemExit(0)
import httpx
from netclaw.security.control_token import read_control_token
token = read_control_token(daemon.settings)
answer = httpx.post(daemon.base_url + "/api/sessions/cli:off/messages?wait=1", json={"text": "hi"},
                    headers={"Authorization": "Bearer " + token, "traceparent": "00-%s-%s-01" % ("1" * 32, "2" * 16)},
                    timeout=30)
daemon.stop()
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m] is not None)
print("STATUS", answer.status_code, "LOADED", loaded)
"""


def run_alone(tmp_path: Path, blocked: bool, **sections: Any) -> str:
    config = {
        "data_dir": str(tmp_path / "data"),
        "providers": {"local": {"type": "demo"}},
        "gateway": {"host": "127.0.0.1", "port": 0},
        "tools": {"workspace_dir": str(tmp_path / "workspace")},
        **sections,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_OTEL, "blocked" if blocked else "free", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_with_traces_off_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    out = run_alone(tmp_path, blocked=True)  # off by default: runs even without the extra
    assert "STATUS 200 LOADED []" in out, out


def test_traces_on_without_the_extra_is_a_start_up_error_naming_it(tmp_path: Path) -> None:
    out = run_alone(tmp_path, blocked=True, telemetry={"traces": True})
    assert out.startswith("ERROR telemetry.traces is on, but OpenTelemetry is not installed"), out
    assert "pip install '.[telemetry]'" in out


def test_a_sub_agents_turn_is_its_own_trace_linked_to_the_spawning_call(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    scripted.set_responder(FamilyScript(rounds=1))
    handle = start_daemon(telemetry=traced(receiver.base_url))
    answer = handle.send("cli:boss", "SPAWN 1 quick wait", wait=True, headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200, answer.text

    def turns() -> list[ReceivedSpan]:
        found = [s for s in receiver.spans if s.name == ROOT]
        return found if len(found) == 2 else []

    roots = wait_until(turns, 10, "the parent's and the child's turns")
    (parent,) = [s for s in roots if s.attributes["netclaw.session.id"] == "cli:boss"]
    (child,) = [s for s in roots if s.attributes["netclaw.session.id"] == "agent:cli:boss/1"]
    (spawn,) = [s for s in receiver.spans if s.name == "execute_tool spawn_agent"]
    assert parent.trace_id == TRACE_ID and spawn.parent_id == parent.span_id
    assert child.trace_id != TRACE_ID and child.parent_id == ""  # a trace of its own...
    assert child.links == ((TRACE_ID, spawn.span_id),)  # ...linked to the call that spawned it
    assert child.attributes["netclaw.channel"] == "agent"
    assert spawn.start_ns <= child.start_ns and child.end_ns <= spawn.end_ns  # it waited for it


def test_an_approval_wait_and_a_compaction_are_spans_of_the_turn(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        telemetry=traced(receiver.base_url),
        models=compaction.MODELS,
        session=compaction.SESSION,
        audiences={"personal": {"approve": ["current_time"]}},
    )
    compaction.route_compaction(scripted)
    sid = "cli:waits"
    scripted.enqueue(*(Reply(text=f"answer {n}", usage=compaction.UNDER) for n in range(3)))
    for n in range(3):
        assert handle.send(sid, compaction.big(n), wait=True).status_code == 200
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("current_time", {}, id="call_t")], usage=compaction.OVER),
        Reply(text="evening", usage=compaction.UNDER),
    )
    assert handle.send(sid, "what time is it?").status_code == 202
    pending = wait_until(lambda: handle.http.get("/api/approvals").json(), 10, "the approval request")
    decided = handle.http.post(
        f"/api/sessions/{sid}/approvals/{pending[0]['id']}", json={"decision": "approve"}
    )
    assert decided.status_code == 200, decided.text

    def fourth_turn() -> list[ReceivedSpan]:
        roots = [s for s in receiver.spans if s.name == ROOT and s.attributes["netclaw.turn"] == 4]
        return roots

    (root,) = wait_until(fourth_turn, 15, "the fourth turn's span")
    wait_until(lambda: [s for s in receiver.spans if s.name == "compaction"], 10, "the compaction's span")
    under = [s for s in receiver.spans if s.parent_id == root.span_id]
    (approval,) = [s for s in under if s.name == "approval current_time"]
    assert approval.attributes["gen_ai.tool.call.id"] == "call_t"
    assert approval.attributes["netclaw.approval.decision"] == "approve"
    assert approval.attributes["netclaw.approval.by"]
    (tool,) = [s for s in under if s.name == "execute_tool current_time"]
    assert approval.end_ns <= tool.start_ns  # the call ran once a person said yes
    (compacted,) = [s for s in under if s.name == "compaction"]
    assert tool.end_ns <= compacted.start_ns
    assert "compacted" in root.events and root.attributes["netclaw.turn.status"] == "completed"


def test_an_mcp_call_is_a_span_with_its_server_and_carries_the_trace_in_its_meta(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
        "cwd": str(Path(__file__).resolve().parents[2]),
    }
    handle = start_daemon(telemetry=traced(receiver.base_url), mcp={"servers": {"docs": server}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__traced", {}, id="call_m")]), Reply(text="ok"))
    assert handle.send("cli:mcp", "what trace?", wait=True).status_code == 200
    (call,) = wait_until(lambda: receiver.named("execute_tool docs__traced"), 10, "the MCP call's span")
    assert call.attributes["netclaw.mcp.server"] == "docs"
    assert call.attributes["gen_ai.tool.type"] == "extension"
    assert call.attributes["netclaw.tool.outcome"] == "ok"
    (result,) = [m for m in handle.transcript("cli:mcp") if m["role"] == "tool"]
    # What the server saw in the request's _meta: this very span as the parent.
    assert f"00-{call.trace_id}-{call.span_id}-" in result["content"]


def doctor(tmp_path: Path, base_url: str, **telemetry: Any) -> dict[str, Any]:
    tmp_path.mkdir(parents=True)
    config = write_config(
        tmp_path / "netclaw.json", settings_data(tmp_path / "data", base_url, telemetry=telemetry)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NETCLAW_"))}
    done = subprocess.run(
        [sys.executable, "-m", "netclaw.cli", "doctor", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    return checks


def test_doctor_says_whether_the_collector_answers(
    receiver: OtlpReceiverThread, scripted: ScriptedOpenAIThread, tmp_path: Path
) -> None:
    up = doctor(tmp_path / "up", scripted.base_url, traces=True, endpoint=receiver.base_url)["traces"]
    assert up["ok"] and up["detail"] == f"exported over OTLP/HTTP to {receiver.base_url}/v1/traces"
    assert receiver.spans == []  # an empty export: no span was sent
    down = doctor(
        tmp_path / "down", scripted.base_url, traces=True, endpoint=f"http://127.0.0.1:{closed_port()}"
    )["traces"]
    assert not down["ok"] and down["detail"].startswith("no collector answers at http://127.0.0.1:")
    assert "traces" not in doctor(tmp_path / "off", scripted.base_url)  # traces off: nothing to check


def test_a_webhook_deliverys_traceparent_is_its_turns_parent(
    receiver: OtlpReceiverThread,
    start_daemon: StartDaemon,
    scripted: ScriptedOpenAIThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI_TOKEN", "ci-token-abcdef-0123456789-abcdefghijkl")
    hooks = {"routes": {"ci": {"auth": {"type": "bearer", "secret_env": "CI_TOKEN"}, "text": "$.message"}}}
    handle = start_daemon(
        telemetry=traced(receiver.base_url),
        webhooks=hooks,
        gateway={"host": "127.0.0.1", "port": 0, "webhook_host": "127.0.0.1", "webhook_port": 0},
    )
    delivered = httpx.post(  # on the webhooks' own listener
        f"http://127.0.0.1:{handle.daemon.webhook_port}/webhooks/ci",
        json={"message": "deploy done"},
        headers={
            "Authorization": "Bearer ci-token-abcdef-0123456789-abcdefghijkl",
            "traceparent": TRACEPARENT,
        },
        params={"wait": "1"},
        timeout=30,
    )
    assert delivered.status_code == 200, delivered.text
    (root,) = wait_until(lambda: receiver.named(ROOT), 10, "the turn's span")
    assert (root.trace_id, root.parent_id) == (TRACE_ID, PARENT_ID)
    assert root.attributes["netclaw.channel"] == "webhook"


def test_a_voice_note_heard_before_the_call_is_a_span_of_its_turn(
    receiver: OtlpReceiverThread, start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    import base64

    from tests.fakes.speech_api import STT_MODEL, FakeSpeechThread, spoken

    audio = spoken("trace this note")
    with FakeSpeechThread() as speech:
        speech.expect(audio, "Trace this note.")
        handle = start_daemon(
            telemetry=traced(receiver.base_url),
            providers={"stt": {"base_url": speech.base_url, "max_retries": 0}},
            speech={"transcription": {"provider": "stt", "model": STT_MODEL}},
        )
        scripted.enqueue(Reply(text="traced"))
        files = [{"name": "n.wav", "mime_type": "audio/wav", "data_base64": base64.b64encode(audio).decode()}]
        answer = handle.http.post(
            "/api/sessions/cli:heard/messages",
            json={"text": "", "files": files},
            params={"wait": "1"},
            headers={"traceparent": TRACEPARENT},
        )
        assert answer.status_code == 200, answer.text
        spans = wait_until(
            lambda: (found := one_trace(receiver, TRACE_ID)) and any(s.name == ROOT for s in found) and found,
            10,
            "the turn's spans at the collector",
        )
    (root,) = [s for s in spans if s.name == ROOT]
    (heard,) = [s for s in spans if s.name == "transcribe"]
    (call,) = [s for s in spans if s.name == "chat scripted"]
    assert heard.parent_id == root.span_id and heard.end_ns <= call.start_ns  # heard before the call
    assert heard.attributes["gen_ai.request.model"] == STT_MODEL
    assert heard.attributes["netclaw.speech.files"] == 1 and heard.attributes["netclaw.speech.failed"] == 0
    assert heard.attributes["netclaw.speech.seconds"] > 0.5
