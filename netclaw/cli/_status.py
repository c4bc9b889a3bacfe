"""``netclaw status`` and ``netclaw usage``: the running daemon's key figures without a
dashboard (``/healthz`` and ``/metrics``), and tokens from the journal (``/api/usage``)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from netclaw.cli._connect import client_for


def cmd_status(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        health = client.health()
        figures = key_figures(client.metrics())
        if args.json:
            print(json.dumps({"url": client.base_url, "health": health, "figures": figures}, indent=2))
        else:
            print_status(client.base_url, health, figures)
    return 0 if health.get("status") == "ok" else 1


def key_figures(text: str) -> dict[str, Any]:
    """The figures worth a glance, from the Prometheus text."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value

    def by(name: str, label: str) -> dict[str, int]:
        return {dict(k).get(label, ""): int(v) for k, v in samples.get(name, {}).items()}

    def by_float(name: str, label: str) -> dict[str, float]:
        return {dict(k).get(label, ""): v for k, v in samples.get(name, {}).items()}

    def one(name: str) -> float:
        return sum(samples.get(name, {}).values())

    turn_count, commit_count = one("netclaw_turn_seconds_count"), one("netclaw_journal_commit_seconds_count")
    return {
        "sessions_resident": int(one("netclaw_sessions_resident")),
        "turns": by("netclaw_turns_total", "outcome"),
        "turn_seconds_mean": round(one("netclaw_turn_seconds_sum") / turn_count, 3) if turn_count else None,
        "tokens": by("netclaw_provider_tokens_total", "kind"),
        "cost": {model: round(v, 6) for model, v in by_float("netclaw_cost_total", "model").items()},
        "approvals_pending": int(one("netclaw_approvals_pending")),
        "reminders_fired": int(one("netclaw_reminders_fired_total")),
        "compactions": int(one("netclaw_compactions_total")),
        "history_trims": int(one("netclaw_history_trims_total")),
        "journal_commit_ms_mean": round(one("netclaw_journal_commit_seconds_sum") / commit_count * 1000, 3)
        if commit_count
        else None,
    }


def mcp_line(status: dict[str, Any]) -> str:
    """``up (http), 10 tool(s), 1 restart(s)`` or ``down (http), 1 restart(s): why``."""
    state, restarts = status.get("state", "unknown"), status.get("restarts", 0)
    line = f"{state} ({status.get('transport', '?')})"
    if state == "up":
        line += f", {status.get('tools', 0)} tool(s)"
    if restarts:
        line += f", {restarts} restart(s)"
    detail = status.get("detail")
    return f"{line}: {detail}" if detail else line


def print_status(url: str, health: dict[str, Any], figures: dict[str, Any]) -> None:
    state = "ok" if health.get("status") == "ok" else f"DEGRADED: {health.get('reason', '')}"
    print(f"netclaw at {url}: {state}")
    phases = health.get("sessions", {}).get("by_phase", {})
    shown = ", ".join(f"{phase} {n}" for phase, n in sorted(phases.items()) if n)
    print(f"sessions:  {figures['sessions_resident']} resident" + (f" ({shown})" if shown else ""))
    cluster = health.get("cluster")
    if cluster:  # several nodes: this one, its state, its peers
        peers = ", ".join(f"{p['node_id']} ({p['state']})" for p in cluster.get("peers", [])) or "none"
        print(
            f"cluster:   node {cluster['node_id']} {cluster['state']}, {cluster['leases']} lease(s); peers: {peers}"
        )
    for name, status in sorted(health.get("adapters", {}).items()):
        detail = f": {status['detail']}" if status.get("detail") else ""
        print(f"channel:   {name} {status['state']}{detail}")
    for name, status in sorted(health.get("mcp", {}).items()):
        print(f"mcp:       {name} {mcp_line(status)}")
    skills = health.get("skills")
    if skills is not None:
        print(f"skills:    {skills_line(skills)}")
    turns = figures["turns"]
    mean = figures["turn_seconds_mean"]
    print(
        "turns:     "
        + (", ".join(f"{n:,} {outcome}" for outcome, n in sorted(turns.items())) or "none yet")
        + (f"; mean {mean:.2f} s" if mean is not None else "")
    )
    tokens = figures["tokens"]
    if tokens:
        print("tokens:    " + ", ".join(f"{n:,} {kind}" for kind, n in sorted(tokens.items())))
    if figures["cost"]:
        print("cost:      " + ", ".join(f"{v:.4f} {model}" for model, v in sorted(figures["cost"].items())))
    print(f"approvals: {figures['approvals_pending']} pending")
    print(f"history:   {figures['compactions']} compaction(s), {figures['history_trims']} trim(s)")
    failing = health.get("compaction_failing", {})
    if failing:
        listed = ", ".join(f"{sid} ({n} in a row)" for sid, n in sorted(failing.items()))
        print(f"summaries failing (trimming instead): {listed}")
    if figures["journal_commit_ms_mean"] is not None:
        print(f"journal:   mean commit {figures['journal_commit_ms_mean']:.2f} ms")


def skills_line(skills: dict[str, Any]) -> str:
    """``/healthz``'s skills as one line: what is loaded, what was skipped and why."""
    loaded = skills.get("loaded", [])
    line = f"{len(loaded)} loaded" + (f" ({', '.join(loaded)})" if loaded else "")
    skipped = skills.get("skipped", [])
    if skipped:
        why = "; ".join(
            f"{p['path']}: {p['field'] + ': ' if p.get('field') else ''}{p['message']}" for p in skipped
        )
        line += f"; {len(skipped)} skipped: {why}"
    return line


def cmd_usage(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        rows = client.usage(args.by, args.since)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no turns recorded" + (f" since {args.since}" if args.since else ""))
        return 0
    width = max(len(args.by), *(len(r["key"]) for r in rows))
    keys = ("turns", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    speech = any(r.get("speech_seconds") for r in rows)  # a column only where voice notes were heard
    print(
        f"{args.by:<{width}}  {'turns':>7}  {'input':>12}  {'output':>12}  {'cache read':>12}  "
        f"{'cache write':>12}  {'cost ' + rows[0].get('currency', ''):>12}"
        + (f"  {'speech s':>10}" if speech else "")
    )
    summed = (*keys, "cost", "speech_seconds")
    for r in [*rows, {"key": "total", **{k: sum(r.get(k, 0) for r in rows) for k in summed}}]:
        counts = "  ".join(f"{r.get(k, 0):>{7 if k == 'turns' else 12},}" for k in keys)
        heard = f"  {r.get('speech_seconds', 0.0):>10.1f}" if speech else ""
        print(f"{r['key']:<{width}}  {counts}  {r.get('cost', 0.0):>12.4f}{heard}")
    return 0
