"""``netclaw cluster …``: several nodes on one database, from the shell (any node answers).

- ``status``: every live node — version, forwarding protocol, active or draining, how
  many sessions it holds, how long since it renewed.
- ``drain NODE``: hand NODE's sessions to the others (running turns finish first) and
  take no new ones there; the node keeps running. ``resume NODE`` takes sessions again.
- ``owner SESSION``: which node holds the session now.
- ``move SESSION NODE``: hand the session over to NODE (after its running turn).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from netclaw.cli._connect import client_for


def cmd_cluster(args: argparse.Namespace) -> int:
    needs = {"drain": "a node id", "resume": "a node id", "owner": "a session id", "move": "a session id"}
    if args.action in needs and not args.target:
        print(f"netclaw: cluster {args.action} needs {needs[args.action]}", file=sys.stderr)
        return 2
    if args.action == "move" and not args.node:
        print("netclaw: cluster move SESSION NODE: name the node to move it to", file=sys.stderr)
        return 2
    with client_for(args) as client:
        match args.action:
            case "drain":
                answer = client.drain(args.target)
                _show(args, answer, _drained)
            case "resume":
                answer = client.resume(args.target)
                _show(args, answer, lambda a: f"{a['node_id']} takes sessions again")
            case "owner":
                answer = client.owner(args.target)
                _show(args, answer, _owner)
            case "move":
                answer = client.move(args.target, args.node)
                _show(args, answer, _moved)
            case _:
                answer = client.cluster()
                _show(args, answer, _status)
    return 0


def _show(args: argparse.Namespace, answer: dict[str, Any], text: Any) -> None:
    print(json.dumps(answer, indent=2) if args.json else text(answer))


def _status(answer: dict[str, Any]) -> str:
    lines = [f"{'NODE':<20} {'STATE':<9} {'SESSIONS':>8}  {'VERSION':<12} {'PROTO':>5}  {'SEEN':>6}  URL"]
    for n in answer["nodes"]:
        mark = "*" if n["node_id"] == answer["node_id"] else " "
        lines.append(
            f"{mark}{n['node_id']:<19} {n['state']:<9} {n['sessions']:>8}  {n['version'] or '?':<12} "
            f"{n['protocol']:>5}  {n['seen_s']:>5.1f}s  {n['url'] or '-'}"
        )
    lines.append(f"({len(answer['nodes'])} live node(s); * answered)")
    return "\n".join(lines)


def _drained(answer: dict[str, Any]) -> str:
    text = f"{answer['node_id']} is draining: {answer['moved']} session(s) handed to other nodes"
    if answer.get("left"):
        text += f"; still finishing their turns there: {', '.join(answer['left'])}"
    return text


def _owner(answer: dict[str, Any]) -> str:
    if answer["node_id"] is None:
        return f"{answer['session_id']}: no node holds it (it starts on whichever node it reaches next)"
    return (
        f"{answer['session_id']}: node {answer['node_id']} ({answer['url'] or 'no address'}), "
        f"lease epoch {answer['epoch']}, renewed for {answer['expires_in']:.0f}s more"
    )


def _moved(answer: dict[str, Any]) -> str:
    if answer["moved"]:
        return f"{answer['session_id']} is on node {answer['to']} now"
    return f"{answer['session_id']} moves to node {answer['to']} when its running turn ends"
