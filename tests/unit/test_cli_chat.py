"""``netclaw chat``'s event view: it prints outputs as a person reads them, reconnects
with backoff when the daemon goes away, and notices a turn that ended meanwhile."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from netclaw import outputs as out
from netclaw.cli._chat import RECONNECT_BACKOFF, ChatView
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
