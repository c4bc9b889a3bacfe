"""What a deploy depends on in the config: which ``NETCLAW_*`` variables are overrides (every
one the docs name works as they say), where state goes under systemd and for the CLI
beside it, the start-up failure line, and init's system files."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from netclaw import config as config_module
from netclaw.cli._init import Choice, env_file_text, starter_config
from netclaw.config import Settings, load_settings, secret_env_names
from netclaw.errors import ConfigError
from netclaw.process import system
from netclaw.process.logs import JsonFormatter, TextFormatter, log_startup_failure

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("NETCLAW_") or name in ("STATE_DIRECTORY", "CREDENTIALS_DIRECTORY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- NETCLAW_* variables ---------------------------------------------------------------------


def _documented_names() -> dict[str, str]:
    """Every NETCLAW_* name in the docs, deploy files and Dockerfile → a file naming it."""
    deploy = [path for path in REPO.glob("deploy/**/*") if path.is_file()]
    files = [REPO / "README.md", REPO / "Dockerfile", *REPO.glob("docs/**/*.md"), *deploy]
    found: dict[str, str] = {}
    for path in files:
        for name in re.findall(r"\bNETCLAW_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(REPO)))
    return found


def _names_a_key(name: str) -> bool:
    """``NETCLAW_A__B__C`` is a path of Settings' fields (a dict's key may be anything)."""
    parts = name[len("NETCLAW_") :].lower().split("__")
    model: Any = Settings
    if parts[0] in Settings.model_fields:  # a section's model as loaded (a channel's is its adapter's)
        section = type(getattr(Settings(), parts[0]))
        if hasattr(section, "model_fields"):
            if len(parts) == 1:
                return True
            model, parts = section, parts[1:]
    i = 0
    while i < len(parts):
        fields = getattr(model, "model_fields", None)
        if fields is None or parts[i] not in fields:
            return False
        annotation = fields[parts[i]].annotation
        i += 1
        if typing.get_origin(annotation) is dict:  # providers.<name>, mcp.servers.<name>, …
            i += 1
            annotation = typing.get_args(annotation)[1]
        models = [a for a in (annotation, *typing.get_args(annotation)) if hasattr(a, "model_fields")]
        model = models[0] if models else None
    return True


# Names the docs use for secrets, and the config (or command) that names them there.
SECRET_USES: dict[str, dict[str, Any]] = {
    "NETCLAW_PG_DSN": {"journal": {"dsn_env": "NETCLAW_PG_DSN"}},
    "NETCLAW_CONTROL_TOKEN": {"gateway": {"control_token_env": "NETCLAW_CONTROL_TOKEN"}},
    "NETCLAW_TOKEN": {},  # with NETCLAW_GATEWAY__CONTROL_TOKEN_ENV=NETCLAW_TOKEN beside it
}


def test_every_netclaw_variable_the_docs_name_works_as_they_say(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _documented_names()
    assert "NETCLAW_PG_DSN" in names and "NETCLAW_TOKEN" in names  # the scan sees the docs
    for name, where in sorted(names.items()):
        if name == "NETCLAW_CONFIG" or f"{name}_" in config_module.RESERVED_ENV_PREFIXES:
            continue  # the config path; a reserved prefix named as such
        with monkeypatch.context() as env:
            if name in SECRET_USES:
                env.setenv(name, "postgresql://x@db/netclaw" if "DSN" in name else "a-token")
                if name == "NETCLAW_TOKEN":
                    env.setenv("NETCLAW_GATEWAY__CONTROL_TOKEN_ENV", "NETCLAW_TOKEN")
                config = write(clean_env / f"{name}.json", SECRET_USES[name])
                load_settings(config)  # accepted: a secret's variable, not an override
            elif name == "NETCLAW_SESION__IDLE_TIMEOUT_S":  # configuration.md's example of a refused typo
                env.setenv(name, "60")
                with pytest.raises(ConfigError, match=name):
                    load_settings(None)
            elif name.startswith(config_module.RESERVED_ENV_PREFIXES):
                env.setenv(name, "1")
                load_settings(None)
            else:
                assert _names_a_key(name), f"{name} ({where}) names no config key"
        # A documented secret name is refused when nothing names it: the rule is real.
        if name in ("NETCLAW_PG_DSN", "NETCLAW_CONTROL_TOKEN"):
            with monkeypatch.context() as env:
                env.setenv(name, "x")
                with pytest.raises(ConfigError, match=name):
                    load_settings(None)


def test_a_command_may_name_a_secret_and_netclaw_secret_names_are_reserved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NETCLAW_PG_DSN", "postgresql://x@db/netclaw")
    load_settings(None, secret_names=("NETCLAW_PG_DSN",))  # migrate-journal --dsn-env NETCLAW_PG_DSN
    monkeypatch.delenv("NETCLAW_PG_DSN")
    monkeypatch.setenv("NETCLAW_SECRET_SLACK_BOT", "xoxb-1")
    monkeypatch.setenv("NETCLAW_TOKEN_FILE", "/run/secrets/token")
    monkeypatch.setenv("NETCLAW_GATEWAY__CONTROL_TOKEN_ENV", "NETCLAW_TOKEN")
    load_settings(None)  # the reserved prefix, and the _FILE twin of a named secret


def test_a_mistyped_override_still_stops_start_up_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_LOG_LEVEL", "debug")  # meant NETCLAW_LOG__LEVEL
    with pytest.raises(ConfigError) as caught:
        load_settings(None)
    assert "NETCLAW_LOG_LEVEL" in str(caught.value) and "NETCLAW_<SECTION>__<KEY>" in str(caught.value)
    assert "NETCLAW_SECRET_" in str(caught.value)


def test_secret_env_names_collects_every_env_key() -> None:
    data = {
        "providers": {"a": {"api_key_env": "key_a"}},
        "mcp": {"servers": {"s": {"env_env": {"TOKEN": "NETCLAW_MCP_T"}, "headers_env": {}}}},
        "webhooks": {"routes": {"r": {"auth": {"secret_env": "HOOK"}}}},
    }
    assert secret_env_names(data) == {
        "KEY_A", "KEY_A_FILE", "NETCLAW_MCP_T", "NETCLAW_MCP_T_FILE", "HOOK", "HOOK_FILE"
    }  # fmt: skip


# -- where state goes ------------------------------------------------------------------------


def test_under_systemd_relative_paths_go_to_the_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "var" / "lib" / "netclaw"
    monkeypatch.setenv("STATE_DIRECTORY", f"{state}:{tmp_path / 'other'}")
    config = write(
        tmp_path / "etc" / "netclaw.json", {"data_dir": "./data", "tools": {"workspace_dir": "./ws"}}
    )
    settings = load_settings(config)
    assert settings.data_dir == state  # not /etc/…/data, which ProtectSystem=strict makes read-only
    assert settings.tools.workspace_dir == state / "ws"
    config = write(tmp_path / "etc" / "netclaw.json", {})
    settings = load_settings(config)
    assert settings.data_dir == state and settings.tools.workspace_dir == state / "workspace"
    absolute = tmp_path / "srv" / "netclaw"
    config = write(tmp_path / "etc" / "netclaw.json", {"data_dir": str(absolute)})
    assert load_settings(config).data_dir == absolute  # an absolute one is the operator's choice


def test_the_cli_reading_the_system_config_finds_the_services_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system_config = write(tmp_path / "etc" / "netclaw" / "netclaw.json", {"data_dir": "./data"})
    monkeypatch.setattr(system, "SYSTEM_CONFIG", system_config)
    monkeypatch.setattr(system, "SYSTEM_STATE_DIR", tmp_path / "var" / "lib" / "netclaw")
    monkeypatch.setattr(config_module, "SYSTEM_CONFIG", system_config)
    settings = load_settings()  # no --config, no variables: the system config is the last place looked
    assert settings.data_dir == tmp_path / "var" / "lib" / "netclaw"
    assert settings.tools.workspace_dir == tmp_path / "var" / "lib" / "netclaw" / "workspace"


def test_an_unwritable_directory_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    with pytest.raises(ConfigError) as caught:
        system.ensure_writable_dir("data_dir", blocker / "data")
    message = str(caught.value)
    assert message.startswith(f"data_dir: cannot use {blocker / 'data'}: ")
    assert f"only the state directory {tmp_path / 'state'} is writable" in message
    system.ensure_writable_dir("data_dir", tmp_path / "fine")
    assert (tmp_path / "fine").stat().st_mode & 0o777 == 0o700


# -- the start-up failure line ---------------------------------------------------------------


def test_a_start_up_failure_is_one_error_record_with_the_traceback_only_at_debug() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.startup")
    logger.handlers[:] = [Keep()]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        raise OSError(30, "Read-only file system", "/etc/netclaw/data")
    except OSError as exc:
        log_startup_failure(logger, exc)
    assert [(r.levelname, r.exc_info is not None) for r in records] == [("ERROR", False), ("DEBUG", True)]
    assert records[0].getMessage() == (
        "netclaw could not start: OSError: [Errno 30] Read-only file system: '/etc/netclaw/data'"
    )
    try:
        raise ConfigError("invalid configuration in x:\n  session.bogus: unknown key\n  a.b: wrong")
    except ConfigError as exc:
        log_startup_failure(logger, exc)
    # One record per line: a terminal and the journal show lines, never an escaped "\x0a".
    assert [r.getMessage() for r in records[2:5]] == [
        "netclaw could not start: invalid configuration in x:",
        "  session.bogus: unknown key",
        "  a.b: wrong",
    ]
    assert all(r.levelname == "ERROR" for r in records[2:5])


def test_under_the_journal_every_line_carries_its_priority_json_too() -> None:
    record = logging.LogRecord("netclaw.daemon", logging.ERROR, __file__, 1, "boom\nsecond line", (), None)
    # One record, one line (a message's own line breaks are escaped: netclaw/process/logs.py).
    assert TextFormatter(journald=True).format(record) == "<3>netclaw.daemon: boom\\x0asecond line"
    line = JsonFormatter(journald=True).format(record)
    assert line.startswith('<3>{"ts": ') and json.loads(line[3:])["level"] == "error"
    assert JsonFormatter().format(record).startswith("{")


# -- netclaw init --system ---------------------------------------------------------------------


def test_the_system_starter_config_keeps_state_in_the_state_directory(tmp_path: Path) -> None:
    choice = Choice("openai", "https://api.openai.com/v1", "gpt-4.1-mini", "OPENAI_API_KEY", 128_000)
    path = tmp_path / "netclaw.json"
    path.write_text(starter_config(choice, system=True))
    settings = load_settings(path)
    assert settings.data_dir == system.SYSTEM_STATE_DIR
    assert settings.tools.workspace_dir == system.SYSTEM_STATE_DIR / "workspace"
    assert settings.providers["main"].api_key_env == "OPENAI_API_KEY"
    env = env_file_text(choice)
    assert "\nOPENAI_API_KEY=\n" in env and env.startswith("# /etc/netclaw/netclaw.env")
    stream = io.StringIO(env)
    assert all(line.startswith("#") or "=" in line for line in stream.read().splitlines() if line)
