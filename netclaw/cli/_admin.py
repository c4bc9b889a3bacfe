"""``netclaw sessions …`` and ``netclaw memory …``: the control API from the shell."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
from typing import Any
from zoneinfo import ZoneInfo

from netclaw.cli._connect import client_for
from netclaw.cli._output import fail, usage
from netclaw.reminders import parse_duration


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def reminder_time(ts: float | None, zone: str | None) -> str:
    """A reminder's time with its zone named: in the reminder's own timezone (a Berlin cron
    shows Berlin time), else this machine's, labelled either way."""
    if ts is None:
        return "never again"
    if zone and zone != "UTC":
        return dt.datetime.fromtimestamp(ts, ZoneInfo(zone)).strftime(f"%Y-%m-%d %H:%M %Z ({zone})")
    return dt.datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


# -- sessions -----------------------------------------------------------------------------------


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.session_id:
        return usage(args, f"sessions {args.action} needs a session id")
    with client_for(args) as client:
        match args.action:
            case "show":
                session = client.session(args.session_id, context=args.context)
                _print_json(session) if args.json else print_session(session)
            case "children":
                children = client.children(args.session_id)
                _print_json(children) if args.json else _print_children(children)
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


def _print_children(children: list[dict[str, Any]]) -> None:
    if not children:
        print("no sub-agents")
        return
    for c in children:
        result = f" — {c['result'][:100]}" if c.get("result") and c["status"] != "running" else ""
        print(f"{c['id']}  [{c['status']}, {c['phase']}]  {c['task'][:80]}{result}")


def print_session(session: dict[str, Any]) -> None:
    print(f"{session['id']}  [{session['phase']}]  {session['turns']} turn(s)  {session.get('title') or ''}")
    if session.get("view") == "context":
        print(f"tools offered: {', '.join(session.get('tools') or []) or 'none'}")
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
        for line in _speech_lines(m.get("files") or ()):
            print(f"    {line}")


def _speech_lines(files: Any) -> list[str]:
    """A user message's voice notes: what was heard in each (marked as transcribed
    speech), or why nothing was."""
    lines = []
    for f in files:
        if not isinstance(f, dict) or f.get("kind") != "audio":
            continue
        heard = f.get("transcript") or {}
        if heard.get("text") is not None:
            language = f", {heard['language']}" if heard.get("language") else ""
            lines.append(f"[voice note {f['name']}, transcribed speech{language}] {heard['text']}")
        elif heard.get("error"):
            lines.append(f"[voice note {f['name']}: could not be transcribed: {heard['error']}]")
        else:
            lines.append(f"[voice note {f['name']}: not transcribed yet]")
    return lines


# -- memory -------------------------------------------------------------------------------------


def cmd_memory(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action == "edit":
            if not args.memory_id or not args.text:
                return usage(args, 'memory edit needs a memory id and the new text: memory edit 12 "..."')
            edited = client.edit_memory(args.memory_id, args.text)
            _print_json(edited) if args.json else print(f"memory {edited['id']} now says: {edited['text']}")
            return 0
        if args.action == "rm":
            if not args.memory_id:
                return usage(args, "memory rm needs a memory id")
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
        if m.get("superseded_by") is not None:
            print(f"        replaced by memory {m['superseded_by']} (a changed fact; no longer recalled)")
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action != "list":
            if not args.approval_id:
                return usage(args, f"approvals {args.action} needs an approval id")
            pending = {a["id"]: a for a in client.approvals(args.session)}
            found = pending.get(args.approval_id)
            if found is None:
                return fail(args, "approval_not_found", f"no pending approval {args.approval_id}")
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


def cmd_questions(args: argparse.Namespace) -> int:
    """``netclaw questions [list | accept | answer | decline | cancel] [ID] [key=value …]``."""
    with client_for(args) as client:
        if args.action != "list":
            if not args.question_id:
                return usage(args, f"questions {args.action} needs a question id")
            found = {q["id"]: q for q in client.questions(args.session)}.get(args.question_id)
            if found is None:
                return fail(args, "question_not_found", f"no open question {args.question_id}")
            content = None
            if args.action == "answer":
                pairs = [v.partition("=") for v in args.values]
                if any(not eq for _, eq, _ in pairs):
                    return usage(args, "give the answer as key=value pairs")
                content = {k: v for k, _, v in pairs}
            action = "accept" if args.action == "answer" else args.action
            user = f"{getpass.getuser()} (cli)"
            result = client.answer(str(found["session_id"]), args.question_id, action, content, user)
            _print_json(result) if args.json else print(f"{action}: {found['source']} ({args.question_id})")
            return 0
        found_list = client.questions(args.session)
    if args.json:
        _print_json(found_list)
        return 0
    if not found_list:
        print("no tool asks anything")
        return 0
    for q in found_list:
        print(
            f"{q['id']}  {q['session_id']} turn {q['turn']}: {q['source']} ({q['tool']}) asks: {q['message']}"
        )
        if q.get("url"):
            print(f"        open {q['url']}, then: netclaw questions accept {q['id']}")
        elif q.get("schema"):
            fields = ", ".join(
                f"{name}{'' if name in q['schema'].get('required', []) else '?'}"
                for name in q["schema"].get("properties", {})
            )
            print(f"        answer: netclaw questions answer {q['id']} {fields.replace(', ', '=… ')}=…")
        else:
            print(f"        netclaw questions accept {q['id']}  (or decline)")
        print(f"        asked {_when(q['asked_at'])}, expires {_when(q['expires_at'])}")
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
                return usage(
                    args, "reminders add SESSION (--in 10m | --at ISO | --cron EXPR | --every 1h) TEXT"
                )
            for option, field in (("--in", "in_s"), ("--every", "every_s")):
                if field in when:  # checked here so the error names the option, not the API field
                    parse_duration(when[field], option)
            fields: dict[str, Any] = {"text": " ".join(args.text), **when}
            if args.tz:
                fields["timezone"] = args.tz
            added = client.add_reminder(args.session_id, fields)
            if args.json:
                _print_json(added)
            else:
                print(f"{added['id']}: next {reminder_time(added['next_fire'], args.tz)}")
            return 0
        if args.action == "rm":
            if not args.session_id:
                return usage(args, "reminders rm needs a reminder id")
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
        next_at = reminder_time(r["next_fire"], schedule.get("timezone"))
        print(f"{r['id']}  {r['session_id']}  next {next_at}  [{how}, by {r['created_by']}]")
        print(f"        {r['text'][:100]}")
    return 0
