"""Onboarding and operating from the shell, as a user would: ``netclaw init``, the doctor's
deeper checks (key variable, model, Slack auth.test, file modes), ``netclaw status`` and
``netclaw usage`` against a running daemon."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import Daemons, Setup, free_port, run_cli, subprocess_env, write_json
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlackThread

pytestmark = pytest.mark.slow


def test_init_writes_a_config_that_runs(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    done = run_cli("init", "--yes", "--base-url", scripted.base_url, "--model", "scripted", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = tmp_path / "netclaw.json"
    assert f"wrote {config.name}" in done.stdout
    assert f"[ok] provider at {scripted.base_url}: reachable, 1 model; model scripted" in done.stdout
    assert "next steps:" in done.stdout and "netclaw run" in done.stdout
    text = config.read_text()
    assert text.startswith("// netclaw configuration") and '"model": "scripted"' in text

    # Never overwritten without --force.
    again = run_cli("init", "--yes", cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert config.read_text() == text

    # The written file is what `netclaw run` uses (comments and all).
    port = free_port()
    text = text.replace('"port": 5199', f'"port": {port}')
    config.write_text(text)
    daemon = daemons.spawn(config, tmp_path / "data", port, cwd=tmp_path).wait_ready()
    assert daemon.post("cli:first", "hello", wait=True).json()["reply"] == "echo: hello"
    # The README's Quick start line, on the config init wrote.
    made = run_cli(*"tokens add ci --role reader".split(), cwd=tmp_path)
    assert made.returncode == 0 and "role reader" in made.stdout, made.stderr


def test_init_for_a_hosted_provider_says_what_to_export(tmp_path: Path) -> None:
    closed = free_port()
    done = run_cli(
        "init",
        "--provider",
        "anthropic",
        "--base-url",
        f"http://127.0.0.1:{closed}",
        "--api-key-env",
        "TEST_ANTHROPIC_KEY",
        "--yes",
        "--config",
        str(tmp_path / "conf" / "netclaw.json"),
    )
    assert done.returncode == 0, done.stderr
    assert "[warn] the key TEST_ANTHROPIC_KEY is not set" in done.stdout
    assert "export TEST_ANTHROPIC_KEY=" in done.stdout
    written = (tmp_path / "conf" / "netclaw.json").read_text()
    assert '"type": "anthropic"' in written and "claude" in written


def test_init_asks_when_not_told(tmp_path: Path, scripted: ScriptedOpenAIThread) -> None:
    answers = f"openai\n{scripted.base_url}\nscripted\n\n"
    done = run_cli("init", cwd=tmp_path, input=answers)
    assert done.returncode == 0, done.stderr
    assert "[ok] provider" in done.stdout
    assert f'"base_url": "{scripted.base_url}"' in (tmp_path / "netclaw.json").read_text()


def test_init_says_what_to_do_when_the_server_is_up_but_lacks_the_model(
    tmp_path: Path, scripted: ScriptedOpenAIThread
) -> None:
    done = run_cli("init", "--yes", "--base-url", scripted.base_url, "--model", "qwen3:8b", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        f"[warn] the server at {scripted.base_url} is up but does not have the model 'qwen3:8b'; it has: scripted"
        in done.stdout
    ), done.stdout
    assert "start your model server" not in done.stdout  # it is running
    assert "pull the model (`ollama pull qwen3:8b`) or pick one the server has" in done.stdout
    # Asked instead of told, it offers what the server has (and takes it by default).
    done = run_cli("init", "--force", cwd=tmp_path, input=f"openai\n{scripted.base_url}\n\n\n")
    assert f"the server at {scripted.base_url} has: scripted" in done.stdout, done.stdout
    assert "model [scripted]" in done.stdout and "[ok] provider" in done.stdout


def test_doctor_names_an_unset_key_a_missing_model_and_loose_files(
    tmp_path: Path, scripted: ScriptedOpenAIThread
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    data = json.loads(site.config.read_text())
    data["models"]["main"]["model"] = "no-such-model"
    site.config.write_text(json.dumps(data))
    site.data_dir.mkdir(parents=True)
    os.chmod(site.data_dir, 0o755)
    report = json.loads(run_cli("doctor", "--json", "--config", str(site.config)).stdout)
    checks = {c["check"]: c for c in report["checks"]}
    assert not checks["provider local"]["ok"]
    assert "does not have the model 'no-such-model' (it has: scripted)" in checks["provider local"]["detail"]
    assert not checks["files"]["ok"] and "is 755" in checks["files"]["detail"]

    data["models"]["main"]["model"] = "scripted"
    data["providers"]["local"]["api_key_env"] = "TEST_UNSET_PROVIDER_KEY"
    site.config.write_text(json.dumps(data))
    os.chmod(site.data_dir, 0o700)
    done = run_cli("doctor", "--config", str(site.config))
    assert "[FAIL] provider local: its key TEST_UNSET_PROVIDER_KEY is not set" in done.stdout
    assert "[ok] files" in done.stdout
    # The key from a file works as well as from the environment.
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    done = run_cli(
        "doctor", "--config", str(site.config), env=subprocess_env(TEST_UNSET_PROVIDER_KEY_FILE=str(key))
    )
    assert "[ok] provider local" in done.stdout, done.stdout


def test_doctor_logs_in_to_slack(tmp_path: Path, scripted: ScriptedOpenAIThread) -> None:
    with FakeSlackThread() as slack:
        site = Setup(
            tmp_path / "site",
            scripted.base_url,
            slack={"enabled": True, "channels": ["C1"], "api_url": slack.api_url},
        )
        good = run_cli(
            "doctor",
            "--config",
            str(site.config),
            env=subprocess_env(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_APP_TOKEN=APP_TOKEN),
        )
        assert "[ok] adapter slack: authenticated as" in good.stdout, good.stdout
        assert [c.method for c in slack.server.calls] == ["auth.test"]  # logs in, connects nothing
        bad = run_cli(
            "doctor",
            "--config",
            str(site.config),
            env=subprocess_env(SLACK_BOT_TOKEN="xoxb-revoked", SLACK_APP_TOKEN=APP_TOKEN),
        )
        assert (
            "[FAIL] adapter slack: Slack rejected the bot token in SLACK_BOT_TOKEN (invalid_auth)"
            in bad.stdout
        )


def test_status_and_usage_from_the_shell(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    daemon = daemons.start(site.config, site.data_dir, site.port)
    scripted.enqueue(Reply("one", usage=(120, 12)), Reply("two", usage=(80, 8)))
    daemon.post("cli:a", "1", wait=True)
    daemon.post("cli:b", "2", wait=True)

    status = run_cli("status", "--config", str(site.config))
    assert status.returncode == 0, status.stderr
    assert f"netclaw at http://127.0.0.1:{site.port}: ok" in status.stdout
    assert "sessions:  2 resident" in status.stdout
    assert "turns:     2 completed" in status.stdout
    assert "tokens:    200 input, 20 output" in status.stdout
    figures = json.loads(run_cli("status", "--json", "--config", str(site.config)).stdout)["figures"]
    assert figures["turns"] == {"completed": 2} and figures["tokens"]["input"] == 200

    usage = run_cli("usage", "--config", str(site.config))
    assert usage.returncode == 0, usage.stderr
    rows = usage.stdout.splitlines()
    head = ["session", "turns", "input", "output", "cache", "read", "cache", "write", "cost", "USD"]
    assert rows[0].split() == head
    assert rows[1].split() == ["cli:a", "1", "120", "12", "0", "0", "0.0000"]
    assert rows[-1].split() == ["total", "2", "200", "20", "0", "0", "0.0000"]
    by_model = json.loads(run_cli("usage", "--by", "model", "--json", "--config", str(site.config)).stdout)
    assert by_model == [
        {
            "key": "scripted",
            "turns": 2,
            "input_tokens": 200,
            "output_tokens": 20,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost": 0.0,
            "speech_seconds": 0.0,
            "currency": "USD",
        }
    ]


def test_status_says_when_the_daemon_is_not_running(tmp_path: Path) -> None:
    config = write_json(
        tmp_path / "netclaw.json", {"gateway": {"port": free_port()}, "data_dir": str(tmp_path)}
    )
    done = run_cli("status", "--config", str(config))
    assert done.returncode == 1 and "cannot reach the netclaw daemon" in done.stderr
