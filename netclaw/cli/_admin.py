"""``netclaw sessions …`` and ``netclaw memory …``: the control API from the shell."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import sys
from typing import Any

from netclaw.cli._connect import client_for


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


# -- sessions -----------------------------------------------------------------------------------


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.session_id:
        print(f"netclaw: sessions {args.action} needs a session id", file=sys.stderr)
        return 2
    with client_for(args) as client:
        match args.action:
            case "show":
                session = client.session(args.session_id, context=args.context)
                _print_json(session) if args.json else print_session(session)
            case "reset":
                answer = client.reset(args.session_id)
                _print_json(answer) if args.json else print(f"{args.session_id}: starts afresh")
            case "cancel":
                answer = client.cancel(args.session_id)
                if args.json:
                    _print_json(answer)
                else:
                    print(
                        f"cancelled turn {answer['turn']}" if answer["cancelled"] else "nothing was running"
                    )
            case "model":
                choice = client.model(args.session_id, args.name)
                if args.json:
                    _print_json(choice)
                else:
                    how = "chosen" if choice["pinned"] else "the default"
                    print(f"{args.session_id}: model {choice['model']} ({choice['model_id']}), {how}")
                    print(f"available: {', '.join(choice['available'])}")
            case "rm":
                client.delete(args.session_id, memories=args.memories)
                if args.json:
                    _print_json({"deleted": args.session_id, "memories": args.memories})
                else:
                    print(f"deleted {args.session_id}" + (" and its memories" if args.memories else ""))
            case _:
                _list_sessions(client.sessions(), as_json=args.json)
    return 0


def _list_sessions(rows: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        _print_json(rows)
        return
    if not rows:
        print("no sessions yet")
        return
    print(f"{'ID':<40} {'CHANNEL':<8} {'PHASE':<11} {'TURNS':>5}  {'LAST ACTIVITY':<19}  TITLE")
    for r in rows:
        when = _when(r["last_activity"])
        print(
            f"{r['id']:<40} {r['channel']:<8} {r['phase']:<11} {r['turns']:>5}  {when:<19}  {r['title'] or ''}"
        )


def print_session(session: dict[str, Any]) -> None:
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


# -- memory -------------------------------------------------------------------------------------


def cmd_memory(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action == "rm":
            if not args.memory_id:
                print("netclaw: memory rm needs a memory id", file=sys.stderr)
                return 2
            client.forget(args.memory_id)
            _print_json({"deleted": args.memory_id}) if args.json else print(
                f"forgot memory {args.memory_id}"
            )
            return 0
        found = client.memories(query=args.q, audience=args.audience, session=args.session)
    if args.json:
        _print_json(found)
        return 0
    if not found:
        print("no memories" + (" match" if args.q else " yet"))
        return 0
    for m in found:
        source = m["source_session"] + (f" turn {m['source_turn']}" if m.get("source_turn") else "")
        print(f"{m['id']:>6}  [{m['audience']}/{m['kind']}]  {m['text']}")
        print(f"        learnt in {source} on {_when(m['created_at'])}")
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action != "list":
            if not args.approval_id:
                print(f"netclaw: approvals {args.action} needs an approval id", file=sys.stderr)
                return 2
            pending = {a["id"]: a for a in client.approvals(args.session)}
            found = pending.get(args.approval_id)
            if found is None:
                print(f"netclaw: no pending approval {args.approval_id}", file=sys.stderr)
                return 1
            user = f"{getpass.getuser()} (cli)"
            result = client.decide(str(found["session_id"]), args.approval_id, args.action, user)
            _print_json(result) if args.json else print(
                f"{args.action}: {found['tool']} ({args.approval_id})"
            )
            return 0
        found_list = client.approvals(args.session)
    if args.json:
        _print_json(found_list)
        return 0
    if not found_list:
        print("no tool calls wait for a decision")
        return 0
    for a in found_list:
        print(f"{a['id']}  {a['session_id']} turn {a['turn']}: {a['tool']} {a['arguments']}")
        print(f"        asked {_when(a['requested_at'])}, expires {_when(a['expires_at'])}")
    return 0


def cmd_reminders(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action == "add":
            when = {
                k: v
                for k, v in (
                    ("in_s", args.in_),
                    ("at", args.at),
                    ("cron", args.cron),
                    ("every_s", args.every),
                )
                if v
            }
            if len(when) != 1 or not args.session_id or not args.text:
                print(
                    "netclaw: reminders add SESSION (--in 10m | --at ISO | --cron EXPR | --every 1h) TEXT",
                    file=sys.stderr,
                )
                return 2
            fields: dict[str, Any] = {"text": " ".join(args.text), **when}
            if args.tz:
                fields["timezone"] = args.tz
            added = client.add_reminder(args.session_id, fields)
            _print_json(added) if args.json else print(f"{added['id']}: next {_when(added['next_fire'])}")
            return 0
        if args.action == "rm":
            if not args.session_id:
                print("netclaw: reminders rm needs a reminder id", file=sys.stderr)
                return 2
            client.delete_reminder(args.session_id)
            _print_json({"deleted": args.session_id}) if args.json else print(f"removed {args.session_id}")
            return 0
        found = client.reminders(args.session)
    if args.json:
        _print_json(found)
        return 0
    if not found:
        print("no reminders")
        return 0
    for r in found:
        schedule = r["schedule"]
        how = (r.get("cron") and f"cron '{r['cron']}' ({schedule['timezone']})") or schedule["kind"]
        print(f"{r['id']}  {r['session_id']}  next {_when(r['next_fire'])}  [{how}, by {r['created_by']}]")
        print(f"        {r['text'][:100]}")
    return 0
