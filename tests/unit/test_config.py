"""Configuration loading: defaults, file, environment, validation errors with key paths."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from netclaw.config import Settings, find_config_path, load_settings
from netclaw.errors import ConfigError
from tests.doc_blocks import block_after, fenced_under

# The examples as the documentation shows them (read from the pages, so they cannot drift).
DOCUMENTED_EXAMPLE = block_after("docs/configuration.md", "example: netclaw.json")
DOCUMENTED_WEBHOOKS = block_after("docs/http-api.md", "example: webhooks")


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, an empty HOME and no NETCLAW_* variables."""
    for name in list(os.environ):
        if name.upper().startswith("NETCLAW_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def error_of(path: Path | str | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


# -- sources ------------------------------------------------------------------------------------


def test_defaults_with_no_file(clean_env: Path) -> None:
    settings = load_settings()
    assert settings.session.idle_timeout_s == 1800
    assert settings.session.snapshot_interval == 20
    assert settings.gateway.port == 5199
    assert settings.gateway.host == "127.0.0.1"
    assert settings.models.main.provider == "local"
    assert "local" in settings.providers
    assert settings.models.compaction is None
    assert settings.compaction_model == settings.models.main
    assert settings.journal.synchronous == "full"
    assert settings.data_dir == (clean_env / "data").resolve()
    assert settings.database_path == settings.data_dir / "netclaw.db"


def test_file_values_are_used(clean_env: Path) -> None:
    write(
        clean_env / "netclaw.json",
        {"session": {"idle_timeout_s": 120, "snapshot_interval": 7}, "gateway": {"port": 6000}},
    )
    settings = load_settings()
    assert settings.session.idle_timeout_s == 120
    assert settings.session.snapshot_interval == 7
    assert settings.gateway.port == 6000
    assert settings.session.turn_timeout_s == 300  # untouched keys keep their defaults


def test_environment_overrides_the_file(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(clean_env / "netclaw.json", {"session": {"idle_timeout_s": 120, "snapshot_interval": 7}})
    monkeypatch.setenv("NETCLAW_SESSION__IDLE_TIMEOUT_S", "60")
    settings = load_settings()
    assert settings.session.idle_timeout_s == 60
    assert settings.session.snapshot_interval == 7  # the rest of the file's section survives


def test_environment_overrides_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_SESSION__IDLE_TIMEOUT_S", "60")
    monkeypatch.setenv("NETCLAW_GATEWAY__PORT", "7001")
    settings = load_settings()
    assert settings.session.idle_timeout_s == 60
    assert settings.gateway.port == 7001


# -- validation errors name the key path --------------------------------------------------------


def test_unknown_key_names_its_path(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"session": {"bogus": 1}})
    message = error_of()
    assert "session.bogus" in message
    assert "unknown key" in message


def test_unknown_top_level_key(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"sesion": {}})
    assert "sesion" in error_of()


def test_a_mistyped_key_is_told_the_key_it_was_probably_meant_to_be(clean_env: Path) -> None:
    import adapters  # noqa: F401 - the channels' sections, as the CLI and the daemon load them

    write(
        clean_env / "netclaw.json",
        {"gatewy": {}, "session": {"idle_timeot_s": 3}, "slack": {"bot_tokn_env": "X"}, "zzz": 1},
    )
    message = error_of()
    assert "gatewy: unknown key (did you mean 'gateway'?)" in message
    assert "session.idle_timeot_s: unknown key (did you mean 'idle_timeout_s'?)" in message
    assert "slack.bot_tokn_env: unknown key (did you mean 'bot_token_env'?)" in message
    assert "zzz: unknown key\n" in message + "\n"  # nothing close: no guess


def test_bad_value_names_its_path(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"session": {"idle_timeout_s": "soon"}})
    message = error_of()
    assert "session.idle_timeout_s" in message
    assert "netclaw.json" in message  # which file


def test_out_of_range_value_names_its_path(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"session": {"idle_timeout_s": -1}})
    assert "session.idle_timeout_s" in error_of()


def test_bad_env_value_names_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_SESSION__IDLE_TIMEOUT_S", "soon")
    assert "session.idle_timeout_s" in error_of()


