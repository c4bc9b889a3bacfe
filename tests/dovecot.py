"""Real mail servers for tests: a throwaway Dovecot (IMAP) and an in-process ``aiosmtpd``
(SMTP), both on 127.0.0.1.

- :class:`DovecotServer`: Debian's ``dovecot`` binary (``apt-get install dovecot-imapd``)
  run in the foreground with a config file written to a temporary directory: one IMAP
  listener on a free port, no TLS, users from a passwd-file, each a Maildir under the
  temporary directory; no system service is touched. Tests skip, saying why, where it is
  not installed (``.ci/run`` installs it and sets REQUIRE_DOVECOT_FOR_TESTS so CI never
  skips). People's mail reaches a mailbox as a real MTA's would appear to a client: by
  IMAP ``APPEND`` (:meth:`DovecotServer.deliver`).
- :class:`SmtpSink`: ``aiosmtpd``'s controller, keeping every message the bot sends (the
  tests read the bot's replies there), with a switch to refuse mail for a while.
"""

from __future__ import annotations

import email
import email.policy
import imaplib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

REQUIRE_ENV = "REQUIRE_DOVECOT_FOR_TESTS"  # CI sets it: a missing Dovecot fails, never skips
START_TIMEOUT_S = 30.0  # a bound, not a pause: Dovecot listens within a fraction of a second
PASSWORD = "kit-password"


def dovecot_binary() -> str | None:
    found = shutil.which("dovecot") or ("/usr/sbin/dovecot" if Path("/usr/sbin/dovecot").is_file() else None)
    return found


def require_dovecot() -> str:
    """The dovecot binary. Skips the test, saying why, when Dovecot is not installed (fails
    instead under REQUIRE_DOVECOT_FOR_TESTS)."""
    binary = dovecot_binary()
    if binary is None:
        why = "Dovecot is not installed: apt-get install dovecot-imapd (see .ci/run)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(why)
        pytest.skip(why)
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
info_log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
mail_location = maildir:{root}/mail/%u
default_internal_user = {internal}
default_login_user = {login}
default_internal_group = {group}
mail_uid = {uid}
mail_gid = {gid}
first_valid_uid = 0
first_valid_gid = 0
login_trusted_networks = 127.0.0.0/8
mail_max_userip_connections = 100
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {root}/passwd
  default_fields = uid={uid} gid={gid} home={root}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""


