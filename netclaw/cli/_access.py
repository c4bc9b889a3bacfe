"""``netclaw audit`` and ``netclaw tokens …``: the audit trail and named API tokens."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from netclaw.cli._connect import client_for


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def cmd_audit(args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("since", args.since), ("session", args.session)) if v}
    with client_for(args) as client:
        entries: list[dict[str, Any]] = client.json("GET", "/api/audit", params=params)
    if args.json:
        print(json.dumps(entries, ensure_ascii=False, indent=2))
        return 0
    if not entries:
        print("nothing in the audit trail yet")
        return 0
    for e in entries:
        detail = " ".join(f"{k}={v}" for k, v in e["detail"].items() if v not in (None, ""))
        where = e["session_id"] or "-"
        print(f"{_when(e['at'])}  {e['kind']:<18} {e['actor']:<20} {where:<32} {detail}")
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        match args.action:
            case "add":
                if not args.name or not args.role:
                    print("netclaw: tokens add NAME --role ROLE", file=sys.stderr)
                    return 2
                made = client.json("POST", "/api/tokens", json={"name": args.name, "role": args.role})
                if args.json:
                    print(json.dumps(made, indent=2))
                else:
                    print(f"token {made['name']} (role {made['role']}); shown once, keep it safe:")
                    print(made["token"])
            case "rm":
                if not args.name:
                    print("netclaw: tokens rm NAME", file=sys.stderr)
                    return 2
                client.json("DELETE", f"/api/tokens/{args.name}")
                print(f"token {args.name} removed")
            case _:
                rows: list[dict[str, Any]] = client.json("GET", "/api/tokens")
                if args.json:
                    print(json.dumps(rows, indent=2))
                elif not rows:
                    print("no named tokens (the control token is always admin)")
                else:
                    for r in rows:
                        used = _when(r["last_used"]) if r.get("last_used") else "never"
                        print(
                            f"{r['name']:<24} {r['role']:<12} created {_when(r['created_at'])}, last used {used}"
                        )
    return 0