def test_unknown_provider_is_named(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"models": {"main": {"provider": "nowhere"}}})
    message = error_of()
    assert "nowhere" in message
    assert "models.main.provider" in message


def test_unknown_compaction_provider_is_named(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"models": {"compaction": {"provider": "elsewhere"}}})
    message = error_of()
    assert "elsewhere" in message
    assert "models.compaction.provider" in message


@pytest.mark.parametrize("secret", ["sk-abc 123", "sk-abc123", "my secret", "1KEY"])
def test_api_key_env_holding_a_secret_is_rejected(clean_env: Path, secret: str) -> None:
    write(clean_env / "netclaw.json", {"providers": {"local": {"api_key_env": secret}}})
    message = error_of()
    assert "providers.local.api_key_env" in message
    assert "environment variable" in message


@pytest.mark.parametrize(
    ("section", "key"),
    [("gateway", "control_token_env")],
)
def test_other_env_keys_are_checked_too(clean_env: Path, section: str, key: str) -> None:
    write(clean_env / "netclaw.json", {section: {key: "tok-en value"}})
    assert f"{section}.{key}" in error_of()


def test_webhook_secret_env_is_checked(clean_env: Path) -> None:
    route = {"auth": {"type": "hmac", "secret_env": "s3cr3t-value!"}}
    write(clean_env / "netclaw.json", {"webhooks": {"routes": {"alerts": route}}})
    assert "webhooks.routes.alerts.auth.secret_env" in error_of()