class DovecotServer:
    """``start()`` → write the config and the users, run ``dovecot -F``, wait until it
    answers IMAP; ``deliver(user, message)``; ``stop()``."""

    def __init__(self, binary: str, users: list[str], *, extra_config: str = "") -> None:
        self.binary = binary
        self.users = users
        self.extra_config = extra_config  # more settings (e.g. imap_capability without IDLE)
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.root = Path(tempfile.mkdtemp(prefix="netclaw-dovecot-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DovecotServer:
        import grp
        import pwd

        # As root (CI, containers) Dovecot refuses to serve logins or mail as root: the
        # Debian package's own users do (dovenull logs in, dovecot owns the Maildirs).
        if os.getuid() == 0:
            login, internal = pwd.getpwnam("dovenull"), pwd.getpwnam("dovecot")
        else:
            login = internal = pwd.getpwuid(os.getuid())
        group = grp.getgrgid(internal.pw_gid).gr_name
        for part in ("mail", "home"):
            (self.root / part).mkdir()
        (self.root / "passwd").write_text("".join(f"{u}:{{PLAIN}}{PASSWORD}::::::\n" for u in self.users))
        if os.getuid() == 0:
            self.root.chmod(0o755)
            for part in ("mail", "home"):
                os.chown(self.root / part, internal.pw_uid, internal.pw_gid)
        config = self.root / "dovecot.conf"
        config.write_text(
            _CONFIG.format(
                root=self.root,
                port=self.port,
                login=login.pw_name,
                internal=internal.pw_name,
                group=group,
                uid=internal.pw_uid,
                gid=internal.pw_gid,
            )
            + self.extra_config
        )
        self._proc = subprocess.Popen(
            [self.binary, "-F", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "dovecot.err", "wb"),  # noqa: SIM115 - the child holds it
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"dovecot exited at start: {self._log()}")
            try:
                with imaplib.IMAP4(self.host, self.port, timeout=5) as imap:
                    imap.login(self.users[0], PASSWORD)
                break
            except (OSError, imaplib.IMAP4.error):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"dovecot did not answer within {START_TIMEOUT_S:g}s: {self._log()}"
                    ) from None
                time.sleep(0.05)
        return self

    def _log(self) -> str:
        parts = []
        for name in ("dovecot.err", "dovecot.log"):
            path = self.root / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def imap(self, user: str) -> imaplib.IMAP4:
        """A plain IMAP client logged in as ``user`` (the caller logs out)."""
        client = imaplib.IMAP4(self.host, self.port, timeout=10)
        client.login(user, PASSWORD)
        return client

    def deliver(
        self, user: str, message: EmailMessage | bytes, *, seen: bool = False, folder: str = "INBOX"
    ) -> None:
        """``message`` arrives in ``user``'s ``folder`` (IMAP APPEND, as new mail; the folder
        is made when it does not exist)."""
        data = message if isinstance(message, bytes) else message.as_bytes()
        client = self.imap(user)
        try:
            if folder != "INBOX":
                client.create(f'"{folder}"')  # already there: a NO, fine
            status, answer = client.append(f'"{folder}"', r"(\Seen)" if seen else None, None, data)
            if status != "OK":
                raise RuntimeError(f"APPEND refused: {answer!r}")
        finally:
            client.logout()

    def flags(self, user: str) -> dict[str, set[str]]:
        """Every message of ``user``'s INBOX: its Message-ID → its flags."""
        client = self.imap(user)
        try:
            client.select("INBOX", readonly=True)
            status, data = client.fetch("1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
            found: dict[str, set[str]] = {}
            if status != "OK":
                return found
            for item in data:
                if not isinstance(item, tuple):
                    continue
                head, body = item
                flags = head.decode().partition("FLAGS (")[2].partition(")")[0].split()
                message_id = email.message_from_bytes(body).get("Message-ID", "").strip()
                found[message_id] = set(flags)
            return found
        finally:
            client.logout()

    def mark_unseen(self, user: str, message_id: str) -> int:
        """Take ``\\Seen`` off every copy of mail ``message_id`` (what a crash between taking
        a mail and flagging it leaves); how many there were."""
        client = self.imap(user)
        try:
            client.select("INBOX")
            status, data = client.uid("SEARCH", "HEADER", "Message-ID", message_id)
            uids = data[0].split() if status == "OK" and data and data[0] else []
            for uid in uids:
                client.uid("STORE", uid, "-FLAGS", r"(\Seen)")
            return len(uids)
        finally:
            client.logout()


def dovecot_for_tests(users: list[str]) -> Iterator[DovecotServer]:
    """A started server for a fixture to yield, stopped after (:func:`require_dovecot`)."""
    server = DovecotServer(require_dovecot(), users).start()
    try:
        yield server
    finally:
        server.stop()


class SmtpSink:
    """An SMTP server on 127.0.0.1 (aiosmtpd, in this process) keeping what it is sent."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.port = _free_port()
        self.host = "127.0.0.1"
        self._lock = threading.Lock()
        self._messages: list[tuple[str, list[str], EmailMessage]] = []
        self.refusing = False  # answer 451 (try again later) to every message while set
        self._controller = Controller(self, hostname=self.host, port=self.port)

    def start(self) -> SmtpSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's hook
        if self.refusing:
            return "451 4.3.0 try again later"
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self._lock:
            self._messages.append((str(envelope.mail_from), list(envelope.rcpt_tos), message))
        return "250 OK"

    def messages(self) -> list[tuple[str, list[str], EmailMessage]]:
        """(envelope sender, envelope recipients, message) of each mail received, in order."""
        with self._lock:
            return list(self._messages)
