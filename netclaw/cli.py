"""The ``netclaw`` command."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sqlite3
import sys
import threading
import time
import uuid
from typing import Any

from netclaw import __version__
from netclaw import outputs as out
from netclaw.config import Settings, find_config_path, load_settings
from netclaw.errors import NetclawError
from netclaw.outputs import OutputFilter


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except NetclawError as exc:
        print(f"netclaw: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="netclaw", description="A durable home for an AI agent in chat.")
    parser.add_argument("--version", action="version", version=f"netclaw {__version__}")
    sub = parser.add_subparsers(dest="command")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--config", metavar="PATH", help="config file (default: $NETCLAW_CONFIG, ./netclaw.json)"
        )
        return p

    run = with_config(sub.add_parser("run", help="run the daemon in the foreground"))
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    run.set_defaults(func=_cmd_run)

    chat = with_config(sub.add_parser("chat", help="chat with a session through the running daemon"))
    chat.add_argument("session_id", nargs="?", help="session to talk to (default: a new cli: session)")
    chat.add_argument("-p", "--prompt", metavar="TEXT", help="send one message, print the reply, exit")
    chat.add_argument("--session", metavar="ID", help="session for -p (default: cli:default)")
    chat.add_argument("--json", action="store_true", help="with -p: print the JSON answer")
    chat.add_argument(
        "--filter",
        default="text_streaming,tool_calls",
        help="what to show: text,text_streaming,thinking,tool_calls,usage,files",
    )
    chat.set_defaults(func=_cmd_chat)

    sessions = with_config(sub.add_parser("sessions", help="list sessions or show one"))
    sessions.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    sessions.add_argument("session_id", nargs="?")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument("--context", action="store_true", help="show the model-visible projection")
    sessions.set_defaults(func=_cmd_sessions)

    doctor = with_config(sub.add_parser("doctor", help="check config, database and provider"))
    doctor.set_defaults(func=_cmd_doctor)
    return parser


# -- run ----------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    from netclaw.daemon import configure_logging, run_daemon

    configure_logging(args.log_level)
    return run_daemon(args.config)


# -- chat ---------------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Any:
    from netclaw.client import DaemonClient

    return DaemonClient(load_settings(args.config))


def _cmd_chat(args: argparse.Namespace) -> int:
    try:
        OutputFilter.parse(args.filter)
    except ValueError as exc:
        print(f"netclaw: --filter: {exc}", file=sys.stderr)
        return 2
    if args.prompt is not None:
        return _chat_once(args)
    return _chat_interactive(args)


def _chat_once(args: argparse.Namespace) -> int:
    from netclaw.errors import ClientError

    session_id = args.session or args.session_id or "cli:default"
    with _client(args) as client:
        try:
            answer = client.send(session_id, args.prompt, wait=True, user="cli")
        except ClientError as exc:
            print(f"netclaw: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(answer, ensure_ascii=False))
    else:
        print(answer.get("reply") or "")
    return 0


def _chat_interactive(args: argparse.Namespace) -> int:
    from netclaw.errors import ClientError

    session_id = args.session_id or f"cli:{dt.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}"
    mask = f"text,{args.filter}"
    with _client(args) as client:
        client.health()  # fail fast, with a clear message, if the daemon is not running
        view = _ChatView(session_id)
        reader = threading.Thread(target=view.follow, args=(client, mask), daemon=True)
        reader.start()
        if not view.joined.wait(10):
            print(
                f"netclaw: could not subscribe to {session_id}: {view.failure or 'timed out'}",
                file=sys.stderr,
            )
            return 1
        print(f"session {session_id} — type a message; Ctrl-D to leave", file=sys.stderr)
        while True:
            try:
                line = input("you> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            if not line.strip():
                continue
            view.turn_done.clear()
            try:
                client.send(session_id, line, user="cli")
            except ClientError as exc:
                print(f"netclaw: {exc}", file=sys.stderr)
                continue
            while not view.turn_done.wait(0.2):
                if not reader.is_alive():
                    print(f"netclaw: lost the event stream: {view.failure}", file=sys.stderr)
                    return 1


class _ChatView:
    """Prints a session's outputs as they arrive (on a reader thread)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.joined = threading.Event()
        self.turn_done = threading.Event()
        self.failure: str | None = None
        self._streamed: set[int] = set()

    def follow(self, client: Any, mask: str) -> None:
        try:
            for event, data in client.events(self.session_id, mask):
                try:
                    output = out.parse(event, data)
                except ValueError:  # an event a newer daemon added: nothing to show
                    continue
                self.show(output)
        except Exception as exc:  # noqa: BLE001 - any failure ends the view; the main thread shows it
            self.failure = str(exc)
        self.joined.set()
        self.turn_done.set()

    def show(self, output: out.Output) -> None:
        stream = sys.stdout
        match output:
            case out.Joined():
                self.joined.set()
            case out.TextDelta(turn=turn, delta=delta):
                if turn not in self._streamed:
                    self._streamed.add(turn)
                    stream.write("agent> ")
                stream.write(delta)
            case out.Text(turn=turn, text=text):
                stream.write("\n" if turn in self._streamed else f"agent> {text}\n")
            case out.Thinking(text=text):
                stream.write(f"  (thinking) {text[:500]}\n")
            case out.ToolCall(name=name, arguments=arguments):
                stream.write(f"  [tool] {name}({arguments})\n")
            case out.ToolResult(content=content, is_error=is_error):
                stream.write(f"  [{'error' if is_error else 'result'}] {content[:300]}\n")
            case out.Usage(input_tokens=tokens_in, output_tokens=tokens_out):
                stream.write(f"  [usage] in {tokens_in} / out {tokens_out} tokens\n")
            case out.Error(code=code, message=message):
                sys.stderr.write(f"error: {message} ({code})\n")
            case out.HistoryTrimmed(dropped_turns=dropped):
                stream.write(f"  [earlier turns omitted: {dropped} turn(s) dropped to fit the window]\n")
            case out.Compaction():
                stream.write("  [history compacted]\n")
            case out.Notice(text=text):
                stream.write(f"  [{text}]\n")
            case out.TurnCompleted():
                self.turn_done.set()
            case _:
                pass
        stream.flush()


