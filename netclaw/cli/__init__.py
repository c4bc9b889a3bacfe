"""The ``netclaw`` command.

- ``run``: the daemon in the foreground.
- ``chat``: :mod:`._chat`.
- ``sessions``, ``memory``, ``approvals`` and ``questions``: :mod:`._admin` (the control API from the shell).
- ``status`` and ``usage``: :mod:`._status`.
- ``mcp``: :mod:`._mcp` (the MCP servers as the daemon sees them; OAuth logins).
- ``doctor``: :mod:`._doctor`; ``init``: :mod:`._init`.
- ``channels``: :mod:`._channels` (installed channels, enabled and running).
- ``skills``: :mod:`._skills` (what the skill folders hold, read from disk).
- ``migrate-journal``: :mod:`._migrate` (SQLite → PostgreSQL).
- ``cluster``: :mod:`._cluster` (several nodes: status, drain, resume, owner, move).

Every command may load netclaw.json, whose channel sections (``slack``, ``discord``,
``webhooks``, and any installed channel's) the channels declare: ``adapters`` is imported
first to register them.
"""

from __future__ import annotations

import argparse
import os
import sys

import adapters  # noqa: F401 - registers the channel sections (see above); light: no adapter is built
from netclaw import __version__
from netclaw.cli._access import cmd_audit, cmd_tokens
from netclaw.cli._admin import cmd_approvals, cmd_memory, cmd_questions, cmd_reminders, cmd_sessions
from netclaw.cli._channels import cmd_channels
from netclaw.cli._chat import cmd_chat
from netclaw.cli._cluster import cmd_cluster
from netclaw.cli._doctor import cmd_doctor
from netclaw.cli._init import cmd_init
from netclaw.cli._mcp import add_parser as add_mcp_parser
from netclaw.cli._migrate import cmd_migrate_journal
from netclaw.cli._output import BROKEN_PIPE, INTERRUPTED, JSON_HELP, fail_with
from netclaw.cli._skills import cmd_skills
from netclaw.cli._status import cmd_status, cmd_usage
from netclaw.errors import NetclawError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # `reminders add SESSION --in 10m the text`: words after the option are the text too.
        if getattr(args, "command", None) == "reminders" and not any(e.startswith("-") for e in extra):
            args.text = [*args.text, *extra]
        else:  # with the usage of the command they were given to, not the top level's
            _command_parser(parser, getattr(args, "command", None)).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except NetclawError as exc:
        return fail_with(args, exc)  # with --json, also as a JSON object on stdout
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `netclaw … | head` stopped reading: not an error of ours
        # Python would complain again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    return _COMMANDS.get(command or "", parser)


