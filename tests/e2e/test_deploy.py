"""The deploy recipes of docs/deploy.md (and the shell sandbox's of docs/tools.md), run as
written.

- **systemd**: a fresh Debian 12 container booting systemd 252 as PID 1 (no ``--privileged``:
  the capabilities, cgroups and tmpfs mounts systemd needs, named below), a copy of this
  checkout in it, and the recipe's lines run one by one as root: ``deploy/install.sh``,
  ``netclaw init --system`` (answering its questions), ``systemctl enable --now``, ``netclaw
  chat -p hi`` answered, ``netclaw status``. Then what an operator does next: a reload
  applies a change, a SIGSTOPped daemon is restarted by the watchdog and the message it had
  acknowledged is answered once, a config systemd's sandbox cannot honour fails as one error
  line, a relative ``data_dir`` lands in the state directory, an MCP server and the shell
  tool work under the hardening — the shell unsandboxed under the unit as it is, then in
  bubblewrap after docs/tools.md's drop-in step, with each start-up error on the way naming
  the fix — and ``systemd-analyze security`` rates the unit with and without the drop-in.
- **docker run** and **docker compose** (v2, and v1 as Debian packages it): the
  recipes' lines with the names that must be unique on a shared machine (container, volume, host
  port, project) and the provider's port made so, every other word as written.

The model is a scripted OpenAI-compatible server: inside the systemd container on its
loopback, or on the host where ``host.docker.internal`` points for the docker recipes.
The systemd part takes ~2-3 minutes (the watchdog alone waits 30 s), the docker part ~1-2.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doc_blocks import recipe
from tests.e2e._docker import build, docker, host_gateway, repo_tar_command, require_engine
from tests.e2e.conftest import REPO_ROOT, free_port, subprocess_env, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SYSTEMD_IMAGE = "netclaw-test-debian-systemd"
# systemd as PID 1 without --privileged (which this kind of machine refuses).
SYSTEMD_RUN = [
    "--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
    "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
]  # fmt: skip
CHECKOUT = "/root/netclaw"
FAKE_PORT = 8700
# What a command can reach: run on the host (tools.shell.sandbox "none") and in bubblewrap.
SHELL_PROBE = """id -un; hostname; echo "pid 1: $(cat /proc/1/comm 2>/dev/null)"
for d in /var/lib/netclaw /var/lib/private/netclaw; do echo "$d: $(ls -A $d 2>/dev/null | tr '\\n' ' ')"; done
test -r /var/lib/netclaw/control.token && echo token-readable || echo token-hidden
python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5199), 5)' 2>/dev/null && echo network-on || echo network-off
echo written > sandbox-proof.txt && echo workspace-writable
touch /usr/sandbox-proof 2>/dev/null && echo usr-writable || echo usr-read-only
grep 'Max processes' /proc/self/limits
nice -n 5 true; echo shell-ok"""
DROP_IN = "/etc/systemd/system/netclaw.service.d/shell-sandbox.conf"
# The unit alone, and with the shell sandbox's drop-in: what `systemd-analyze security` gave
# (1.1 and 2.5) is the target; every point above 1.1 is a setting bubblewrap was shown to need.
EXPOSURE_TARGET = 1.2
EXPOSURE_TARGET_WITH_DROP_IN = 2.5


@dataclass(frozen=True)
class Installed:
    """What the systemd recipe printed, line by line, when it ran in the container."""

    lines: list[str]  # the recipe's lines, as docs/deploy.md has them
    init: str  # `netclaw init --system`'s output
    chat: str  # `netclaw chat -p hi`'s answer
    status: str  # `netclaw status`'s output
    install_s: float


class Debian:
    """The container: commands as root in the checkout, like a person at its shell."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.installed: Installed | None = None  # once the systemd recipe ran here

    def install(self) -> Installed:
        """Run the systemd recipe as written (once per container), with the
        scripted model answering the first chat: what every later step starts from."""
        if self.installed is not None:
            return self.installed
        lines = recipe("systemd")
        assert [line.split("#")[0].split()[:3] for line in lines] == [
            ["sudo", "deploy/install.sh"],
            ["sudo", "netclaw", "init"],
            ["sudo", "systemctl", "enable"],
            ["sudo", "netclaw", "chat"],
            ["sudo", "netclaw", "status"],
        ], lines
        install, init, enable, chat, status = lines
        started = time.monotonic()
        self.sh(install, timeout=600)
        install_s = time.monotonic() - started
        self.model({"text": "hello from the model"})
        # init asks: provider, base URL, model (it offers what the server has), key variable.
        init_out = self.sh(init, input=f"openai\nhttp://127.0.0.1:{FAKE_PORT}/v1\n\n\n").stdout
        self.sh(enable, timeout=120)
        self.installed = Installed(
            lines=lines,
            init=init_out,
            chat=self.sh(chat).stdout,
            status=self.sh(status).stdout,
            install_s=install_s,
        )
        return self.installed

    def sh(
        self, command: str, *, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        done = docker(
            "exec", "-i", self.name, "bash", "-c", f"cd {CHECKOUT} && {command}",
            input=input, check=False, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(
                f"`{command}` exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        return done

    def restart(self, verb: str = "restart") -> None:
        """``systemctl restart netclaw``; when it fails, the error says why (the unit's log)."""
        done = self.sh(f"sudo systemctl {verb} netclaw", check=False, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"systemctl {verb} netclaw failed:\n{self.journal('-n', '60')[-6000:]}")

    def json(self, command: str) -> Any:
        return json.loads(self.sh(command).stdout)

    def main_pid(self) -> int:
        return int(self.sh("systemctl show -p MainPID --value netclaw").stdout)

    def session(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json("sudo netclaw sessions show cli:default --json")
        return result

    def model(self, *steps: dict[str, Any]) -> None:
        """(Re)start the scripted model server on the container's loopback: it answers with
        ``steps`` in order, then echoes. (The venv's python has what it needs.)"""
        script = json.dumps(list(steps))
        self.sh(
            "if [ -f /root/model.pid ]; then kill $(cat /root/model.pid) && "
            "while kill -0 $(cat /root/model.pid) 2>/dev/null; do sleep 0.1; done; fi; "
            f"cat > /root/script.json <<'EOF'\n{script}\nEOF\n"
            # `cd; cmd &`, not `cd && cmd &`: $! must be the server itself, not a subshell.
            f"cd /root; PYTHONPATH={CHECKOUT} setsid /opt/netclaw/bin/python -m tests.fakes.scripted_openai "
            f"--port {FAKE_PORT} --script /root/script.json >/root/model.log 2>&1 < /dev/null & echo $! > /root/model.pid"
        )
        wait_until(
            lambda: "LISTENING" in self.sh("cat /root/model.log").stdout, 30, "the scripted model server"
        )

    def edit_config(self, change: str) -> None:
        """Edit /etc/netclaw/netclaw.json as a person would; ``change`` is Python that sees
        the parsed file as ``config`` (the // comment lines init writes are dropped)."""
        script = (
            "import json\n"
            "path = '/etc/netclaw/netclaw.json'\n"
            "text = '\\n'.join(l for l in open(path).read().split('\\n') if not l.strip().startswith('//'))\n"
            f"config = json.loads(text)\n{change}\n"
            "open(path, 'w').write(json.dumps(config, indent=2))\n"
        )
        self.sh(f"python3 -c {shlex.quote(script)}")

    def failed_start(self, expected: str) -> str:
        """``systemctl restart netclaw`` fails; the unit is stopped, and the error line that
        says ``expected`` is returned."""
        assert self.sh("sudo systemctl restart netclaw", check=False, timeout=120).returncode != 0
        self.sh("sudo systemctl stop netclaw; sudo systemctl reset-failed netclaw")
        # The daemon's stderr reaches the journal through a stream, possibly after systemd's own lines.
        line: str = wait_until(
            lambda: next((line for line in self.journal("-p", "err").splitlines() if expected in line), None),
            15,
            f"an error line saying {expected!r}",
        )
        return line

    def doctor(self) -> str:
        """``sudo netclaw doctor``, which must pass (exit 0): what it printed."""
        done = self.sh("sudo netclaw doctor", check=False, timeout=180)
        assert done.returncode == 0, (
            f"sudo netclaw doctor exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
        return done.stdout

    def exposure(self) -> float:
        security = self.sh("systemd-analyze security netclaw --no-pager").stdout
        found = re.search(r"Overall exposure level for netclaw\.service: ([\d.]+)", security)
        assert found, security
        return float(found[1])

    def last_tool_result(self, name: str) -> str:
        results = [
            m["content"] for m in self.session()["messages"] if m["role"] == "tool" and m.get("name") == name
        ]
        assert results, f"no {name} result"
        content: str = results[-1]
        return content

    def errors_of_this_run(self) -> str:
        """The running daemon's lines at priority err or worse. (Not ``--after-cursor``:
        with ``-p`` it drops lines that arrived through the service's stdout stream.)"""
        invocation = self.sh("systemctl show -p InvocationID --value netclaw").stdout.strip()
        return self.sh(f"journalctl --no-pager -o cat -p err _SYSTEMD_INVOCATION_ID={invocation}").stdout

    def journal(self, *options: str) -> str:
        return self.sh(f"journalctl -u netclaw --no-pager -o cat {' '.join(options)}").stdout


@pytest.fixture(scope="module")
def debian() -> Iterator[Debian]:
    require_engine()
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Dockerfile").write_text(
            (Path(__file__).parent / "deploy" / "Dockerfile.systemd").read_text()
        )
        ca = Path("/etc/ssl/certs/ca-certificates.crt")
        (Path(context) / "host-ca.crt").write_bytes(ca.read_bytes() if ca.exists() else b"")
        build(SYSTEMD_IMAGE, context)
    name = f"netclaw-debian-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, *SYSTEMD_RUN, SYSTEMD_IMAGE)
    host = Debian(name)
    try:
        state = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and state not in ("running", "degraded"):
            time.sleep(0.5)
            state = docker("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state not in ("running", "degraded"):
            logs = docker("logs", name, check=False)
            pytest.skip(
                f"systemd did not boot in a container here ({state!r}): {(logs.stdout + logs.stderr)[-500:]}"
            )
        docker("exec", name, "mkdir", "-p", CHECKOUT)
        packed = subprocess.run(repo_tar_command(), capture_output=True, check=True, timeout=120).stdout
        subprocess.run(
            ["docker", "exec", "-i", name, "tar", "-C", CHECKOUT, "-xf", "-"],
            input=packed,
            check=True,
            timeout=120,
        )
        yield host
    finally:
        docker("rm", "-f", name, check=False)


@pytest.fixture
def installed(debian: Debian) -> Debian:
    """The container with the systemd recipe run in it: by the first test that needs it,
    so that every test also runs alone (``pytest path::test``)."""
    debian.install()
    return debian


def test_the_systemd_recipe_as_written(installed: Debian) -> None:
    debian = installed
    ran = debian.install()
    print(f"deploy/install.sh took {ran.install_s:.0f}s")
    assert "the server at http://127.0.0.1:8700/v1 has: scripted" in ran.init, ran.init
    assert "[ok] provider" in ran.init and "wrote /etc/netclaw/netclaw.env" in ran.init, ran.init
    modes = debian.sh("stat -c '%a %U:%G %n' /etc/netclaw/netclaw.json /etc/netclaw/netclaw.env").stdout
    assert modes.split("\n")[:2] == [
        "640 root:netclaw /etc/netclaw/netclaw.json",
        "600 root:root /etc/netclaw/netclaw.env",
    ]

    assert ran.chat.strip() == "hello from the model"
    assert "netclaw at http://127.0.0.1:5199: ok" in ran.status, ran.status

    # What it left: private state, errors only where there are some, the unit rated.
    state = debian.sh(
        "stat -c '%a %U' /var/lib/private/netclaw /var/lib/netclaw/netclaw.db /var/lib/netclaw/control.token"
    )
    assert [line.split()[0] for line in state.stdout.splitlines()] == ["700", "600", "600"]
    assert {line.split()[1] for line in state.stdout.splitlines()} == {"netclaw"}
    assert debian.errors_of_this_run().strip() == ""
    exposure = debian.exposure()
    print(f"systemd-analyze security: exposure {exposure} (target <= {EXPOSURE_TARGET})")
    assert exposure <= EXPOSURE_TARGET, debian.sh("systemd-analyze security netclaw --no-pager").stdout

    # The install as doctor sees it from root's shell: the daemon is the service's user, whose
    # private files are right (not root's: that is not a fault).
    report = debian.doctor()
    assert (
        "[ok] files: /var/lib/netclaw is private (0700, files 0600, owned by the service's user netclaw)"
        in report
    ), report
    assert "[info] daemon: running at http://127.0.0.1:5199" in report, report


def test_reload_applies_a_change(installed: Debian) -> None:
    debian = installed
    pid = debian.main_pid()
    debian.sh(
        'sed -i \'0,/^{/s//{\\n  "agent": {"system_prompt": "You are the reloaded agent KQ-9."},/\' '
        "/etc/netclaw/netclaw.json"
    )
    debian.sh("sudo systemctl reload netclaw")
    wait_until(
        lambda: "reloaded agent KQ-9" in debian.sh("sudo netclaw sessions show cli:default --context").stdout,
        20,
        "the new system prompt in the context view",
    )
    assert debian.main_pid() == pid  # applied live, not by a restart
    assert "config reloaded; applied: agent.system_prompt" in debian.journal()


def test_the_watchdog_restarts_a_frozen_daemon_and_nothing_is_lost(installed: Debian) -> None:
    debian = installed
    pid = debian.main_pid()
    debian.model(
        {"text": "never delivered", "delay_s": 120},  # in flight when the daemon freezes
        {"text": "answered after the watchdog restart"},  # the same message, resumed
    )
    # Acknowledged (202: durable), and its turn in flight when the daemon freezes.
    code = (
        "import json, urllib.request\n"
        "token = open('/var/lib/netclaw/control.token').read().strip()\n"
        "req = urllib.request.Request('http://127.0.0.1:5199/api/sessions/cli:default/messages',"
        " data=json.dumps({'text': 'still there after the freeze?'}).encode(),"
        " headers={'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json'})\n"
        "print(urllib.request.urlopen(req).status)\n"
    )
    assert debian.sh(f"python3 -c {shlex.quote(code)}").stdout.strip() == "202"
    wait_until(lambda: debian.session()["phase"] == "processing", 20, "the turn to start")
    frozen = time.monotonic()
    debian.sh(f"kill -STOP {pid}")
    wait_until(
        lambda: (
            debian.sh("systemctl show -p NRestarts --value netclaw").stdout.strip() == "1"
            and debian.sh("systemctl is-active netclaw", check=False).stdout.strip() == "active"
        ),
        150,
        "the watchdog to restart the daemon",
        interval=1,
    )
    print(f"watchdog restart {time.monotonic() - frozen:.0f}s after SIGSTOP")
    assert debian.main_pid() != pid
    assert "Watchdog timeout" in debian.journal()
    wait_until(
        lambda: any(
            m["content"] == "answered after the watchdog restart" for m in debian.session()["messages"]
        ),
        60,
        "the acknowledged message answered after the restart",
    )
    messages = [m for m in debian.session()["messages"] if m["role"] in ("user", "assistant")]
    asked = [m for m in messages if m["content"] == "still there after the freeze?"]
    assert len(asked) == 1  # recorded once
    after = messages[messages.index(asked[0]) + 1 :]
    assert [m["content"] for m in after] == ["answered after the watchdog restart"]  # answered once


def test_a_failed_start_is_one_error_line_and_relative_paths_go_to_the_state_directory(
    installed: Debian,
) -> None:
    debian = installed
    config = "/etc/netclaw/netclaw.json"
    turns = debian.session()["turns"]  # what the journal in /var/lib/netclaw holds so far
    original = debian.sh(f"cat {config}").stdout
    debian.sh(f'sed -i \'s|"data_dir": "/var/lib/netclaw"|"data_dir": "/etc/netclaw/data"|\' {config}')
    assert debian.sh("sudo systemctl restart netclaw", check=False).returncode != 0
    debian.sh("sudo systemctl stop netclaw; sudo systemctl reset-failed netclaw")
    expected = "netclaw could not start: data_dir: cannot use /etc/netclaw/data: Read-only file system"
    # The daemon's stderr reaches the journal through a stream, possibly after systemd's own lines.
    errors = wait_until(
        lambda: (text := debian.journal("-p", "err")) and expected in text and text,
        15,
        "the failure at priority err",
    )
    assert "under systemd only the state directory /var/lib/netclaw is writable" in errors
    assert "Traceback" not in debian.journal()

    # `netclaw init` (no --system) writes ./data and ./workspace: under the unit they are the
    # state directory and a folder in it, and the CLI beside it reads them the same way.
    relative = original.replace('"data_dir": "/var/lib/netclaw"', '"data_dir": "./data"').replace(
        '"workspace_dir": "/var/lib/netclaw/workspace"', '"workspace_dir": "./workspace"'
    )
    assert relative != original
    debian.sh(f"cat > {config} <<'EOF'\n{relative}EOF")
    debian.restart("start")
    assert "netclaw at http://127.0.0.1:5199: ok" in debian.sh("sudo netclaw status").stdout
    assert debian.session()["turns"] == turns  # the same journal: /var/lib/netclaw
    assert (
        debian.sh("test ! -e /etc/netclaw/data && test -d /var/lib/netclaw/workspace", check=False).returncode
        == 0
    )


def test_an_mcp_server_and_the_shell_tool_under_the_hardening(installed: Debian) -> None:
    debian = installed
    """The shell turned on as docs/tools.md says, under the unit as installed: no bubblewrap,
    and the daemon says what to do. The opt-out (``sandbox: none``) works under the unit as
    it is; then docs/tools.md's step for the sandbox (bubblewrap and the unit's drop-in), after
    which every command runs in bubblewrap under the service: the state directory, the
    control token and the network are out of its reach, the workspace is its own."""
    # The MCP server's code where the service may read it (not under /root: ProtectHome=).
    debian.sh("mkdir -p /opt/nctest && cp -r tests /opt/nctest/ && chmod -R a+rX /opt/nctest")
    debian.edit_config(
        "config['tools'] = {**config.get('tools', {}), 'shell': {'enabled': True}}\n"
        "config['audiences'] = {'personal': {'tools': ['shell', 'py__*', 'current_time']}}\n"
        "config['mcp'] = {'servers': {'py': {'command': '/opt/netclaw/bin/python',"
        " 'args': ['-m', 'tests.fakes.mcp_fake', 'stdio'], 'cwd': '/opt/nctest'}}}"
    )
    assert debian.sh("command -v bwrap", check=False).returncode != 0  # nothing installed it yet
    error = debian.failed_start("bubblewrap is not installed")
    assert "apt-get install bubblewrap" in error and "sudo deploy/install.sh --shell-sandbox" in error, error

    def turn_with_the_shell_and_the_mcp_server() -> str:
        debian.model(
            {"tool_calls": [{"name": "shell", "arguments": {"command": SHELL_PROBE}}]},
            {"text": "the shell ran"},
            {"tool_calls": [{"name": "py__echo", "arguments": {"text": "python MCP under systemd"}}]},
            {"text": "the MCP server answered"},
        )
        wait_until(
            lambda: "mcp:       py up" in debian.sh("sudo netclaw status", check=False).stdout,
            60,
            "the MCP server",
        )
        assert debian.sh("sudo netclaw chat -p 'run the shell'").stdout.strip() == "the shell ran"
        assert (
            debian.sh("sudo netclaw chat -p 'ask the MCP server'").stdout.strip() == "the MCP server answered"
        )
        assert "python MCP under systemd" in debian.last_tool_result("py__echo")
        assert debian.errors_of_this_run().strip() == ""
        return debian.last_tool_result("shell")

    # The opt-out, under the unit as it is: the command is the service's user on the host,
    # which reads the service's state and reaches its network.
    debian.edit_config("config['tools']['shell']['sandbox'] = 'none'")
    debian.restart()
    host = turn_with_the_shell_and_the_mcp_server()
    lines = host.splitlines()
    assert "netclaw" in lines and "shell-ok" in lines, host
    assert "token-readable" in lines and "network-on" in lines and "netclaw.db" in host, host
    assert "workspace-writable" in lines and "usr-read-only" in lines, host  # ProtectSystem=strict
    # ~@resources: refused (EPERM, SystemCallErrorNumber=), the command goes on; nothing is killed.
    assert "nice: cannot set niceness: Operation not permitted" in host, host

    # docs/tools.md's step for the sandbox, as written, with the shell at its default ("bwrap").
    steps = recipe("shell-sandbox")
    assert [line.split("#")[0].split() for line in steps] == [
        ["sudo", "deploy/install.sh", "--shell-sandbox"],
        ["sudo", "systemctl", "restart", "netclaw"],
    ], steps
    install, restart = steps
    debian.edit_config("del config['tools']['shell']['sandbox']")
    debian.sh("rm /var/lib/netclaw/workspace/sandbox-proof.txt")  # the host's; the sandbox writes its own
    done = debian.sh(install, timeout=600)
    assert "installing bubblewrap" in done.stdout and DROP_IN in done.stdout, done.stdout
    assert restart == "sudo systemctl restart netclaw"
    debian.restart()
    sandboxed = turn_with_the_shell_and_the_mcp_server()
    lines = sandboxed.splitlines()
    assert "netclaw" in lines and "shell-ok" in lines, sandboxed
    # bubblewrap is the sandbox's init, under its own name for the host.
    assert "sandbox" in lines and "pid 1: bwrap" in lines, sandboxed
    # The state directory: only the workspace is there (journal, token, lock are not).
    assert "/var/lib/netclaw: " in lines and "/var/lib/private/netclaw: workspace " in lines, sandboxed
    assert "netclaw.db" not in sandboxed and "token-hidden" in lines, sandboxed
    debian.sh("test -s /var/lib/netclaw/netclaw.db && test -s /var/lib/netclaw/control.token")  # they exist
    # The network: its own, empty (the daemon listens on the host's loopback, 5199).
    assert "network-off" in lines, sandboxed
    # The workspace is writable, and is the service's; the system is read-only.
    assert "workspace-writable" in lines and "usr-read-only" in lines, sandboxed
    proof = debian.sh("stat -c '%U' /var/lib/netclaw/workspace/sandbox-proof.txt").stdout.strip()
    assert proof == "netclaw", proof
    assert re.search(r"^Max processes\s+64\s+64", sandboxed, re.M), sandboxed  # prlimit, inside
    assert "nice: cannot set niceness: Operation not permitted" in sandboxed, sandboxed

    exposure, target = debian.exposure(), EXPOSURE_TARGET_WITH_DROP_IN
    print(f"systemd-analyze security with {DROP_IN}: exposure {exposure} (target <= {target})")
    assert exposure <= target, debian.sh("systemd-analyze security netclaw --no-pager").stdout

    # doctor, with the shell and the drop-in as docs/tools.md has them: the sandbox tried as the
    # service starts it (its user, inside the unit's mounts), not as root's sandbox_uid.
    report = debian.doctor()
    assert "[ok] shell sandbox: bubblewrap starts a sandbox in the service, as its user netclaw" in report, (
        report
    )
    assert "[ok] mcp py: " in report and "(as the running daemon sees it)" in report, report


def test_without_the_drop_in_the_sandbox_stops_start_up_naming_it(installed: Debian) -> None:
    debian = installed
    """Back to the stricter unit the way docs/tools.md says (delete the drop-in, daemon-reload) with
    the sandbox still on: one error line naming the drop-in and how to install it."""
    debian.sh("command -v bwrap || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap")
    debian.edit_config("config['tools'] = {**config.get('tools', {}), 'shell': {'enabled': True}}")
    debian.sh(f"sudo rm -f {DROP_IN} && sudo systemctl daemon-reload")
    assert debian.exposure() <= EXPOSURE_TARGET
    error = debian.failed_start("/proc/sys is hidden")
    assert "bwrap: Can't read /proc/sys/kernel/overflowuid" in error, error
    assert "deploy/netclaw.service.d/shell-sandbox.conf" in error, error
    assert "sudo deploy/install.sh --shell-sandbox" in error, error
    assert "sudo systemctl restart netclaw" in error, error
    assert "Traceback" not in debian.journal("-p", "err")
    # doctor cannot try the sandbox of a service that is not running: it says so, and where
    # the service's own attempt is.
    report = debian.sh("sudo netclaw doctor", check=False).stdout
    assert (
        "[ok] shell sandbox: bubblewrap is installed; the sandbox is not tried (the service is not running)"
        in report
    ), report
    assert "journalctl -u netclaw.service -p err" in report, report


def test_slack_and_discord_under_the_hardening(installed: Debian) -> None:
    debian = installed
    """The real slack-bolt and discord.py inside the unit's sandbox, against the protocol
    fakes on the container's loopback (Discord through the launcher that points discord.py
    at its fake: a drop-in replaces ExecStart=, the hardening stays)."""
    debian.model()  # echo
    debian.sh(
        "rm -f /root/fakes.*; mkdir -p /opt/nctest && cp -r tests /opt/nctest/ && chmod -R a+rX /opt/nctest"
    )
    debian.sh(
        f"cd /root; PYTHONPATH={CHECKOUT} setsid /opt/netclaw/bin/python -m tests.e2e.deploy.chat_fakes "
        "/root/fakes >/root/fakes.log 2>&1 < /dev/null &"
    )
    fakes = wait_until(lambda: debian.json("cat /root/fakes.json 2>/dev/null || echo null"), 30, "the fakes")
    # Under the unit as installed (no drop-in), with what this test needs and nothing else.
    debian.sh(f"sudo rm -f {DROP_IN} && sudo systemctl daemon-reload")
    debian.edit_config(
        f"config['slack'] = {{'enabled': True, 'channels': ['C1'], 'api_url': {fakes['slack_api_url']!r}}}\n"
        "config['discord'] = {'enabled': True, 'channels': ['100']}\n"
        "config['tools'] = {**config.get('tools', {}), 'shell': {'enabled': False}}\n"
        "config.pop('mcp', None)"
    )
    debian.sh(
        "cat >> /etc/netclaw/netclaw.env <<'EOF'\n"
        f"SLACK_BOT_TOKEN={BOT_TOKEN}\nSLACK_APP_TOKEN={APP_TOKEN}\nDISCORD_BOT_TOKEN={fakes['discord_token']}\n"
        "EOF"
    )
    debian.sh(
        "mkdir -p /etc/systemd/system/netclaw.service.d && cat > /etc/systemd/system/netclaw.service.d/fake-discord.conf <<'EOF'\n"
        "[Service]\nEnvironment=PYTHONPATH=/opt/nctest\nExecStart=\n"
        f"ExecStart=/opt/netclaw/bin/python -m tests.e2e.netclaw_with_fake_discord {fakes['discord_port']} "
        "run --config /etc/netclaw/netclaw.json\nEOF\n"
        "systemctl daemon-reload"
    )
    try:
        debian.restart()
        wait_until(
            lambda: (
                "channel:   discord running"
                in (status := debian.sh("sudo netclaw status", check=False).stdout)
                and "channel:   slack running" in status
            ),
            60,
            "both channels running",
        )
        debian.sh("touch /root/fakes.go")
        result = wait_until(
            lambda: debian.json("cat /root/fakes.result.json 2>/dev/null || echo null"),
            120,
            "the chat replies",
        )
        assert result == {"slack": ["echo: hello from slack"], "discord": ["echo: hello from discord"]}, (
            result,
            debian.sh("cat /root/fakes.log").stdout,
        )
        assert debian.errors_of_this_run().strip() == ""
    finally:
        debian.sh("systemctl stop netclaw; touch /root/fakes.done")
        debian.sh("rm -f /etc/systemd/system/netclaw.service.d/fake-discord.conf && systemctl daemon-reload")


# -- containers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider_on_the_host() -> Iterator[ScriptedOpenAIThread]:
    """The model where ``host.docker.internal`` (``host-gateway``) points from a container."""
    require_engine()
    with ScriptedOpenAIThread(host=host_gateway()) as server:
        yield server


def _unique_run_line(
    line: str, *, tag: str, name: str, volume: str, port: int, provider_port: int
) -> list[str]:
    """docs/deploy.md's ``docker run`` with its names made unique here; each must be there."""
    words = shlex.split(line)
    replaced = {
        "--name": name,
        "-p": f"127.0.0.1:{port}:5199",
        "-v": f"{volume}:/var/lib/netclaw",
    }
    out: list[str] = []
    for i, word in enumerate(words):
        if i > 0 and words[i - 1] in replaced:
            out.append(replaced[words[i - 1]])
        elif word.startswith("NETCLAW_PROVIDERS__LOCAL__BASE_URL="):
            assert ":11434/" in word, word
            out.append(word.replace(":11434/", f":{provider_port}/"))
        else:
            out.append(word)
    assert words[-1] == "netclaw" and out[-1] == "netclaw", words
    out[-1] = tag
    assert (
        words[words.index("-p") + 1] == "127.0.0.1:5199:5199"
        and words[words.index("-v") + 1] == "netclaw-data:/var/lib/netclaw"
    )
    return out


@pytest.mark.netclaw_image
def test_docker_run_as_written(provider_on_the_host: ScriptedOpenAIThread) -> None:
    build_line, run, exec_chat = recipe("docker")
    assert shlex.split(build_line) == ["docker", "build", "-t", "netclaw", "."]
    assert shlex.split(exec_chat) == ["docker", "exec", "netclaw", "netclaw", "chat", "-p", "hi"]
    suffix = uuid.uuid4().hex[:8]
    tag, name, volume, port = (
        f"netclaw-test:{suffix}",
        f"netclaw-{suffix}",
        f"netclaw-data-{suffix}",
        free_port(),
    )
    argv = _unique_run_line(
        run, tag=tag, name=name, volume=volume, port=port, provider_port=provider_on_the_host.server.port
    )
    assert "--add-host=host.docker.internal:host-gateway" in argv
    try:
        build(tag, str(REPO_ROOT))
        docker(*argv[1:])
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200,
            60,
            "the container",
        )
        done = docker("exec", name, "netclaw", "chat", "-p", "hi")
        assert done.stdout.strip() == "echo: hi", done.stdout + done.stderr
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert health["provider"]["state"] == "ok", health
        wait_until(
            lambda: json.loads(docker("inspect", name).stdout)[0]["State"]["Health"]["Status"] == "healthy",
            60,
            "the image's HEALTHCHECK",
            interval=1,
        )
    finally:
        docker("rm", "-f", name, check=False)
        docker("volume", "rm", "-f", volume, check=False)
        docker("rmi", "--no-prune", "-f", tag, check=False)  # its layers stay for the next build


@pytest.mark.netclaw_image
@pytest.mark.parametrize("compose", ["v2", "v1"])
def test_docker_compose_as_written(compose: str, provider_on_the_host: ScriptedOpenAIThread) -> None:
    lines = recipe("compose")
    assert lines[0].startswith("export OPENAI_API_KEY=") and len(lines) == 3
    if compose == "v1":
        # docs/deploy.md: the same file with docker-compose v1, which has no --wait, and whose exec
        # needs -T without a terminal (as here).
        if shutil.which("docker-compose") is None or (
            subprocess.run(["docker-compose", "version"], capture_output=True, check=False).returncode != 0
        ):
            pytest.skip("docker-compose (v1) is not installed")
        lines = [lines[0], lines[1].replace("docker compose", "docker-compose").replace(" --wait", ""),
                 lines[2].replace("docker compose", "docker-compose").replace(" exec ", " exec -T ")]  # fmt: skip
    elif docker("compose", "version", check=False).returncode != 0:
        pytest.skip(
            "the docker compose plugin (v2) is not installed (tests/e2e/deploy/docker-setup.sh adds it)"
        )
    project, port = f"netclaw-test-{uuid.uuid4().hex[:8]}", free_port()
    env = subprocess_env(
        source_tree=False,
        COMPOSE_PROJECT_NAME=project,
        NETCLAW_GATEWAY__PORT=str(port),
        NETCLAW_PROVIDERS__LOCAL__BASE_URL=f"http://host.docker.internal:{provider_on_the_host.server.port}/v1",
        NETCLAW_MODELS__MAIN__MODEL="scripted",
    )
    script = "set -e\n" + "\n".join(lines[:2])
    down = ["docker", "compose"] if compose == "v2" else ["docker-compose"]
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200,
            90,
            "compose up",
        )
        done = subprocess.run(
            ["bash", "-c", f"{lines[0]}\n{lines[2]}"],  # the same shell: OPENAI_API_KEY still exported
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            compose_cmd = " ".join(down) + " -f deploy/docker-compose.yml"
            state = subprocess.run(
                ["bash", "-c", f"{compose_cmd} ps; {compose_cmd} logs --tail 30"],
                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            raise AssertionError(
                f"{lines[2]} exited {done.returncode}: {done.stdout}{done.stderr}\n{state.stdout}{state.stderr}"
            )
        assert done.stdout.strip() == "echo: hi", done.stdout + done.stderr
    finally:
        subprocess.run(
            [*down, "-f", "deploy/docker-compose.yml", "down", "-v"],
            cwd=REPO_ROOT, env={**env, "OPENAI_API_KEY": "x"}, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