# -- sessions -----------------------------------------------------------------------------------


def _cmd_sessions(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.action == "show":
            if not args.session_id:
                print("netclaw: sessions show needs a session id", file=sys.stderr)
                return 2
            session = client.session(args.session_id, context=args.context)
            if args.json:
                print(json.dumps(session, ensure_ascii=False, indent=2))
            else:
                _print_session(session)
            return 0
        rows = client.sessions()
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("no sessions yet")
        return 0
    print(f"{'ID':<40} {'CHANNEL':<8} {'PHASE':<11} {'TURNS':>5}  {'LAST ACTIVITY':<19}  TITLE")
    for r in rows:
        when = dt.datetime.fromtimestamp(r["last_activity"]).strftime("%Y-%m-%d %H:%M:%S")
        print(
            f"{r['id']:<40} {r['channel']:<8} {r['phase']:<11} {r['turns']:>5}  {when:<19}  {r['title'] or ''}"
        )
    return 0


def _print_session(session: dict[str, Any]) -> None:
    print(f"{session['id']}  [{session['phase']}]  {session['turns']} turn(s)  {session.get('title') or ''}")
    for m in session["messages"]:
        who = m["role"]
        if m.get("kind") and m["kind"] != "chat":
            who = f"{who}:{m['kind']}"
        if m.get("pending"):
            who += " (queued)"
        content = m["content"]
        if m.get("tool_calls"):
            calls = ", ".join(f"{c['name']}({c['arguments']})" for c in m["tool_calls"])
            content = f"{content}\n    calls: {calls}" if content else f"calls: {calls}"
        if m["role"] == "tool":
            who = f"tool {m.get('name') or ''}#{m.get('tool_call_id')}"
        print(f"--- {who}")
        print(f"    {content}")


# -- doctor -------------------------------------------------------------------------------------


def _cmd_doctor(args: argparse.Namespace) -> int:
    ok = True

    def report(good: bool, what: str, detail: str) -> None:
        nonlocal ok
        ok = ok and good
        print(f"[{'ok' if good else 'FAIL'}] {what}: {detail}")

    path = find_config_path(args.config)
    try:
        settings = load_settings(args.config)
    except NetclawError as exc:
        report(False, "config", str(exc))
        return 1
    report(True, "config", str(path) if path else "no file; built-in defaults")
    ok = _doctor_install(report) and ok
    ok = _doctor_database(settings, report) and ok
    ok = _doctor_provider(settings, report) and ok
    ok = _doctor_adapters(settings, report) and ok
    from netclaw.client import DaemonClient
    from netclaw.errors import ClientError

    with DaemonClient(settings, timeout=3) as client:
        try:
            health = client.health()
            print(f"[info] daemon: running at {client.base_url}, {health['sessions']['resident']} resident")
        except ClientError:
            print(f"[info] daemon: not running at {client.base_url}")
    return 0 if ok else 1


def _doctor_install(report: Any) -> bool:
    from netclaw.persistence import load_migrations

    try:
        migrations = load_migrations()
    except NetclawError as exc:
        report(False, "install", str(exc))
        return False
    report(True, "install", f"netclaw {__version__}, {len(migrations)} migration(s)")
    return True


def _doctor_database(settings: Settings, report: Any) -> bool:
    db = settings.database_path
    if not db.exists():
        parent = settings.data_dir
        while not parent.exists():
            parent = parent.parent
        import os

        writable = os.access(parent, os.W_OK)
        report(
            writable,
            "database",
            f"{db} does not exist yet ({'will be created' if writable else 'cannot be created: not writable'})",
        )
        return writable
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        report(False, "database", f"{db}: {exc}")
        return False
    report(True, "database", f"{db} (schema {version}, {mode}, {sessions} session(s))")
    return True


def _doctor_adapters(settings: Settings, report: Any) -> bool:
    from adapters import build_adapters

    good = True
    # check() validates the environment only; no gateway or connection is needed for it.
    for adapter in build_adapters(settings, None):  # type: ignore[arg-type]
        try:
            adapter.check()
        except NetclawError as exc:
            report(False, f"adapter {adapter.name}", str(exc))
            good = False
        else:
            report(True, f"adapter {adapter.name}", "configured")
    return good


def _doctor_provider(settings: Settings, report: Any) -> bool:
    from netclaw.providers import make_provider

    main = settings.models.main
    name = main.provider
    try:
        provider = make_provider(name, settings.providers[name])
    except NetclawError as exc:
        report(False, f"provider {name}", str(exc))
        return False

    async def probe() -> str:
        try:
            return await provider.check()
        finally:
            await provider.aclose()

    started = time.perf_counter()
    try:
        detail = asyncio.run(probe())
    except NetclawError as exc:
        report(False, f"provider {name}", str(exc))
        return False
    elapsed = (time.perf_counter() - started) * 1000
    report(
        True,
        f"provider {name}",
        f"{settings.providers[name].base_url} {detail} ({elapsed:.0f} ms); model {main.model}",
    )
    return True


if __name__ == "__main__":
    sys.exit(main())
