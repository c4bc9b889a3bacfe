"""README.md's everyday commands (the ``everyday`` recipe: "With the daemon running, from
another terminal"), each line run as written with bash against a real daemon subprocess,
and checked the way a person would: its exit status and what it prints.

The site is what the README implies: a folder holding ``netclaw.json``, where every line
runs (``netclaw`` finds the config in the current directory; no ``--config``), with
``netclaw`` on PATH being this checkout's. The config has what the lines name: an MCP
server ``docs`` (the SDK-written fake, over stdio), one ``github`` behind a local OAuth
authorization server, and ``journal.dsn_env`` naming the PostgreSQL DSN for
``migrate-journal``. ``github`` was logged in to once before (as a person did when adding
it), so ``doctor`` and ``status`` find every server up; the block's ``mcp login github``
logs in again, the address it prints opened as a browser would. ``netclaw chat`` gets an
empty stdin: Ctrl-D at once. A line that needs the daemon stopped (``migrate-journal``)
runs after stopping it.

Every line is run and checked, a failing one reported by its text; a README line this
test has no check for fails it too, as does a check no line uses any more. Without
PostgreSQL installed the ``migrate-journal`` line cannot run: after every other line passed,
the test skips saying so (CI, which requires PostgreSQL, fails instead).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from netclaw.cli._init import Choice, starter_config
from tests.doc_blocks import recipe
from tests.e2e.conftest import (
    REPO_ROOT,
    SYSTEM_PROMPT,
    DaemonProcess,
    Daemons,
    free_port,
    subprocess_env,
)
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.postgres import REQUIRE_ENV, find_bin_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

LINE_TIMEOUT_S = 90.0  # a bound per line on a loaded machine, not a pause
DSN_ENV = "NETCLAW_PG_DSN"  # the name docs/scale-out.md tells people to export


def command_of(line: str) -> str:
    """The command a README line runs, without its comment (as bash reads it)."""
    return line.split("  #", 1)[0].strip()


@dataclass
class Site:
    """The folder the lines run in, the daemon they talk to and what each check needs."""

    root: Path
    port: int
    env: dict[str, str]
    daemons: Daemons
    oauth_events: Path
    pg_dsn: str | None
    daemon: DaemonProcess | None = None

    def api(self) -> httpx.Client:
        """The running daemon's API, as admin (the control token)."""
        assert self.daemon is not None and self.daemon.http is not None, "the daemon is not running"
        return self.daemon.http

    def start(self) -> DaemonProcess:
        # `netclaw run` where the config is, as the Quick start runs it.
        self.daemon = self.daemons.start(
            self.root / "netclaw.json",
            self.root / "data",  # init's "./data", next to the config
            self.port,
            argv=[sys.executable, "-m", "netclaw.cli", "run"],
            env=self.env,
            cwd=self.root,
        )
        return self.daemon

    def stop(self) -> None:
        assert self.daemon is not None
        code, took = self.daemon.sigterm(timeout=30)
        assert code == 0, f"the daemon exited {code} after {took:.1f}s:\n{self.daemon.stderr()}"
        self.daemon.close()
        self.daemon = None


def bash(line: str, site: Site) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=site.root,
        env=site.env,
        stdin=subprocess.DEVNULL,  # `netclaw chat`: Ctrl-D at once
        capture_output=True,
        text=True,
        timeout=LINE_TIMEOUT_S,
        check=False,
    )


