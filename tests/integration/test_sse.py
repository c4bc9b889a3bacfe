"""SSE subscriptions through the real daemon: filters, lifecycle events, disconnects, slow readers."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import DaemonHandle
from tests.fakes.faulty_journal import JournalFaults, has
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec

Event = tuple[str, dict[str, Any]]
LIFECYCLE = {"joined", "phase", "turn_completed", "title", "error", "compaction", "history_trimmed"}


class SseStream:
    """One ``GET /api/sessions/{id}/events`` stream, read on a background thread.

    ``stop_when(events)`` makes the reader hang up by itself (mid-turn disconnects);
    ``pause()``/``resume()`` stop and restart reading the socket (a slow subscriber);
    ``close()`` hangs up from the test thread (it shuts the socket down under the reader).
    """

    def __init__(
        self,
        handle: DaemonHandle,
        session_id: str,
        filter: str | None = None,
        *,
        stop_when: Callable[[list[Event]], bool] | None = None,
    ) -> None:
        self.session_id = session_id
        self.events: list[Event] = []
        self.status: int | None = None
        self.body: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self._stop_when = stop_when
        self._cond = threading.Condition()
        self._running = threading.Event()
        self._running.set()
        self._closing = False
        self._sock: socket.socket | None = None
        self._client = httpx.Client(
            base_url=handle.base_url,
            headers={"Authorization": f"Bearer {handle.token}"},
            timeout=httpx.Timeout(10.0, read=60.0),
            verify=False,  # plain HTTP on loopback: skip loading the CA bundle (~0.1 s a client)
        )
        params = {"filter": filter} if filter is not None else None
        self._thread = threading.Thread(
            target=self._run,
            args=(f"/api/sessions/{session_id}/events", params),
            name=f"sse-{session_id}",
            daemon=True,
        )
        self._thread.start()

    def _run(self, path: str, params: dict[str, str] | None) -> None:
        try:
            with self._client.stream("GET", path, params=params) as response:
                self.status = response.status_code
                stream = response.extensions.get("network_stream")
                if stream is not None:
                    self._sock = stream.get_extra_info("socket")
                if response.status_code != 200:
                    response.read()
                    self.body = response.json()
                    return
                name: str | None = None
                for line in response.iter_lines():
                    self._running.wait()
                    if self._closing:
                        return
                    if line.startswith("event:"):
                        name = line.partition(":")[2].strip()
                    elif line.startswith("data:") and name is not None:
                        data = json.loads(line.partition(":")[2])
                        with self._cond:
                            self.events.append((name, data))
                            self._cond.notify_all()
                        name = None
                        if self._stop_when is not None and self._stop_when(self.events):
                            return
        except Exception as exc:  # noqa: BLE001 - the reader reports any failure to the test
            if not self._closing:
                self.error = exc
        finally:
            with self._cond:
                self.finished = True
                self._cond.notify_all()

    # -- looking at what arrived --------------------------------------------------------------

    def names(self) -> list[str]:
        with self._cond:
            return [name for name, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [data for event, data in self.events if event == name]

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 5.0) -> list[Event]:
        with self._cond:
            self._cond.wait_for(lambda: predicate(self.events) or self.finished, timeout)
            if not predicate(self.events):
                raise AssertionError(
                    f"SSE {self.session_id}: condition not met within {timeout}s "
                    f"(finished={self.finished}, error={self.error!r}, status={self.status}); "
                    f"events: {[n for n, _ in self.events]}"
                )
            return list(self.events)

    def wait_event(self, name: str, timeout: float = 5.0, count: int = 1) -> dict[str, Any]:
        events = self.wait_for(lambda evs: sum(1 for n, _ in evs if n == name) >= count, timeout)
        return [data for n, data in events if n == name][count - 1]

    def wait_joined(self, timeout: float = 5.0) -> dict[str, Any]:
        return self.wait_event("joined", timeout)

    def wait_finished(self, timeout: float = 5.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.finished, timeout), "the SSE reader did not finish"

    # -- flow control -------------------------------------------------------------------------

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def close(self) -> None:
        self._closing = True
        self._running.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self._client.close()


def sse_streams() -> Iterator[Callable[..., SseStream]]:
    """Yields a function that opens SSE streams; closes them all when resumed."""
    streams: list[SseStream] = []

    def open_stream(handle: DaemonHandle, session_id: str, filter: str | None = None, **kw: Any) -> SseStream:
        stream = SseStream(handle, session_id, filter, **kw)
        streams.append(stream)
        return stream

    yield open_stream
    for stream in streams:
        stream.close()


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def _turn_completed(turn: int) -> Callable[[list[Event]], bool]:
    return lambda evs: any(n == "turn_completed" and d.get("turn") == turn for n, d in evs)


# -- filters and payloads ---------------------------------------------------------------------


def test_two_subscribers_see_only_their_filtered_outputs_plus_lifecycle(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:filters"
    text_only = sse(daemon, sid, "text")
    streaming = sse(daemon, sid, "text_streaming,tool_calls,usage")
    for stream in (text_only, streaming):
        joined = stream.wait_joined()
        assert joined == {"session_id": sid, "title": None, "turns": 0, "phase": "ready"}

    scripted.enqueue(
        Reply(
            tool_calls=[ToolCallSpec("current_time", {"timezone": "UTC"}, id="call_clock")],
            usage=(11, 7),
        ),
        Reply(
            text="The time is now, and this reply streams in pieces.",
            thinking="let me think",
            usage=(123, 45),
            chunk_size=5,
        ),
    )
    response = daemon.send(sid, "What time is it?", wait=True)
    assert response.status_code == 200, response.text
    reply = response.json()["reply"]
    assert reply == "The time is now, and this reply streams in pieces."

    for stream in (text_only, streaming):
        stream.wait_for(_turn_completed(1))
        stream.wait_for(lambda evs: any(n == "phase" and d["from"] == "processing" for n, d in evs))

    # What each one may see.
    assert set(text_only.names()) <= LIFECYCLE | {"text"}
    assert set(streaming.names()) <= LIFECYCLE | {"text_delta", "tool_call", "tool_result", "usage"}
    assert "thinking" not in text_only.names() + streaming.names()
    for stream in (text_only, streaming):
        names = stream.names()
        assert names[0] == "joined"
        assert {"phase", "turn_completed", "title"} <= set(names)
        for name, data in stream.events:
            assert data["session_id"] == sid, (name, data)
        assert stream.of("title") == [{"session_id": sid, "title": "What time is it?"}]
        [completed] = stream.of("turn_completed")
        assert completed["session_id"] == sid and completed["turn"] == 1
        assert completed["status"] == "completed"
        assert completed["message_id"].startswith("u_")  # the user message that started the turn
        phases = [(d["from"], d["to"]) for d in stream.of("phase")]
        assert phases[0] == ("ready", "processing")
        assert ("processing", "ready") in phases

    # text: the assembled reply with its message id.
    (text,) = text_only.of("text")
    transcript = daemon.transcript(sid)
    assert text == {"session_id": sid, "turn": 1, "message_id": transcript[-1]["id"], "text": reply}

    # text_delta: the pieces add up to the reply.
    deltas = streaming.of("text_delta")
    assert len(deltas) >= 1
    assert all(d["turn"] == 1 for d in deltas)
    assert "".join(d["delta"] for d in deltas) == reply

    # usage: one per provider call, with the scripted numbers.
    usage = streaming.of("usage")
    assert [(u["input_tokens"], u["output_tokens"]) for u in usage] == [(11, 7), (123, 45)]
    assert all(u["context_window"] == 32768 and u["turn"] == 1 for u in usage)

    # tool_call / tool_result as docs/events.md gives them.
    (call,) = streaming.of("tool_call")
    assert call == {
        "session_id": sid,
        "turn": 1,
        "id": "call_clock",
        "name": "current_time",
        "arguments": json.dumps({"timezone": "UTC"}),
    }
    (result,) = streaming.of("tool_result")
    assert result["turn"] == 1 and result["id"] == "call_clock" and result["name"] == "current_time"
    assert result["is_error"] is False
    assert "UTC" in result["content"]
    assert streaming.names().index("tool_call") < streaming.names().index("tool_result")
    assert streaming.names().index("tool_result") < streaming.names().index("turn_completed")


def test_error_output_reaches_every_subscriber_whatever_its_filter(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:errors"
    text_only = sse(daemon, sid, "text")
    usage_only = sse(daemon, sid, "usage")
    text_only.wait_joined()
    usage_only.wait_joined()
    scripted.enqueue(ErrorReply(status=400, message="bad model parameter"))
    response = daemon.send(sid, "hello", wait=True)
    assert response.status_code == 502
    for stream in (text_only, usage_only):
        error = stream.wait_event("error")
        assert error["session_id"] == sid
        assert error["turn"] == 1
        assert error["code"] == "provider_bad_request"
        assert "bad model parameter" in error["message"]
        stream.wait_for(_turn_completed(1))
        assert "text" not in stream.names()


def test_default_filter_is_text(daemon: DaemonHandle, sse: Callable[..., SseStream]) -> None:
    sid = "cli:default-filter"
    stream = sse(daemon, sid)
    stream.wait_joined()
    assert daemon.send(sid, "hi there", wait=True).status_code == 200
    stream.wait_for(_turn_completed(1))
    assert stream.of("text")[0]["text"] == "echo: hi there"
    assert "text_delta" not in stream.names()
    assert "usage" not in stream.names()


@pytest.mark.parametrize("spec", ["bogus", "text,bogus", "text;usage"])
def test_unknown_filter_is_400_json(daemon: DaemonHandle, spec: str) -> None:
    response = daemon.http.get("/api/sessions/cli:x/events", params={"filter": spec}, timeout=5)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "invalid_filter"
    assert "bogus" in error["message"] or "text;usage" in error["message"]


def test_events_for_an_invalid_session_id_is_400(daemon: DaemonHandle) -> None:
    response = daemon.http.get("/api/sessions/bad%20id/events", timeout=5)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_session_id"


# -- disconnects and slow readers -------------------------------------------------------------


def test_subscribers_hanging_up_at_once_leave_no_traceback(
    daemon: DaemonHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that subscribes and disconnects at once (before, during or just after the
    stream's head is written): no warning or error in the log, and the session goes on."""
    request = (
        f"GET /api/sessions/cli:hangup/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {daemon.token}\r\n\r\n"
    ).encode()
    port = int(daemon.base_url.rsplit(":", 1)[1])
    for attempt in range(30):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request)
            if attempt % 3 == 1:
                sock.recv(1)  # after the head began
            elif attempt % 3 == 2:
                time.sleep(0.005)  # one of the three moments to hang up at, not a wait
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    assert daemon.send("cli:hangup", "still there?", wait=True).status_code == 200
    time.sleep(0.3)  # absence is the behaviour here: no late warning from a hang-up's handler
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not errors, errors


