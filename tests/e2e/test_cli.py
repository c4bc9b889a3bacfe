"""The ``netclaw`` command line against a real daemon subprocess.

One daemon and one scripted provider serve the whole module (each test uses its own
session ids); tests that need no daemon, or a broken one, make their own.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import netclaw
from tests.e2e.conftest import (
    REPO_ROOT,
    SYSTEM_PROMPT,
    DaemonProcess,
    Daemons,
    Setup,
    config_data,
    free_port,
    run_cli,
    subprocess_env,
    wait_until,
    write_json,
)
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.subagent_script import FamilyScript
from tests.fakes.terminal import Terminal

pytestmark = pytest.mark.slow

LONG_TURN_S = 33.0
AUTH_FAILURE = "Incorrect API key provided: sk-e2e***. You can find your API key in your account."


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        # Any request whose context mentions the marker is refused as unauthorised.
        server.route("[auth-fail]", lambda body: ErrorReply(status=401, message=AUTH_FAILURE))
        # A turn longer than the CLI's default HTTP timeout (30 s), well inside turn_timeout_s.
        server.route("[long-turn]", lambda body: Reply(text="worth the wait", delay_s=LONG_TURN_S))
        # A reply that streams for seconds (a turn to cancel).
        server.route(
            "[slow-stream]", lambda body: Reply(text="word " * 400, chunk_size=5, chunk_delay_s=0.02)
        )
        server.route("[remember-this]", _remember)
        family = FamilyScript(rounds=1)  # a parent that spawns a sub-agent, and the sub-agent
        server.route("[spawn-demo]", family)
        server.route("TASK demo-", family)
        yield server


def _remember(body: dict[str, Any]) -> Reply:
    """First call: the model saves a memory; the call after the tool result: it answers."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(text="noted")
    return Reply(
        tool_calls=[ToolCallSpec("remember", {"text": "the cluster is called atlas", "kind": "fact"})]
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedOpenAIThread) -> Setup:
    return Setup(tmp_path_factory.mktemp("cli"), provider.base_url)