def login(argv: list[str], site: Site) -> subprocess.CompletedProcess[str]:
    """``netclaw mcp login`` with a person's browser: open the address it prints (the fake
    authorization server approves and sends the browser back to the login's callback)."""
    proc = subprocess.Popen(
        argv,
        cwd=site.root,
        env=site.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed: list[str] = []
        address = None
        while address is None:
            line = proc.stdout.readline()
            if not line:
                out, err = proc.communicate(timeout=LINE_TIMEOUT_S)
                return subprocess.CompletedProcess(argv, proc.returncode, "".join(printed) + out, err)
            printed.append(line)
            if line.strip().startswith("http://"):
                address = line.strip()
        page = httpx.get(address, follow_redirects=True, timeout=LINE_TIMEOUT_S)
        assert page.status_code == 200 and "you are logged in" in page.text, (page.status_code, page.text)
        out, err = proc.communicate(timeout=LINE_TIMEOUT_S)
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(printed) + out, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


# -- what a person checks, line by line ------------------------------------------------------


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The line's output, once it exited 0."""
    assert done.returncode == 0, (
        f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done.stdout


def check_chat(done: subprocess.CompletedProcess[str], site: Site) -> None:
    ok(done)
    assert "session cli:default — /help for commands; Ctrl-C stops a reply, Ctrl-D leaves" in done.stderr, (
        done.stderr
    )


def check_chat_once(done: subprocess.CompletedProcess[str], site: Site) -> None:
    answer = json.loads(ok(done))
    assert answer["session_id"] == "cli:default" and answer["reply"] == "echo: hello", answer


def check_sessions(done: subprocess.CompletedProcess[str], site: Site) -> None:
    rows = [line.split() for line in ok(done).splitlines()]
    assert any(row and row[0] == "cli:default" for row in rows), done.stdout


def check_context(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    assert SYSTEM_PROMPT in out, out
    assert "docs__lookup" in out and "github__whoami" in out, out  # the tools the model is offered


def check_doctor(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    assert "[ok] provider main" in out and "[ok] files:" in out, out
    assert re.search(r"\[ok\] mcp docs\b", out) and re.search(r"\[ok\] mcp github\b", out), out


def check_status(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    assert re.search(r"^mcp:\s+docs up", out, re.M) and re.search(r"^mcp:\s+github up", out, re.M), out


def check_usage(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert today in out, out


def check_audit(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    since = re.search(r"--since (\S+)", done.args[-1])
    assert since is not None, done.args
    trail = site.api().get("/api/audit", params={"since": since.group(1)}).json()
    if not trail:
        assert out.strip() == "nothing in the audit trail yet", out
    for entry in trail:  # one line each, with its kind
        assert re.search(rf"\b{re.escape(entry['kind'])}\b", out), (entry, out)


def check_token(done: subprocess.CompletedProcess[str], site: Site) -> None:
    said, token, *rest = ok(done).splitlines()
    assert said == "token ci (role reader); shown once, keep it safe:" and not rest, done.stdout
    as_ci = {"Authorization": f"Bearer {token}"}
    base = site.api().base_url
    sessions = httpx.get(f"{base}/api/sessions", headers=as_ci, timeout=30)
    assert sessions.status_code == 200 and "cli:default" in sessions.text, (
        sessions.status_code,
        sessions.text,
    )
    sent = httpx.post(
        f"{base}/api/sessions/cli:default/messages", json={"text": "hi"}, headers=as_ci, timeout=30
    )
    assert sent.status_code == 403, (sent.status_code, sent.text)  # a reader starts no turn
    listed = site.api().get("/api/tokens").text
    assert "ci" in listed and token not in listed  # shown once: never again


def check_mcp_list(done: subprocess.CompletedProcess[str], site: Site) -> None:
    lines = dict(line.split(": ", 1) for line in ok(done).splitlines())
    assert lines["docs"].startswith("up (stdio)"), lines
    assert lines["github"].startswith("up (http), 1 tool(s)"), lines


def check_mcp_tools(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    assert "lookup → docs__lookup [read-only]" in out and "wipe → docs__wipe [destructive]" in out, out


def check_login(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    assert "Open this address in a browser and allow netclaw to use github:" in out, out
    assert "Logged in to github (1 tool(s))" in out, out
    assert "The running daemon is connecting with it now." in out, out
    granted = site.oauth_events.read_text().splitlines().count("token")
    assert granted == 2, f"the authorization server granted {granted} token(s), not one per login (2)"


def check_migrate(done: subprocess.CompletedProcess[str], site: Site) -> None:
    out = ok(done)
    said = re.search(r"^done: (\d+) event\(s\) of (\d+) session\(s\)", out, re.M)
    assert said is not None, out
    import psycopg

    assert site.pg_dsn is not None
    with psycopg.connect(site.pg_dsn) as conn:
        [events] = conn.execute(
            "SELECT count(*) FROM events WHERE persistence_id = 'cli:default'"
        ).fetchone() or [0]
        [sessions] = conn.execute("SELECT count(*) FROM sessions").fetchone() or [0]
    assert (events, sessions) == (int(said[1]), int(said[2])) and events > 0, (events, sessions, out)


@dataclass(frozen=True)
class Line:
    """How one README command is run and checked: chosen by the words it starts with."""

    starts: str
    check: Callable[[subprocess.CompletedProcess[str], Site], None]
    needs_daemon: bool = True
    needs_postgres: bool = False
    interactive_login: bool = False


LINES = [
    Line("netclaw chat -p", check_chat_once),
    Line("netclaw chat", check_chat),
    Line("netclaw sessions show", check_context),
    Line("netclaw sessions", check_sessions),
    Line("netclaw doctor", check_doctor),
    Line("netclaw status", check_status),
    Line("netclaw usage", check_usage),
    Line("netclaw audit", check_audit),
    Line("netclaw tokens add", check_token),
    Line("netclaw mcp list", check_mcp_list),
    Line("netclaw mcp tools", check_mcp_tools),
    Line("netclaw mcp login", check_login, interactive_login=True),
    Line("netclaw migrate-journal", check_migrate, needs_daemon=False, needs_postgres=True),
]


def line_for(command: str) -> Line | None:
    """The check for ``command``: the one whose start is the longest whole-word prefix."""
    matching = [x for x in LINES if command == x.starts or command.startswith(x.starts + " ")]
    return max(matching, key=lambda x: len(x.starts), default=None)


# -- the site ---------------------------------------------------------------------------------


@pytest.fixture
def oauth_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    events = tmp_path / "as-events"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_oauth_fake", "--events", str(events)],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.split()[-1], events
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def pg_dsn_or_none(request: pytest.FixtureRequest) -> str | None:
    """A fresh database on the run's PostgreSQL, or None where it is not installed (the
    test says so after the other lines; CI requires it)."""
    if find_bin_dir() is None and not os.environ.get(REQUIRE_ENV):
        return None
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


@pytest.fixture
def site(
    tmp_path: Path,
    scripted: ScriptedOpenAIThread,
    daemons: Daemons,
    oauth_server: tuple[str, Path],
    pg_dsn_or_none: str | None,
) -> Site:
    url, events = oauth_server
    root = tmp_path / "site"
    root.mkdir()
    # What `netclaw init` writes (with the scripted model server as the provider), plus what
    # the lines name: the two MCP servers, the DSN's variable; and a free port.
    init = Choice("openai", scripted.base_url, "scripted", None, 32768)
    config = json.loads(
        "\n".join(x for x in starter_config(init).splitlines() if not x.strip().startswith("//"))
    )
    config["gateway"]["port"] = port = free_port()
    config["agent"] = {"system_prompt": SYSTEM_PROMPT}
    config["mcp"] = {
        "servers": {
            "docs": {
                "command": sys.executable,
                "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
                "cwd": str(REPO_ROOT),
            },
            "github": {"url": url, "oauth": {"redirect_port": free_port()}},
        }
    }
    config["journal"] = {"dsn_env": DSN_ENV}
    (root / "netclaw.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    # `netclaw` on PATH is this checkout's, whether or not an installed one is there too.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "netclaw"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m netclaw.cli "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = subprocess_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        XDG_STATE_HOME=str(tmp_path / "state"),  # `netclaw chat`'s line history
        **({DSN_ENV: pg_dsn_or_none} if pg_dsn_or_none else {}),
    )
    return Site(root, port, env, daemons, events, pg_dsn_or_none)


# -- the test ---------------------------------------------------------------------------------


def test_every_everyday_command_of_the_readme_runs_as_written(site: Site) -> None:
    lines = recipe("everyday")
    assert lines, "README.md's everyday block is empty"
    # github was logged in to once before, when it was added to the config.
    first = login([sys.executable, "-m", "netclaw.cli", "mcp", "login", "github"], site)
    assert first.returncode == 0 and "Logged in to github" in first.stdout, first.stdout + first.stderr
    site.start()

    failures: list[str] = []
    used: set[str] = set()
    not_run: list[str] = []
    for text in lines:
        command = command_of(text)
        how = line_for(command)
        if how is None:
            failures.append(f"`{text}`: this test has no check for the line; say what a person checks")
            continue
        used.add(how.starts)
        if how.needs_postgres and site.pg_dsn is None:
            not_run.append(f"`{text}`: PostgreSQL is not installed here (apt-get install postgresql)")
            continue
        if how.needs_daemon and site.daemon is None:
            site.start()
        elif not how.needs_daemon and site.daemon is not None:
            site.stop()
        try:
            done = login(["bash", "-c", text], site) if how.interactive_login else bash(text, site)
            print(f"$ {text}\n{done.stdout}{done.stderr}")
            how.check(done, site)
        except (AssertionError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            failures.append(f"`{text}` failed: {exc}")
    unused = [x.starts for x in LINES if x.starts not in used]
    if unused:
        failures.append(f"no README line runs {unused}: remove their checks here, or the lines came off")
    assert not failures, "README.md's everyday commands:\n\n" + "\n\n".join(failures)
    if not_run:
        pytest.skip("every other line passed; not run: " + "; ".join(not_run))
