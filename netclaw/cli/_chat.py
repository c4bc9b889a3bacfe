"""``netclaw chat``: one message (``-p``), or an interactive chat that behaves like one.

Interactive: line editing and a history across runs (readline); the last few exchanges
when resuming a session; streaming replies; chat commands (``/status``, ``/new``, …);
Ctrl-C cancels the running turn and a second Ctrl-C leaves; when the daemon restarts
the event stream reconnects with backoff (the interrupted turn resumes on its own).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from netclaw import outputs as out
from netclaw.cli._connect import client_for
from netclaw.cli._output import usage
from netclaw.cli._screen import Screen
from netclaw.client import DaemonClient
from netclaw.commands import parse_command
from netclaw.errors import ClientError
from netclaw.outputs import OutputFilter
from netclaw.retry import Backoff

DEFAULT_SESSION = "cli:default"
RESUME_EXCHANGES = 3
RECONNECT_BACKOFF = Backoff(first_s=0.5, max_s=5.0, jitter=0.0)  # 0.5 s, 1 s, 2 s, 4 s, 5 s, ...
JOIN_TIMEOUT_S = 10.0


def cmd_chat(args: argparse.Namespace) -> int:
    try:
        OutputFilter.parse(args.filter)
    except ValueError as exc:
        return usage(args, f"--filter: {exc}")
    if args.prompt is not None:
        return _chat_once(args)
    return _chat_interactive(args)


def _chat_once(args: argparse.Namespace) -> int:
    session_id = args.session or args.session_id or DEFAULT_SESSION
    with client_for(args) as client:
        answer = client.send(session_id, args.prompt, wait=True, user="cli")  # failures: as every command's
    if args.json:
        print(json.dumps(answer, ensure_ascii=False))
    else:
        print(answer.get("notice") or answer.get("reply") or "")
    return 0


def _chat_interactive(args: argparse.Namespace) -> int:
    session_id = args.session_id or args.session or DEFAULT_SESSION
    with client_for(args) as client:
        client.health()  # fail fast, and without a banner, if the daemon is not running
        _show_recent(client, session_id)
        screen = Screen()
        view = ChatView(client, session_id, f"text,{args.filter}", screen=screen)
        view.start()
        if not view.joined.wait(JOIN_TIMEOUT_S):
            print(
                f"netclaw: could not subscribe to {session_id}: {view.failure or 'timed out'}",
                file=sys.stderr,
            )
            return 1
        print(
            f"session {session_id} — /help for commands; Ctrl-C stops a reply, Ctrl-D leaves", file=sys.stderr
        )
        with _line_history():
            return Conversation(client, session_id, view, screen).run()


def _show_recent(client: DaemonClient, session_id: str) -> None:
    """When resuming a session, the last few exchanges (so people know where they are)."""
    try:
        session = client.session(session_id)
    except ClientError as exc:
        if exc.status == 404:
            return  # a new session
        raise
    messages = [
        m
        for m in session["messages"]
        if (m["role"] in ("user", "assistant") and not m.get("tool_calls") and not m.get("pending"))
        or m.get("kind") == "turn_outcome"  # a turn that failed or was stopped: no reply
    ]
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    recent = messages[starts[-RESUME_EXCHANGES] :] if len(starts) >= RESUME_EXCHANGES else messages
    if not recent:
        return
    print(f"(resuming {session_id}: {session['turns']} turn(s) so far; the last ones:)", file=sys.stderr)
    for m in recent:
        if m.get("kind") == "turn_outcome":
            print(f"  [{m['content']}]")
        else:
            print(f"{'you' if m['role'] == 'user' else 'agent'}> {m['content']}")


@contextlib.contextmanager
def _line_history() -> Any:
    """readline editing and a history file, when the platform has readline."""
    try:
        import readline
    except ImportError:  # not on every platform; input() still works without it
        yield
        return
    path = (
        Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "netclaw" / "chat_history"
    )
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(1000)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)


@contextlib.contextmanager
def _deferred_interrupt() -> Iterator[threading.Event]:
    """A first Ctrl-C is noted (the event) rather than raised; a second one still raises,
    so a daemon that never answers can be left. Only on the main thread, where signals are."""
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # started ignoring it (nohup): keep to that
    ):
        yield pressed
        return

    def note(signum: int, frame: object) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


class Conversation:
    """The prompt loop: read a line, send it, wait for its turn (Ctrl-C cancels it)."""

    def __init__(self, client: DaemonClient, session_id: str, view: ChatView, screen: Screen) -> None:
        self.client = client
        self.session_id = session_id
        self.view = view
        self.screen = screen

    def run(self) -> int:
        interrupted = False
        while True:
            try:
                line = self.screen.ask("you> ")
                interrupted = False
                if line.strip() and not self.send(line):
                    return 130
            except EOFError:
                print(file=sys.stderr)
                return 0
            except KeyboardInterrupt:
                if interrupted:
                    print(file=sys.stderr)
                    return 130
                interrupted = True
                print("\n(Ctrl-C again or Ctrl-D to leave)", file=sys.stderr)

    def send(self, line: str) -> bool:
        """Send one line and wait for its turn. False when the person asked to leave."""
        self.view.turn_done.clear()
        parsed = parse_command(line)
        command = parsed.name if parsed is not None else None
        if command == "reset":  # its answer says it; the session's own notice would say it twice
            self.view.own_resets += 1
        # The reply may start streaming before the daemon's answer is read (a loaded machine):
        # a Ctrl-C then means "stop the reply", so it waits until the answer is in.
        with _deferred_interrupt() as pressed:
            try:
                answer = self.client.send(self.session_id, line, user="cli")
            except ClientError as exc:
                if command == "reset":
                    self.view.own_resets -= 1
                print(f"netclaw: {exc}", file=sys.stderr)
                return True
        if "command" in answer:  # answered at once; no turn to wait for
            print("\n".join(f"  [{line}]" if line else "" for line in answer["notice"].split("\n")))
            return True
        cancelling = False
        if pressed.is_set():
            cancelling = True
            self._stop_reply()
        return self._wait_for_turn(cancelling)

    def _wait_for_turn(self, cancelling: bool) -> bool:
        while True:
            try:
                while not self.view.turn_done.wait(0.2):
                    request = self.view.next_request()
                    if request is not None:
                        self._ask(request)
                return True
            except KeyboardInterrupt:
                if cancelling:
                    print(file=sys.stderr)
                    return False
                cancelling = True
                self._stop_reply()

    def _stop_reply(self) -> None:
        print("\n(stopping the reply; Ctrl-C again to leave)", file=sys.stderr)
        with contextlib.suppress(ClientError):
            self.client.cancel(self.session_id)

    def _ask(self, request: out.ApprovalRequested) -> None:
        """A tool call waits for a decision: ask here, decide through the API."""
        try:
            answer = self.screen.ask(f"  allow {request.tool}? [y]es / [n]o / [a]lways: ").strip().lower()
        except EOFError:
            print("\n  (left undecided; `netclaw approvals` lists it)", file=sys.stderr)
            return
        decision = {"y": "approve", "yes": "approve", "a": "always", "always": "always"}.get(answer, "deny")
        try:
            self.client.decide(self.session_id, request.approval_id, decision, f"{getpass.getuser()} (cli)")
        except ClientError as exc:
            print(f"netclaw: {exc}", file=sys.stderr)


class ChatView:
    """Follows the session's event stream on a thread and prints what arrives; when the
    stream breaks (the daemon restarted) it reconnects with backoff."""

    def __init__(
        self,
        client: DaemonClient,
        session_id: str,
        mask: str,
        *,
        screen: Screen | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.mask = mask
        self.joined = threading.Event()
        self.turn_done = threading.Event()
        self.failure: str | None = None
        self.stopping = threading.Event()
        self.screen = screen or Screen(stdout, stderr)
        self._sleep = sleep
        self.own_resets = 0  # resets this client asked for, whose notice it printed itself
        self._streamed: set[int] = set()
        self._lost = False
        self._requests: queue.SimpleQueue[out.ApprovalRequested] = queue.SimpleQueue()
        self._shown_requests: set[str] = set()

    def next_request(self) -> out.ApprovalRequested | None:
        """An approval request the prompt loop should ask about, if one arrived."""
        try:
            return self._requests.get_nowait()
        except queue.Empty:
            return None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.follow, name="netclaw-chat-events", daemon=True)
        thread.start()
        return thread

    def follow(self) -> None:
        attempt = 0
        while not self.stopping.is_set():
            try:
                for event, data in self.client.events(self.session_id, self.mask):
                    attempt = 0
                    try:
                        output = out.parse(event, data)
                    except ValueError:  # an event a newer daemon added: nothing to show
                        continue
                    self.show(output)
            except ClientError as exc:
                self.failure = str(exc)
            if self.stopping.is_set():
                return
            if not self._lost:
                self._lost = True
                self.screen.err("\n(lost the connection to the daemon; reconnecting…)\n")
            self._sleep(RECONNECT_BACKOFF.delay(attempt))
            attempt += 1

    def show(self, output: out.Output) -> None:
        """Print one output (above the prompt, if the person is typing)."""
        text = self.render(output)
        if text:
            (self.screen.err if isinstance(output, out.Error | out.Joined) else self.screen.out)(text)

    def render(self, output: out.Output) -> str:  # noqa: C901 - one case per output type
        """What ``output`` looks like on the screen ("" for nothing); tracks the stream."""
        match output:
            case out.Joined(phase=phase):
                self.joined.set()
                if self._lost:
                    self._lost = False
                    if phase == "ready":  # whatever we waited for ended while we were away
                        self.turn_done.set()
                    return "(reconnected)\n"
                return ""
            case out.TextDelta(turn=turn, delta=delta):
                if turn not in self._streamed:
                    self._streamed.add(turn)
                    return f"agent> {delta}"
                return delta
            case out.Text(turn=turn, text=text):
                return "\n" if turn in self._streamed else f"agent> {text}\n"
            case out.Thinking(text=text):
                return f"  (thinking) {text[:500]}\n"
            case out.ToolCall(name=name, arguments=arguments):
                return f"  [tool] {name}({arguments})\n"
            case out.ToolResult(content=content, is_error=is_error):
                return f"  [{'error' if is_error else 'result'}] {content[:300]}\n"
            case out.Usage(input_tokens=tokens_in, output_tokens=tokens_out, cache_read_tokens=cached):
                read = f" ({cached} from cache)" if cached else ""
                return f"  [usage] in {tokens_in}{read} / out {tokens_out} tokens\n"
            case out.Error(code="cancelled"):
                return ""  # a stopped reply is announced by the turn's end, not as an error
            case out.Error(code=code, message=message):
                return f"error: {message} ({code})\n"
            case out.HistoryTrimmed(dropped_turns=dropped):
                return f"  [earlier turns omitted: {dropped} turn(s) dropped to fit the window]\n"
            case out.Compaction(summarized=True):
                return "  [earlier conversation summarised]\n"
            case out.Notice(kind="command"):
                return ""  # this client prints its commands' answers itself
            case out.Notice(text=text):
                return f"  [{text}]\n"
            case out.SessionReset():
                if self.own_resets > 0:
                    self.own_resets -= 1
                    return ""
                return "  [the conversation starts afresh]\n"
            case out.ApprovalRequested(approval_id=approval_id, tool=tool, arguments=arguments):
                if approval_id in self._shown_requests:  # re-announced after a reconnect
                    return ""
                self._shown_requests.add(approval_id)
                self._requests.put(output)
                return f"\n  [approval {approval_id}] the agent wants to run {tool}({arguments[:300]})\n"
            case out.ApprovalDecided(approval_id=approval_id, decision=decision, by=by):
                return f"  [approval {approval_id}: {decision} by {by}]\n"
            case out.ToolProgress(name=name, progress=done, total=total, message=message):
                of = f"/{total:g}" if total is not None else ""
                return f"  [progress] {name} {done:g}{of}" + (f": {message}" if message else "") + "\n"
            case out.InputRequested(question_id=qid, source=source, message=message):
                return (
                    f"\n  [question {qid}] {source} asks: {message}\n"
                    f"  (answer with `netclaw questions answer {qid} key=value…`, accept or decline)\n"
                )
            case out.InputAnswered(question_id=qid, action=action, by=by):
                return f"  [question {qid}: {action} by {by}]\n"
            case out.TurnCompleted(status=status):
                self.turn_done.set()
                return "  [stopped]\n" if status == "cancelled" else ""
            case _:
                return ""