def test_subscriber_disconnecting_mid_turn_does_not_disturb_the_others(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:disconnect"
    leaver = sse(daemon, sid, "text_streaming", stop_when=lambda evs: any(n == "text_delta" for n, _ in evs))
    stayer = sse(daemon, sid, "text,text_streaming")
    leaver.wait_joined()
    stayer.wait_joined()

    reply = "".join(f"word{i} " for i in range(60)).strip()
    scripted.enqueue(Reply(text=reply, chunk_size=6, chunk_delay_s=0.01))
    response = daemon.send(sid, "talk for a while", wait=True)
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == reply

    leaver.wait_finished()
    assert leaver.error is None
    assert "turn_completed" not in leaver.names()  # it really left mid-turn

    stayer.wait_for(_turn_completed(1))
    assert stayer.of("text")[0]["text"] == reply
    assert "".join(d["delta"] for d in stayer.of("text_delta")) == reply

    # The session goes on serving its remaining subscriber.
    assert daemon.send(sid, "again", wait=True).status_code == 200
    stayer.wait_for(_turn_completed(2))
    assert stayer.of("text")[-1]["text"] == "echo: again"


def test_slow_subscriber_does_not_stall_sessions(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    slow_sid, other_sid = "cli:slow", "cli:other"
    slow = sse(daemon, slow_sid, "text,text_streaming")
    fast = sse(daemon, slow_sid, "text")
    other = sse(daemon, other_sid, "text")
    for stream in (slow, fast, other):
        stream.wait_joined()
    slow.pause()  # stop reading the socket: the kernel buffers fill up under a big reply

    big = "".join(f"{i:07d} " for i in range(50_000))  # 400 kB, streamed in 1000 chunks
    scripted.enqueue(Reply(text=big, chunk_size=400))
    assert daemon.send(slow_sid, "tell me everything").status_code == 202

    # The session itself finishes its turn while the slow subscriber is stuck ...
    fast.wait_for(_turn_completed(1), timeout=10)
    assert fast.of("text")[0]["text"] == big
    transcript = daemon.transcript(slow_sid)
    assert transcript[-1]["role"] == "assistant" and transcript[-1]["content"] == big

    # ... and other sessions answer promptly.
    started = time.monotonic()
    response = daemon.send(other_sid, "are you there?", wait=True)
    assert response.status_code == 200
    assert response.json()["reply"] == "echo: are you there?"
    assert time.monotonic() - started < 10.0  # promptly: a stuck subscriber would hold it for good
    other.wait_for(_turn_completed(1))
    assert "turn_completed" not in slow.names()

    # When the slow reader resumes it still gets the reply and the lifecycle events.
    slow.resume()
    slow.wait_for(_turn_completed(1), timeout=10)
    assert slow.of("text")[0]["text"] == big
    assert slow.error is None


# -- provider streams that break --------------------------------------------------------------


def test_stream_dropped_before_any_text_is_retried_and_subscribers_see_the_reply_once(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:dropped-early"
    stream = sse(daemon, sid, "text,text_streaming")
    stream.wait_joined()
    scripted.enqueue(Reply(text="never shown", drop_after_chunks=1), Reply(text="the real answer"))
    response = daemon.send(sid, "hello", wait=True)
    assert response.status_code == 200 and response.json()["reply"] == "the real answer"
    stream.wait_for(_turn_completed(1))
    assert "".join(d["delta"] for d in stream.of("text_delta")) == "the real answer"
    assert [d["text"] for d in stream.of("text")] == ["the real answer"]
    assert len(scripted.requests) == 2


def test_stream_dropped_mid_reply_fails_the_turn_visibly(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:dropped-late"
    stream = sse(daemon, sid, "text,text_streaming")
    stream.wait_joined()
    scripted.enqueue(Reply(text="a partial answer that breaks off", chunk_size=4, drop_after_chunks=3))
    response = daemon.send(sid, "hello", wait=True)
    assert response.status_code == 502
    error = stream.wait_event("error")
    assert error["turn"] == 1 and error["code"].startswith("provider_")
    stream.wait_for(_turn_completed(1))
    assert "text" not in stream.names()  # no half reply passed off as the answer
    assert len(scripted.requests) == 1  # not retried once the user saw part of it
    assert [(m["role"], m.get("kind", "chat")) for m in daemon.transcript(sid)] == [
        ("user", "chat"),
        ("system", "turn_outcome"),  # the failure, for people; no half reply passed off as the answer
    ]


# -- subscribers of a failed session ----------------------------------------------------------


def test_subscriber_of_a_failed_session_is_not_left_on_a_silent_stream(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:orphaned"
    stream = sse(daemon, sid, "text")
    stream.wait_joined()
    scripted.enqueue(Reply(text="too late", delay_s=0.5))
    # The reply cannot be recorded: the actor fails mid-turn.
    JournalFaults(daemon).fail_when = has("TurnRecorded")
    assert daemon.send(sid, "one").status_code == 202
    assert stream.wait_event("error")["code"] == "session_failed"

    response = daemon.send(sid, "two", wait=True)  # recovered from the journal
    assert response.status_code == 200
    # Either the stream goes on with the recovered session, or it ends so the client reconnects.
    try:
        stream.wait_for(lambda evs: any(n == "turn_completed" for n, _ in evs), timeout=2)
    except AssertionError:
        assert stream.finished, f"the stream is open but silent: {stream.names()}"