def test_valid_env_names_are_accepted(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", {"providers": {"local": {"api_key_env": "MY_API_KEY_2"}}})
    assert load_settings().providers["local"].api_key_env == "MY_API_KEY_2"


def test_invalid_json_reports_line_and_column(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", '{\n  "session": {\n    "idle_timeout_s": 60,\n  }\n}\n')
    message = error_of()
    assert "not valid JSON" in message
    assert re.search(r"line 4 column \d+", message), message


@pytest.mark.parametrize("text", ["[]", "42", '"x"', "null"])
def test_non_object_json_is_rejected(clean_env: Path, text: str) -> None:
    write(clean_env / "netclaw.json", text)
    assert "JSON object" in error_of()


def test_explicit_missing_path_is_an_error(clean_env: Path) -> None:
    missing = clean_env / "nope.json"
    message = error_of(missing)
    assert "does not exist" in message
    assert str(missing) in message


def test_missing_path_from_env_is_an_error(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_CONFIG", str(clean_env / "nope.json"))
    assert "does not exist" in error_of()


def test_absent_local_file_falls_back_to_defaults(clean_env: Path) -> None:
    assert not (clean_env / "netclaw.json").exists()
    assert find_config_path() is None
    assert load_settings().session == Settings().session


def test_unknown_env_section_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_BOGUS__X", "1")
    message = error_of()
    assert "NETCLAW_BOGUS__X" in message
    assert "bogus" in message


def test_unknown_env_key_in_a_known_section_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETCLAW_SESSION__BOGUS", "1")
    assert "session.bogus" in error_of()


# -- derived values and cross-field rules -------------------------------------------------------


def test_trim_budget_is_derived_unless_set(clean_env: Path) -> None:
    write(
        clean_env / "netclaw.json",
        {"models": {"main": {"provider": "local", "context_window": 10000, "max_output_tokens": 1500}}},
    )
    assert load_settings().trim_budget_tokens == 8500
    write(
        clean_env / "netclaw.json",
        {
            "models": {"main": {"provider": "local", "context_window": 10000, "max_output_tokens": 1500}},
            "history": {"trim_budget_tokens": 4000},
        },
    )
    assert load_settings().trim_budget_tokens == 4000
    assert Settings().trim_budget_tokens == 32768 - 4096


@pytest.mark.parametrize("max_output", [32768, 40000])
def test_max_output_tokens_must_be_below_context_window(clean_env: Path, max_output: int) -> None:
    write(
        clean_env / "netclaw.json",
        {"models": {"main": {"context_window": 32768, "max_output_tokens": max_output}}},
    )
    message = error_of()
    assert "models.main" in message
    assert "max_output_tokens" in message


def test_relative_data_dir_is_relative_to_the_file(clean_env: Path, tmp_path: Path) -> None:
    config = write(tmp_path / "etc" / "netclaw" / "netclaw.json", {"data_dir": "./state"})
    settings = load_settings(config)
    assert settings.data_dir == (tmp_path / "etc" / "netclaw" / "state").resolve()
    assert settings.data_dir.is_absolute()


def test_absolute_data_dir_is_kept(clean_env: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    config = write(tmp_path / "etc" / "netclaw.json", {"data_dir": str(target)})
    assert load_settings(config).data_dir == target


def test_env_data_dir_is_relative_to_the_working_directory(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "etc" / "netclaw.json", {"data_dir": "./from-file"})
    monkeypatch.setenv("NETCLAW_DATA_DIR", "./from-env")
    assert load_settings(config).data_dir == (clean_env / "from-env").resolve()


# -- where the file is found --------------------------------------------------------------------


def test_find_config_path_order(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home_file = write(Path(os.environ["HOME"]) / ".config" / "netclaw" / "netclaw.json", {})
    assert find_config_path() == home_file

    write(clean_env / "netclaw.json", {})
    assert find_config_path() == Path("netclaw.json")

    env_file = tmp_path / "env.json"  # need not exist: the env names it explicitly
    monkeypatch.setenv("NETCLAW_CONFIG", str(env_file))
    assert find_config_path() == env_file

    assert find_config_path(tmp_path / "explicit.json") == tmp_path / "explicit.json"
    assert find_config_path(str(tmp_path / "explicit.json")) == tmp_path / "explicit.json"


def test_load_settings_follows_the_order(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(Path(os.environ["HOME"]) / ".config" / "netclaw" / "netclaw.json", {"gateway": {"port": 1001}})
    assert load_settings().gateway.port == 1001
    write(clean_env / "netclaw.json", {"gateway": {"port": 1002}})
    assert load_settings().gateway.port == 1002
    monkeypatch.setenv("NETCLAW_CONFIG", str(write(tmp_path / "env.json", {"gateway": {"port": 1003}})))
    assert load_settings().gateway.port == 1003
    assert load_settings(write(tmp_path / "cli.json", {"gateway": {"port": 1004}})).gateway.port == 1004


# -- the documented example ---------------------------------------------------------------------


def test_the_documented_example_is_accepted_as_is() -> None:
    data = json.loads(DOCUMENTED_EXAMPLE)
    settings = Settings(**data)
    assert settings.providers["claude"].type == "anthropic"
    assert settings.providers["claude"].api_key_env == "ANTHROPIC_API_KEY"
    assert settings.providers["local"].api_key_env is None
    assert settings.providers["local"].base_url == "http://127.0.0.1:11434/v1"
    assert settings.models.main.model == "qwen3:8b"
    assert settings.models.compaction is None
    assert settings.session.max_resident_sessions == 1000
    assert settings.history.trim_budget_tokens is None
    assert settings.trim_budget_tokens == 32768 - 4096
    # every key of the example survives into the model (none was silently dropped)
    dumped = settings.model_dump(mode="json")
    for section, value in data.items():
        if isinstance(value, dict):
            for key in value:
                assert key in dumped[section], f"{section}.{key}"


def test_the_documented_example_loads_from_a_file(clean_env: Path) -> None:
    write(clean_env / "netclaw.json", DOCUMENTED_EXAMPLE)
    settings = load_settings()
    assert settings.data_dir == (clean_env / "data").resolve()
    assert set(settings.providers) == {"local", "claude"}


def test_the_documented_webhook_example_is_accepted() -> None:
    settings = Settings(webhooks=json.loads(DOCUMENTED_WEBHOOKS))
    route = settings.webhooks.routes["alerts"]
    assert route.auth.type == "hmac"
    assert route.auth.secret_env == "ALERTS_SECRET"
    assert route.session_key == "$.thread"
    assert route.max_body_bytes == 1048576
    assert route.rate_limit_per_minute == 60


# -- skills and web search ----------------------------------------------------------------------


def test_skill_folders_are_relative_to_the_file(clean_env: Path, tmp_path: Path) -> None:
    config = write(
        tmp_path / "etc" / "netclaw.json",
        {"skills": {"dirs": ["./skills", str(tmp_path / "abs")], "save_dir": "learnt"}},
    )
    skills = load_settings(config).skills
    assert skills.dirs == [(tmp_path / "etc" / "skills").resolve(), tmp_path / "abs"]
    assert skills.save_dir == (tmp_path / "etc" / "learnt").resolve()
    assert not skills.bundled and load_settings(write(tmp_path / "n.json", {})).skills.save_dir is None


def test_audience_skills_are_all_none_or_names(clean_env: Path, tmp_path: Path) -> None:
    good = {"audiences": {"team": {"skills": ["deploy-*"]}, "personal": {"skills": "none"}}}
    settings = load_settings(write(tmp_path / "a.json", good))
    assert settings.audience("team").skills == ["deploy-*"] and settings.audience("personal").skills == "none"
    assert settings.audience("public").skills == "none"  # the default public audience sees none
    write(tmp_path / "b.json", {"audiences": {"team": {"skills": "some"}}})
    assert "audiences.team.skills" in error_of(tmp_path / "b.json")


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"enabled": True}, "url: the searxng backend needs the address of the instance"),
        ({"enabled": True, "backend": "brave"}, "api_key_env: the brave backend needs the name"),
        (
            {"enabled": True, "backend": "tavily", "api_key_env": "sk-123 secret"},
            "is not an environment variable name",
        ),
        ({"enabled": True, "url": "ftp://x"}, "must start with http:// or https://"),
        ({"max_results": 50}, "tools.web_search.max_results"),
    ],
)
def test_web_search_config_is_checked(
    clean_env: Path, tmp_path: Path, search: dict[str, Any], message: str
) -> None:
    write(tmp_path / "netclaw.json", {"tools": {"web_search": search}})
    assert message in error_of(tmp_path / "netclaw.json")


def test_web_search_off_needs_nothing_and_urls_lose_their_slash(clean_env: Path, tmp_path: Path) -> None:
    assert not load_settings(write(tmp_path / "a.json", {})).tools.web_search.enabled
    on = {"tools": {"web_search": {"enabled": True, "url": "http://10.0.0.5:8888/"}}}
    assert load_settings(write(tmp_path / "b.json", on)).tools.web_search.url == "http://10.0.0.5:8888"


def test_the_example_config_parses(clean_env: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "netclaw.example.json"
    settings = load_settings(example)
    assert settings.tools.web_search.backend == "searxng" and not settings.tools.web_search.enabled


def test_the_web_search_examples_of_the_tools_page_are_valid_config(clean_env: Path) -> None:
    block = fenced_under("docs/tools.md", "## Web search", "json")
    examples = [json.loads("{" + line + "}") for line in block.splitlines() if line.strip()]
    assert [e["tools"]["web_search"]["backend"] for e in examples] == ["searxng", "brave", "tavily"]
    for example in examples:
        assert Settings(**example).tools.web_search.enabled


def test_an_mcp_servers_listed_roots_are_relative_to_the_config_file(clean_env: Path) -> None:
    folder = clean_env / "conf"
    folder.mkdir()
    write(
        folder / "netclaw.json",
        {"mcp": {"servers": {"fs": {"command": "x", "roots": ["notes", "/srv/docs"]}}}},
    )
    settings = load_settings(folder / "netclaw.json")
    assert settings.mcp.servers["fs"].roots == [(folder / "notes").resolve(), Path("/srv/docs")]
    write(folder / "netclaw.json", {"mcp": {"servers": {"fs": {"command": "x", "roots": False}}}})
    assert load_settings(folder / "netclaw.json").mcp.servers["fs"].roots is False


@pytest.mark.parametrize(("heading", "index"), [("## Setting it up", 0), ("## Spoken replies", 0)])
def test_the_voice_pages_examples_are_valid_config(clean_env: Path, heading: str, index: int) -> None:
    settings = Settings(**json.loads(fenced_under("docs/voice.md", heading, "json", index)))
    assert settings.speech.transcription is not None
    assert settings.speech.transcription.model == "whisper-1"