@pytest.fixture(scope="module")
def daemon(site: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    group = Daemons(tmp_path_factory.mktemp("cli-logs"))
    try:
        yield group.start(site.config, site.data_dir, site.port)
    finally:
        group.close()


def cli(site: Setup, *args: str, input: str | None = None) -> tuple[int, str, str]:
    done = run_cli(*args, "--config", str(site.config), input=input)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module", autouse=True)
def long_chat(daemon: DaemonProcess, site: Setup) -> Iterator[subprocess.Popen[str]]:
    """`chat -p` on a turn that takes LONG_TURN_S, started with the module so its wait overlaps
    the other tests; test_chat_prompt_waits_out_a_long_turn (last) collects the result."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "netclaw.cli", "chat", "-p", "take your time [long-turn]"),
            *("--session", "cli:long", "--config", str(site.config)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=REPO_ROOT,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


# -- chat -p ------------------------------------------------------------------------------------


def test_chat_prompt_prints_the_reply(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "chat", "-p", "hi")
    assert code == 0, err
    assert out.strip() == "echo: hi"


def test_chat_prompt_json(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "chat", "-p", "hello json", "--json", "--session", "cli:json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["session_id"] == "cli:json"
    assert answer["message_id"]
    assert answer["turn"] == 1
    assert answer["reply"] == "echo: hello json"


def test_session_option_targets_that_session_and_sessions_lists_it(
    daemon: DaemonProcess, site: Setup
) -> None:
    code, out, err = cli(site, "chat", "-p", "first words for abc", "--session", "cli:abc")
    assert code == 0, err
    assert out.strip() == "echo: first words for abc"
    assert daemon.post("cli:abc", "second words for abc", wait=True).status_code == 200
    assert daemon.session("cli:abc")["turns"] == 2  # both went to cli:abc, not cli:default

    # Read-only commands, run side by side to save start-up time.
    commands = {
        "list-json": ("sessions", "--json"),
        "list": ("sessions",),
        "show": ("sessions", "show", "cli:abc"),
        "show-json": ("sessions", "show", "cli:abc", "--json"),
        "context": ("sessions", "show", "cli:abc", "--context"),
    }
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        futures = {name: pool.submit(cli, site, *args) for name, args in commands.items()}
        results = {name: future.result() for name, future in futures.items()}

    code, out, err = results["list-json"]
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)}
    assert "cli:abc" in rows, rows
    abc = rows["cli:abc"]
    assert abc["channel"] == "cli"
    assert abc["turns"] == 2
    title = abc["title"]
    assert title and "first words" in title

    code, out, err = results["list"]
    assert code == 0, err
    line = next((ln for ln in out.splitlines() if ln.startswith("cli:abc ")), None)
    assert line is not None, out
    assert title in line

    code, out, err = results["show"]
    assert code == 0, err
    for text in ("first words for abc", "echo: first words for abc", "second words for abc"):
        assert text in out
    assert out.index("first words for abc") < out.index("second words for abc")
    assert SYSTEM_PROMPT not in out  # the transcript, not the model's view

    code, out, err = results["show-json"]
    assert code == 0, err
    session = json.loads(out)
    assert session["id"] == "cli:abc"
    assert [(m["role"], m["content"]) for m in session["messages"]] == [
        ("user", "first words for abc"),
        ("assistant", "echo: first words for abc"),
        ("user", "second words for abc"),
        ("assistant", "echo: second words for abc"),
    ]

    code, out, err = results["context"]
    assert code == 0, err
    body = out.split("\n", 1)[1]  # after the header line (which holds the title)
    assert SYSTEM_PROMPT in body
    assert body.index(SYSTEM_PROMPT) < body.index("first words for abc") < body.index("second words for abc")


def test_sessions_show_unknown_session_fails(daemon: DaemonProcess, site: Setup) -> None:
    code, _out, err = cli(site, "sessions", "show", "cli:never-seen")
    assert code != 0
    assert "cli:never-seen" in err
    assert "Traceback" not in err


def test_a_token_the_daemon_refuses_names_where_it_came_from(
    daemon: DaemonProcess, site: Setup, tmp_path: Path
) -> None:
    # Another directory's data (say, a start that failed there) holds another token, and its
    # config names the running daemon's port: the CLI says which token it sent, and to whom.
    other = config_data(tmp_path / "other-data", "http://127.0.0.1:9/v1", site.port)
    config = write_json(tmp_path / "netclaw.json", other)
    (tmp_path / "other-data").mkdir()
    (tmp_path / "other-data" / "control.token").write_text("not-the-daemons-token\n")
    done = run_cli("sessions", "--config", str(config))
    assert done.returncode != 0
    assert f"the daemon at http://127.0.0.1:{site.port} refused the control token from" in done.stderr
    assert str(tmp_path / "other-data" / "control.token") in done.stderr, done.stderr
    # With the token in a variable the operator sets, nothing "creates one": say to set it.
    env_config = write_json(
        tmp_path / "env.json", {**other, "gateway": {**other["gateway"], "control_token_env": "NC_TOKEN_X"}}
    )
    done = run_cli("sessions", "--config", str(env_config))
    assert "no control token in $NC_TOKEN_X (gateway.control_token_env): set it" in done.stderr, done.stderr


def test_cluster_commands_on_one_node_say_cluster_mode_is_off(daemon: DaemonProcess, site: Setup) -> None:
    for args in (("cluster", "status"), ("cluster", "owner", "cli:x"), ("cluster", "drain", "a")):
        code, _out, err = cli(site, *args)
        assert code != 0 and "cluster mode is off" in err and "cluster_off" in err, (args, err)
        assert "Traceback" not in err


# -- interactive chat ---------------------------------------------------------------------------


def test_interactive_chat_answers_each_line_and_exits_on_eof(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "chat", "cli:interactive", input="line number one\nline number two\n")
    assert code == 0, err
    assert "echo: line number one" in out, out
    assert "echo: line number two" in out, out
    assert out.index("echo: line number one") < out.index("echo: line number two")
    session = daemon.session("cli:interactive")
    assert [m["content"] for m in session["messages"] if m["role"] == "user"] == [
        "line number one",
        "line number two",
    ]


def test_sessions_cancel_reset_and_rm(daemon: DaemonProcess, site: Setup) -> None:
    sid = "cli:admin"
    assert cli(site, "chat", "-p", "one", "--session", sid)[0] == 0
    code, out, err = cli(site, "sessions", "cancel", sid, "--json")
    assert code == 0, err
    assert json.loads(out) == {"cancelled": False}
    code, out, err = cli(site, "sessions", "reset", sid)
    assert code == 0 and "starts afresh" in out, err
    assert [m["role"] for m in daemon.session(sid, view="context")["messages"]] == ["system"]
    code, out, err = cli(site, "sessions", "rm", sid)
    assert code == 0 and f"deleted {sid}" in out, err
    code, out, err = cli(site, "sessions", "show", sid)
    assert code != 0 and "no session" in err
    code, _, err = cli(site, "sessions", "rm")
    assert code == 2 and "needs a session id" in err


def test_sessions_children_and_a_sub_agents_transcript(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "chat", "-p", "SPAWN 1 demo [spawn-demo]", "--session", "cli:demo")
    assert code == 0 and "spawned demo" in out, err

    def finished() -> list[dict[str, Any]] | None:
        code, out, _ = cli(site, "sessions", "children", "cli:demo", "--json")
        found: list[dict[str, Any]] = json.loads(out) if code == 0 else []
        return found if found and found[0]["status"] == "completed" else None

    wait_until(finished, 20, "the sub-agent to report")
    code, out, err = cli(site, "sessions", "children", "cli:demo")  # as docs/sub-agents.md writes it
    assert code == 0, err
    assert out.startswith("agent:cli:demo/1  [completed, ") and "TASK demo-1 rounds=1 — RESULT demo-1" in out
    code, out, err = cli(site, "sessions", "show", "agent:cli:demo/1")
    assert code == 0, err
    assert out.startswith("agent:cli:demo/1  [") and "RESULT demo-1" in out
    code, out, err = cli(site, "sessions", "model", "agent:cli:demo/1")  # its "/" kept in the path
    assert code == 0 and "main" in out, (out, err)
    assert "ACK agent:cli:demo/1: RESULT demo-1" in cli(site, "sessions", "show", "cli:demo")[1]


def test_memory_list_search_edit_and_rm(daemon: DaemonProcess, site: Setup) -> None:
    sid = "cli:memories"
    code, out, err = cli(site, "chat", "-p", "keep this in mind [remember-this]", "--session", sid)
    assert code == 0 and out.strip() == "noted", err
    code, out, err = cli(site, "memory", "list", "--q", "atlas", "--json")
    assert code == 0, err
    [memory] = json.loads(out)
    assert memory["text"] == "the cluster is called atlas"
    assert (memory["source_session"], memory["source_turn"], memory["audience"]) == (sid, 1, "personal")
    code, out, err = cli(site, "memory", "--session", sid)
    assert code == 0 and "atlas" in out and f"learnt in {sid} turn 1" in out, err
    code, out, err = cli(site, "memory", "edit", str(memory["id"]), "the cluster is called zephyr")
    assert code == 0 and out.strip() == f"memory {memory['id']} now says: the cluster is called zephyr", err
    code, out, _ = cli(site, "memory", "list", "--q", "zephyr", "--json")
    assert [(m["id"], m["text"], m["source_session"]) for m in json.loads(out)] == [
        (memory["id"], "the cluster is called zephyr", sid)
    ]
    code, out, err = cli(site, "memory", "edit", str(memory["id"]))
    assert code == 2 and "memory edit needs a memory id and the new text" in err, (out, err)
    code, out, err = cli(site, "memory", "rm", str(memory["id"]))
    assert code == 0, err
    code, out, _ = cli(site, "memory", "list", "--q", "zephyr", "--json")
    assert json.loads(out) == []


def test_interactive_chat_in_a_terminal(daemon: DaemonProcess, site: Setup) -> None:
    sid = "cli:terminal"
    argv = [sys.executable, "-m", "netclaw.cli", "chat", sid, "--config", str(site.config)]
    with Terminal(argv, env=subprocess_env(), cwd=REPO_ROOT) as term:
        term.expect("/help for commands")
        term.type_at_prompt("hello there")
        term.expect("echo: hello there")
        term.type_at_prompt("/status")
        term.expect("[Model scripted, ready")
        term.type_at_prompt("tell me a lot [slow-stream]")
        term.expect("agent> word")
        term.interrupt()  # Ctrl-C: stops the reply, not the chat
        term.expect("stopping the reply")
        term.expect("[stopped]")
        term.type_at_prompt("/help")
        term.expect("[Commands (`!` works in place of `/`):]")
        term.expect("[/new or /reset — start the conversation afresh")
        term.type_at_prompt("!new")
        term.expect("Started afresh")
        term.expect("you> ")
        term.send_eof()
        assert term.wait() == 0
    # Coming back shows where the conversation stood.
    with Terminal(argv, env=subprocess_env(), cwd=REPO_ROOT) as term:
        term.expect(f"(resuming {sid}")
        term.expect("you> hello there")
        term.expect("/help for commands")
        term.interrupt_at_prompt()  # at the prompt: once warns, twice leaves
        term.expect("Ctrl-C again")
        term.interrupt_at_prompt()
        assert term.wait() == 130
    session = daemon.session(sid)
    users = [m["content"] for m in session["messages"] if m["role"] == "user"]
    assert users == ["hello there", "tell me a lot [slow-stream]"]  # commands were never model input
    outcome = [m for m in session["messages"] if m.get("kind") == "turn_outcome"]
    assert outcome and outcome[0]["status"] == "cancelled"


# -- failures -----------------------------------------------------------------------------------


def test_chat_prompt_reports_a_provider_failure(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "chat", "-p", "this one fails [auth-fail]", "--session", "cli:authfail")
    assert code != 0
    assert "Incorrect API key provided" in err, err
    assert "Traceback" not in err
    assert out.strip() == ""


def test_chat_prompt_json_failure_is_a_json_object_with_the_exit_status(
    daemon: DaemonProcess, site: Setup
) -> None:
    code, out, err = cli(
        site, "chat", "-p", "fails as json [auth-fail]", "--json", "--session", "cli:jsonfail"
    )
    error = json.loads(out)["error"]
    assert code == 1 == error["exit_status"]
    assert error["code"] == "provider_auth" and error["http_status"] == 502
    assert "Incorrect API key provided" in error["message"] and "Incorrect API key provided" in err
    # (A success elsewhere, so the provider's failures in a row stay below /healthz's threshold.)
    assert daemon.post("cli:jsonfail-ok", "fine again", wait=True).status_code == 200


def test_interactive_chat_keeps_its_prompt_when_others_speak_and_shows_failed_turns(
    daemon: DaemonProcess, site: Setup
) -> None:
    sid = "cli:shared"
    assert daemon.post(sid, "first question", wait=True).status_code == 200
    assert daemon.post(sid, "this one breaks [auth-fail]", wait=True).status_code == 502
    assert daemon.post(sid, "/reset").status_code == 200  # the marker leaves the model's context
    assert daemon.post(sid, "second question", wait=True).status_code == 200
    argv = [sys.executable, "-m", "netclaw.cli", "chat", sid, "--config", str(site.config)]
    with Terminal(argv, env=subprocess_env(), cwd=REPO_ROOT) as term:
        # Resuming: the failed turn is shown as failed, not as if it had been answered.
        term.expect("you> this one breaks [auth-fail]")
        term.expect("[turn 2 failed: ")
        term.expect("you> second question")
        term.expect("/help for commands")
        term.expect("you> ")
        term.wait_reading()  # at the prompt, reading
        # Another client (the API) speaks in this session: its reply is written above the
        # prompt, and the prompt comes back.
        assert daemon.post(sid, "from another client", wait=True).status_code == 200
        term.expect("agent> echo: from another client\nyou> ")
        term.type_at_prompt("still here?", prompt="")
        term.expect("agent> echo: still here?")
        term.expect("you> ")
        term.wait_reading()
        term.send_eof()
        assert term.wait() == 0


def test_chat_when_daemon_stopped_says_it_cannot_be_reached(tmp_path: Path) -> None:
    # A daemon ran here once (it left its control token) and is gone now.
    site = Setup(tmp_path / "gone", "http://127.0.0.1:9/v1")
    site.data_dir.mkdir(parents=True)
    (site.data_dir / "control.token").write_text("left-over-token\n")
    site.data_dir.joinpath("control.token").chmod(0o600)

    for args in (("chat", "-p", "anyone there?"), ("chat", "cli:somewhere")):
        done = run_cli(*args, "--config", str(site.config), input="")
        assert done.returncode != 0, args
        assert "netclaw run" in done.stderr, (args, done.stderr)
        assert "cannot reach" in done.stderr or "not running" in done.stderr, (args, done.stderr)
        assert f"127.0.0.1:{site.port}" in done.stderr
        assert "Traceback" not in done.stderr


def test_chat_when_daemon_never_started_says_it_is_not_running(tmp_path: Path) -> None:
    site = Setup(tmp_path / "fresh", "http://127.0.0.1:9/v1")
    done = run_cli("chat", "-p", "anyone there?", "--config", str(site.config))
    assert done.returncode != 0
    assert "netclaw run" in done.stderr, done.stderr
    assert "cannot reach" in done.stderr or "not running" in done.stderr, done.stderr


# -- doctor -------------------------------------------------------------------------------------


def test_doctor_healthy(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "doctor")
    assert code == 0, out + err
    assert "[ok] config" in out
    assert "[ok] database" in out
    assert "[ok] provider local" in out and "reachable" in out
    assert "FAIL" not in out
    assert f"daemon: running at http://127.0.0.1:{site.port}" in out


def test_doctor_json(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "doctor", "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True
    names = {c["check"]: c for c in report["checks"]}
    assert names["config"]["ok"] and names["database"]["ok"] and names["provider local"]["ok"]
    assert report["daemon"]["running"] is True
    assert report["daemon"]["health"]["status"] == "ok"


def test_doctor_json_failure(tmp_path: Path) -> None:
    closed = free_port()
    site = Setup(tmp_path / "closed", f"http://127.0.0.1:{closed}/v1")
    done = run_cli("doctor", "--json", "--config", str(site.config))
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    failed = [c for c in report["checks"] if not c["ok"]]
    assert [c["check"] for c in failed] == ["provider local"]
    assert f"127.0.0.1:{closed}" in failed[0]["detail"]
    assert report["daemon"]["running"] is False


def test_doctor_fails_on_unreachable_provider(tmp_path: Path) -> None:
    closed = free_port()
    site = Setup(tmp_path / "closed", f"http://127.0.0.1:{closed}/v1")
    done = run_cli("doctor", "--config", str(site.config))
    assert done.returncode != 0, done.stdout
    assert "[FAIL] provider local" in done.stdout, done.stdout
    assert f"127.0.0.1:{closed}" in done.stdout, done.stdout
    assert "[ok] config" in done.stdout
    assert "Traceback" not in done.stderr


def test_doctor_rejects_unknown_config_key(tmp_path: Path, provider: ScriptedOpenAIThread) -> None:
    data = config_data(tmp_path / "data", provider.base_url, free_port(), session={"idle_timout_s": 5})
    config = write_json(tmp_path / "netclaw.json", data)
    done = run_cli("doctor", "--config", str(config))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "session.idle_timout_s" in output, output
    assert "unknown key" in output
    assert "Traceback" not in output


# -- run ----------------------------------------------------------------------------------------


def test_run_rejects_invalid_config_and_does_not_start(
    tmp_path: Path, provider: ScriptedOpenAIThread
) -> None:
    port = free_port()
    data = config_data(tmp_path / "data", provider.base_url, port, gateway={"prot": 1234})
    config = write_json(tmp_path / "netclaw.json", data)
    done = run_cli("run", "--config", str(config), timeout=20)
    assert done.returncode != 0
    assert "gateway.prot" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists(), "the daemon started far enough to create its data_dir"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_run_rejects_invalid_value_with_key_path(tmp_path: Path, provider: ScriptedOpenAIThread) -> None:
    data = config_data(tmp_path / "data", provider.base_url, free_port(), session={"turn_timeout_s": -1})
    config = write_json(tmp_path / "netclaw.json", data)
    done = run_cli("run", "--config", str(config), timeout=20)
    assert done.returncode != 0
    assert "session.turn_timeout_s" in done.stderr, done.stderr


def test_run_on_a_busy_port_fails_clearly(tmp_path: Path, provider: ScriptedOpenAIThread) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        config = write_json(
            tmp_path / "netclaw.json", config_data(tmp_path / "data", provider.base_url, port)
        )
        # It fails within seconds (the start-up's imports); the bound only catches a hang,
        # and a loaded machine took 20 s over those imports.
        done = run_cli("run", "--config", str(config), timeout=60)
    assert done.returncode != 0
    assert f"127.0.0.1:{port}" in done.stderr, done.stderr
    assert "in use" in done.stderr or "cannot listen" in done.stderr, done.stderr
    assert "gateway.port" in done.stderr
    assert "Traceback" not in done.stderr
    # It made nothing: no data_dir, no control token to confuse the CLI run from here later.
    assert not (tmp_path / "data").exists()
    assert not _locked(tmp_path / "data" / "netclaw.lock")


def _locked(path: Path) -> bool:
    import fcntl

    if not path.exists():
        return False
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


# -- config discovery and version ---------------------------------------------------------------


def test_netclaw_config_env_var_is_honoured(daemon: DaemonProcess, site: Setup, tmp_path: Path) -> None:
    env = subprocess_env(NETCLAW_CONFIG=str(site.config))
    done = run_cli("chat", "-p", "via the environment", "--session", "cli:env", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "echo: via the environment"

    done = run_cli("doctor", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[ok] config: {site.config}" in done.stdout


def test_version() -> None:
    script = Path(sys.executable).parent / "netclaw"
    executable = [str(script)] if script.exists() else [sys.executable, "-m", "netclaw.cli"]
    done = run_cli("--version", executable=executable, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"netclaw {netclaw.__version__}"


def test_chat_prompt_waits_out_a_long_turn(long_chat: subprocess.Popen[str]) -> None:
    out, err = long_chat.communicate(timeout=LONG_TURN_S + 30)
    assert long_chat.returncode == 0, err
    assert out.strip() == "worth the wait"


# -- reminders -----------------------------------------------------------------------------------


def test_reminders_add_list_and_rm(daemon: DaemonProcess, site: Setup) -> None:
    code, out, err = cli(site, "reminders", "add", "cli:reminded", "--in", "10m", "stretch", "your", "legs")
    assert code == 0, err
    reminder_id = out.split(":")[0]
    assert reminder_id.startswith("rem-") and "next 20" in out
    code, out, err = cli(
        site, "reminders", "add", "cli:reminded", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "standup"
    )
    assert code == 0, err
    code, out, err = cli(site, "reminders", "--session", "cli:reminded", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [r["text"] for r in listed] == ["stretch your legs", "standup"]
    assert listed[1]["cron"] == "0 9 * * 1-5" and listed[1]["schedule"]["timezone"] == "Europe/Berlin"
    code, out, _ = cli(site, "reminders")
    assert code == 0 and "stretch your legs" in out and "cron '0 9 * * 1-5' (Europe/Berlin)" in out
    code, out, err = cli(site, "reminders", "rm", reminder_id)
    assert code == 0 and f"removed {reminder_id}" in out, err
    code, _, err = cli(site, "reminders", "rm", reminder_id)
    assert code != 0 and "no reminder" in err
    code, _, err = cli(site, "reminders", "add", "cli:reminded", "--cron", "every day", "nope")
    assert code != 0 and "cron" in err
    code, _, err = cli(site, "reminders", "add", "cli:reminded", "nope")
    assert code == 2 and "--in 10m" in err


def test_doctor_checks_mcp_servers(tmp_path: Path, provider: ScriptedOpenAIThread) -> None:
    servers = {
        "docs": {
            "command": sys.executable,
            "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
            "cwd": str(REPO_ROOT),
        },
        "ghost": {"command": "/nonexistent/mcp-server"},
    }
    site = Setup(tmp_path / "mcp", provider.base_url, mcp={"servers": servers})
    done = run_cli("doctor", "--json", "--config", str(site.config))
    report = json.loads(done.stdout)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["mcp docs"]["ok"] and checks["mcp docs"]["detail"] == "18 tool(s)"
    assert not checks["mcp ghost"]["ok"] and "nonexistent" in checks["mcp ghost"]["detail"]
    assert done.returncode == 1
