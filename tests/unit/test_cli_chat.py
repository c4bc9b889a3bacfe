"""``netclaw chat``'s event view: it prints outputs as a person reads them, reconnects
with backoff when the daemon goes away, and notices a turn that ended meanwhile."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from netclaw import outputs as out
from netclaw.cli._chat import RECONNECT_BACKOFF, ChatView, Conversation
from netclaw.errors import DaemonNotRunning

SID = "cli:view"


def event(output: out.Output) -> tuple[str, dict[str, Any]]:
    return output.event, out.payload(output)


class FlakyDaemon:
    """An event stream that breaks (the daemon restarts) and comes back."""

    def __init__(self, *streams: list[tuple[str, dict[str, Any]]] | Exception) -> None:
        self.streams = list(streams)
        self.opened = 0
        self.view: ChatView | None = None  # told to stop once every stream was served

    def events(self, session_id: str, mask: str) -> Iterator[tuple[str, dict[str, Any]]]:
        self.opened += 1
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        yield from stream
        if not self.streams and self.view is not None:
            self.view.stopping.set()  # the test is over: leave instead of reconnecting


def joined(phase: str) -> tuple[str, dict[str, Any]]:
    return event(out.Joined(session_id=SID, title=None, turns=1, phase=phase))


def test_the_view_reconnects_with_backoff_and_finishes_a_turn_that_ended_meanwhile() -> None:
    sleeps: list[float] = []
    daemon = FlakyDaemon(
        [joined("processing"), event(out.TextDelta(session_id=SID, turn=1, delta="Hel"))],
        DaemonNotRunning("cannot reach the netclaw daemon"),
        DaemonNotRunning("cannot reach the netclaw daemon"),
        [joined("ready")],
    )
    stdout, stderr = io.StringIO(), io.StringIO()
    view = daemon.view = ChatView(daemon, SID, "text", stdout=stdout, stderr=stderr, sleep=sleeps.append)  # type: ignore[arg-type]
    view.follow()
    assert daemon.opened == 4
    assert sleeps == [
        RECONNECT_BACKOFF.delay(n) for n in range(3)
    ]  # growing, and reset by a stream that delivered
    assert stderr.getvalue().count("reconnecting") == 1  # said once, not per attempt
    assert "(reconnected)" in stderr.getvalue()
    assert view.turn_done.is_set()  # the session is ready: whatever we waited for is over
    assert stdout.getvalue() == "agent> Hel"


def test_the_view_prints_outputs_for_people() -> None:
    lines = [
        joined("ready"),
        event(out.TextDelta(session_id=SID, turn=1, delta="Hi ")),
        event(out.TextDelta(session_id=SID, turn=1, delta="there")),
        event(out.Text(session_id=SID, turn=1, message_id="a1", text="Hi there")),
        event(out.ToolCall(session_id=SID, turn=2, id="c1", name="current_time", arguments="{}")),
        event(out.Notice(session_id=SID, text="said elsewhere", kind="delivery")),
        event(out.Notice(session_id=SID, text="our own command", kind="command")),
        event(out.SessionReset(session_id=SID, by="U1")),
        event(out.TurnCompleted(session_id=SID, turn=1, message_id="u1", status="completed")),
        ("some_future_event", {"session_id": SID}),
    ]
    daemon = FlakyDaemon(lines)
    stdout, stderr = io.StringIO(), io.StringIO()
    view = daemon.view = ChatView(daemon, SID, "text", stdout=stdout, stderr=stderr, sleep=lambda s: None)  # type: ignore[arg-type]
    view.follow()
    assert stdout.getvalue() == (
        "agent> Hi there\n  [tool] current_time({})\n  [said elsewhere]\n  [the conversation starts afresh]\n"
    )
    assert view.turn_done.is_set() and view.joined.is_set()


def test_a_stopped_reply_and_our_own_reset_are_said_once_and_not_as_errors() -> None:
    lines = [
        joined("processing"),
        event(out.Error(session_id=SID, turn=3, code="cancelled", message="the turn was cancelled by api")),
        event(out.TurnCompleted(session_id=SID, turn=3, message_id="u3", status="cancelled")),
        event(out.SessionReset(session_id=SID, by="cli")),  # the reset this client asked for
        event(out.SessionReset(session_id=SID, by="U9")),  # someone else's
        event(out.Error(session_id=SID, turn=4, code="provider_unavailable", message="cannot reach")),
    ]
    daemon = FlakyDaemon(lines)
    stdout, stderr = io.StringIO(), io.StringIO()
    view = daemon.view = ChatView(daemon, SID, "text", stdout=stdout, stderr=stderr, sleep=lambda s: None)  # type: ignore[arg-type]
    view.own_resets = 1
    view.follow()
    assert stdout.getvalue() == "  [stopped]\n  [the conversation starts afresh]\n"
    assert stderr.getvalue() == "error: cannot reach (provider_unavailable)\n"  # a real failure still is one


def test_output_arriving_at_the_prompt_is_written_above_it_and_the_prompt_comes_back(
    monkeypatch: Any,
) -> None:
    import threading

    from netclaw.cli import _screen

    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(
        _screen, "readline", type("RL", (), {"get_line_buffer": staticmethod(lambda: "half a li")})
    )
    stdout, stderr = io.StringIO(), io.StringIO()
    screen = _screen.Screen(stdout, stderr)
    asking = threading.Event()
    release = threading.Event()

    def fake_input(prompt: str) -> str:
        stdout.write(prompt)
        asking.set()
        release.wait(5)
        return "typed"

    monkeypatch.setattr("builtins.input", fake_input)
    answer: list[str] = []
    reader = threading.Thread(target=lambda: answer.append(screen.ask("you> ")))
    reader.start()
    assert asking.wait(5)
    screen.out("agent> ")  # a reply for another client streams in…
    screen.out("a reminder fired\n")
    screen.err("(lost the connection to the daemon; reconnecting…)\n")
    release.set()
    reader.join(5)
    assert answer == ["typed"]
    # Cleared, written, then the prompt and the draft again (the clearing goes with the text,
    # on the stream it is written to: one terminal shows both).
    assert stdout.getvalue() == "you> \r\x1b[Kagent> a reminder fired\nyou> half a liyou> half a li"
    assert stderr.getvalue() == "\r\x1b[K(lost the connection to the daemon; reconnecting…)\n"
    screen.out("after the prompt\n")  # nobody is typing: written as it is
    assert stdout.getvalue().endswith("you> half a liafter the prompt\n")


class SlowToAnswer:
    """A daemon whose answer to a message comes after its reply began to stream: the person
    presses Ctrl-C while the message is still being sent."""

    def __init__(self, view: ChatView, presses: int) -> None:
        self.view = view
        self.presses = presses
        self.cancelled = 0

    def send(self, session_id: str, text: str, user: str) -> dict[str, Any]:
        for _ in range(self.presses):
            os.kill(os.getpid(), signal.SIGINT)
        return {"session_id": session_id, "accepted": True}

    def cancel(self, session_id: str) -> None:
        self.cancelled += 1
        self.view.turn_done.set()  # the turn ends, stopped


def test_ctrl_c_while_the_message_is_being_sent_stops_the_reply(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell starts us
    view = ChatView(None, SID, "text", stdout=io.StringIO(), stderr=io.StringIO())  # type: ignore[arg-type]
    daemon = SlowToAnswer(view, presses=1)
    conversation = Conversation(daemon, SID, view, view.screen)  # type: ignore[arg-type]
    assert conversation.send("tell me a lot") is True  # the chat goes on
    assert daemon.cancelled == 1
    assert "stopping the reply" in capsys.readouterr().err
    # Twice while sending: leave, as twice while waiting does.
    daemon = SlowToAnswer(view, presses=2)
    conversation = Conversation(daemon, SID, view, view.screen)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        conversation.send("tell me more")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    signal.signal(signal.SIGINT, before)