# Each command's own parser (for its usage in an error), filled by _parser().
_COMMANDS: dict[str, argparse.ArgumentParser] = {}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="netclaw", description="A durable home for an AI agent in chat.")
    parser.add_argument("--version", action="version", version=f"netclaw {__version__}")
    sub = parser.add_subparsers(dest="command")
    _COMMANDS.clear()

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--config",
            metavar="PATH",
            help="config file (default: $NETCLAW_CONFIG, else the first of ./netclaw.json, "
            "~/.config/netclaw/netclaw.json, /etc/netclaw/netclaw.json; none: built-in defaults)",
        )
        return p

    run = with_config(sub.add_parser("run", help="run the daemon in the foreground"))
    run.add_argument(
        "--log-level",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="beats log.level in the config (default: info)",
    )
    run.set_defaults(func=_cmd_run)

    chat = with_config(sub.add_parser("chat", help="chat with a session through the running daemon"))
    chat.add_argument("session_id", nargs="?", help="session to talk to (default: cli:default)")
    chat.add_argument("-p", "--prompt", metavar="TEXT", help="send one message, print the reply, exit")
    chat.add_argument("--session", metavar="ID", help="session for -p (default: cli:default)")
    chat.add_argument("--json", action="store_true", help="with -p: print the JSON answer")
    chat.add_argument(
        "--filter",
        default="text_streaming,tool_calls",
        help="what to show: text,text_streaming,thinking,tool_calls,usage,files",
    )
    chat.set_defaults(func=cmd_chat)

    sessions = with_config(
        sub.add_parser(
            "sessions",
            help="list, show, reset, cancel or delete sessions; a session's sub-agents; choose its model",
        )
    )
    sessions.add_argument(
        "action",
        nargs="?",
        choices=["list", "show", "children", "reset", "cancel", "model", "rm"],
        default="list",
        help="default: list",
    )
    sessions.add_argument(
        "session_id", nargs="?", help="the session (show, children, reset, cancel, model, rm)"
    )
    sessions.add_argument("name", nargs="?", help="model: the model to choose (`default`: back to main)")
    sessions.add_argument("--json", action="store_true", help=JSON_HELP)
    sessions.add_argument("--context", action="store_true", help="show: the model-visible projection")
    sessions.add_argument("--memories", action="store_true", help="rm: also forget what was learnt in it")
    sessions.set_defaults(func=cmd_sessions)

    memory = with_config(sub.add_parser("memory", help="list, search, edit or delete durable memories"))
    memory.add_argument(
        "action", nargs="?", choices=["list", "edit", "rm"], default="list", help="default: list"
    )
    memory.add_argument("memory_id", nargs="?", help="edit, rm: the memory (its number from the list)")
    memory.add_argument("text", nargs="?", help="edit: the memory's new wording")
    memory.add_argument("--q", metavar="TEXT", help="search by meaning and words (the recall a turn uses)")
    memory.add_argument(
        "--audience", choices=["personal", "team", "public"], help="only memories of this audience"
    )
    memory.add_argument("--session", metavar="ID", help="only memories learnt in this session")
    memory.add_argument("--json", action="store_true", help=JSON_HELP)
    memory.set_defaults(func=cmd_memory)

    audit = with_config(sub.add_parser("audit", help="the audit trail: approvals, tool runs, changes"))
    audit.add_argument("--since", metavar="DATE", help="ISO-8601 date or date-time")
    audit.add_argument("--session", metavar="ID", help="only this session's")
    audit.add_argument("--json", action="store_true", help=JSON_HELP)
    audit.set_defaults(func=cmd_audit)

    tokens = with_config(sub.add_parser("tokens", help="named API tokens with a role: list, add, rm"))
    tokens.add_argument(
        "action", nargs="?", choices=["list", "add", "rm"], default="list", help="default: list"
    )
    tokens.add_argument("name", nargs="?", help="add, rm: the token's name")
    tokens.add_argument("--role", help="add: the role (admin or one of `roles` in the config)")
    tokens.add_argument("--json", action="store_true", help=JSON_HELP)
    tokens.set_defaults(func=cmd_tokens)

    approvals = with_config(sub.add_parser("approvals", help="tool calls waiting for a decision"))
    approvals.add_argument(
        "action",
        nargs="?",
        choices=["list", "approve", "deny", "always"],
        default="list",
        help="default: list",
    )
    approvals.add_argument(
        "approval_id", nargs="?", help="approve, deny, always: the approval (from the list)"
    )
    approvals.add_argument("--session", metavar="ID", help="only this session's")
    approvals.add_argument("--json", action="store_true", help=JSON_HELP)
    approvals.set_defaults(func=cmd_approvals)

    questions = with_config(sub.add_parser("questions", help="what running tools ask people (MCP servers)"))
    questions.add_argument(
        "action",
        nargs="?",
        choices=["list", "answer", "accept", "decline", "cancel"],
        default="list",
        help="default: list",
    )
    questions.add_argument("question_id", nargs="?", help="the question (from the list)")
    questions.add_argument("values", nargs="*", help="answer: the form's fields as key=value")
    questions.add_argument("--session", metavar="ID", help="only this session's")
    questions.add_argument("--json", action="store_true", help=JSON_HELP)
    questions.set_defaults(func=cmd_questions)

    add_mcp_parser(sub, with_config)

    reminders = with_config(sub.add_parser("reminders", help="scheduled reminders: list, add, rm"))
    reminders.add_argument(
        "action", nargs="?", choices=["list", "add", "rm"], default="list", help="default: list"
    )
    reminders.add_argument(
        "session_id", nargs="?", metavar="SESSION|ID", help="add: the session; rm: the reminder"
    )
    reminders.add_argument("text", nargs="*", help="add: what the reminder says")
    reminders.add_argument("--in", dest="in_", metavar="DURATION", help="e.g. 90s, 10m, 2h, 1d")
    reminders.add_argument("--at", metavar="ISO", help="e.g. 2026-12-01T09:00")
    reminders.add_argument("--cron", metavar="EXPR", help="5 fields, e.g. '0 9 * * 1-5'")
    reminders.add_argument("--every", metavar="DURATION", help="repeat, e.g. 1h or 1d")
    reminders.add_argument("--tz", metavar="ZONE", help="IANA timezone for --at and --cron (default UTC)")
    reminders.add_argument("--session", metavar="ID", help="list: only this session's")
    reminders.add_argument("--json", action="store_true", help=JSON_HELP)
    reminders.set_defaults(func=cmd_reminders)

    skills = with_config(sub.add_parser("skills", help="the skills in the skill folders: list, show NAME"))
    skills.add_argument("action", nargs="?", choices=["list", "show"], default="list", help="default: list")
    skills.add_argument("name", nargs="?", help="show: the skill")
    skills.add_argument("--audience", choices=["personal", "team", "public"], help="list: only what it sees")
    skills.add_argument("--json", action="store_true", help=JSON_HELP)
    skills.set_defaults(func=cmd_skills)

    init = sub.add_parser("init", help="write a starter netclaw.json and check the provider")
    init.add_argument("--config", metavar="PATH", help="where to write it (default: ./netclaw.json)")
    init.add_argument(
        "--provider",
        choices=["openai", "anthropic", "demo"],
        help="openai: any OpenAI-compatible server; demo: the built-in demo model, no server and no AI",
    )
    init.add_argument("--base-url", metavar="URL", help="the model server (default: Ollama on this machine)")
    init.add_argument(
        "--model",
        metavar="NAME",
        help="the model (asked unless --yes; its default: qwen3:8b on Ollama, gpt-4.1-mini on a hosted "
        "OpenAI-compatible server, claude-sonnet-4-5 on Anthropic)",
    )
    init.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding the API key")
    init.add_argument("--yes", action="store_true", help="ask nothing; defaults for what was not given")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "--system",
        action="store_true",
        help="for deploy/netclaw.service (as root): /etc/netclaw/netclaw.json and netclaw.env, "
        "state in /var/lib/netclaw",
    )
    init.set_defaults(func=cmd_init)

    status = with_config(sub.add_parser("status", help="the running daemon's health and key figures"))
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(func=cmd_status)

    usage = with_config(
        sub.add_parser("usage", help="provider tokens and their cost per session, day or model")
    )
    usage.add_argument(
        "--by", choices=["session", "day", "model"], default="session", help="default: session"
    )
    usage.add_argument("--since", metavar="DATE", help="ISO date or date-time, UTC (e.g. 2026-11-01)")
    usage.add_argument("--json", action="store_true", help=JSON_HELP)
    usage.set_defaults(func=cmd_usage)

    channels = with_config(
        sub.add_parser(
            "channels", help="the channels installed, enabled and running (and any that fail to load)"
        )
    )
    channels.add_argument("--json", action="store_true", help=JSON_HELP)
    channels.set_defaults(func=cmd_channels)

    doctor = with_config(sub.add_parser("doctor", help="check config, database and provider"))
    doctor.add_argument("--json", action="store_true", help="the same checks as JSON")
    doctor.set_defaults(func=cmd_doctor)

    cluster = with_config(sub.add_parser("cluster", help="several nodes: status, drain, resume, owner, move"))
    cluster.add_argument(
        "action",
        nargs="?",
        choices=["status", "drain", "resume", "owner", "move"],
        default="status",
        help="default: status",
    )
    cluster.add_argument(
        "target", nargs="?", metavar="NODE|SESSION", help="drain/resume: a node; owner/move: a session"
    )
    cluster.add_argument("node", nargs="?", metavar="NODE", help="move: the node to move the session to")
    cluster.add_argument("--json", action="store_true", help=JSON_HELP)
    cluster.set_defaults(func=cmd_cluster)

    migrate = with_config(
        sub.add_parser("migrate-journal", help="copy the SQLite journal into PostgreSQL (daemon stopped)")
    )
    migrate.add_argument("--to", choices=["postgres"], required=True, help="the backend to move to")
    migrate.add_argument(
        "--dsn-env", metavar="NAME", help="the variable holding the DSN (default: journal.dsn_env)"
    )
    migrate.set_defaults(func=cmd_migrate_journal)
    _COMMANDS.update(sub.choices)
    return parser


# -- run ----------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    from netclaw.daemon import run_daemon

    return run_daemon(args.config, args.log_level)
