"""How a command reports failure: a line on stderr, and with ``--json`` also the error as a
JSON object on stdout (what a script parses), with the exit status in it."""

from __future__ import annotations

import argparse
import json
import sys

from netclaw.errors import ClientError, NetclawError

USAGE = 2  # a command line that cannot work (argparse's own status)
FAILED = 1  # the command ran and failed
INTERRUPTED = 130
JSON_HELP = 'print JSON (a failure too, as {"error": {"code", "message", "exit_status"}})'
BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell tool says when the reader of its output went away


def fail(
    args: argparse.Namespace, code: str, message: str, status: int = FAILED, http: int | None = None
) -> int:
    """Say what went wrong; returns ``status`` (the process's exit status)."""
    print(f"netclaw: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        error: dict[str, object] = {"code": code, "message": message, "exit_status": status}
        if http is not None:
            error["http_status"] = http
        print(json.dumps({"error": error}, ensure_ascii=False))
    return status


def fail_with(args: argparse.Namespace, exc: NetclawError) -> int:
    http = exc.status if isinstance(exc, ClientError) else None
    return fail(args, exc.code, str(exc), FAILED, http)


def usage(args: argparse.Namespace, message: str) -> int:
    return fail(args, "usage", message, USAGE)
