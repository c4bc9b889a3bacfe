"""The email driver: the real adapter (aioimaplib, aiosmtplib) against a real Dovecot (IMAP)
and a real SMTP server (aiosmtpd), both started by ``start`` (``tests/dovecot.py``).
Skipped, saying why, where Dovecot is not installed (CI sets REQUIRE_DOVECOT_FOR_TESTS).

- The bot is ``netclaw@kit.test``, a Dovecot account; alice, bob and carol are
  ``<name>@kit.test`` (speakers ``email:alice@kit.test`` …), allowed by ``email.users``.
  A person's mail reaches the bot's INBOX by IMAP APPEND, as a mail an MTA delivered
  appears to a client; the bot's mail is what the SMTP server received.
- A conversation is a thread: the Message-ID of its first mail. A person goes on in it by
  replying to the newest mail there (``In-Reply-To``, ``References``, ``Re:``), as a
  mail client does; the session is ``email:<token of the root>``.
- "Delivered twice" is the same mail (same Message-ID) in the INBOX again.
- Mail has no edits (``edits`` is []) and nothing shown to one person but mail to them
  alone: what a press tells its presser is the bot's mail answering that press.
- Approvals are replies: a prompt is a bot mail asking for ``approve CODE`` …; ``press``
  answers it so; a prompt stays waiting until the bot mails a decision under it.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.email import CHANNEL
from adapters.email._mail import approval_code, session_id_for, thread_token
from tests.conformance.driver import Daemon, Decision, Edit, Person, Prompt, Said
from tests.dovecot import PASSWORD, DovecotServer, SmtpSink, require_dovecot

BOT = "netclaw"
DOMAIN = "kit.test"
ADDRESS = f"{BOT}@{DOMAIN}"
PASSWORD_ENV = "EMAIL_IMAP_PASSWORD"
_BOT_ID = re.compile(r"<nc\.([0-9a-f]{16})\.")
_CODE = re.compile(r"reply with one of: approve ([A-Z2-7]{8})")


def address(person: Person) -> str:
    return f"{person}@{DOMAIN}"


def text_of(mail: EmailMessage) -> str:
    body = mail.get_body(preferencelist=("plain",))
    return str(body.get_content()).replace("\r\n", "\n").rstrip("\n") if body is not None else ""


class EmailDriver:
    name: ClassVar[str] = "email"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.dovecot: DovecotServer | None = None
        self.smtp: SmtpSink | None = None
        self._daemon: Daemon | None = None
        self._subjects: dict[str, str] = {}  # conversation → its subject
        self._last: dict[str, tuple[str, list[str]]] = {}  # conversation → newest mail people saw, its refs
        self._presses: dict[str, Person] = {}  # Message-ID of a press → who pressed

    # -- the servers ------------------------------------------------------------------------------

    def start(self) -> None:
        self.dovecot = DovecotServer(require_dovecot(), [BOT])
        self.dovecot.start()
        self.smtp = SmtpSink().start()

    def stop(self) -> None:
        if self.smtp is not None:
            self.smtp.stop()
        if self.dovecot is not None:
            self.dovecot.stop()

    def sections(self) -> dict[str, Any]:
        assert self.dovecot is not None and self.smtp is not None
        return {
            "email": {
                "enabled": True,
                "address": ADDRESS,
                "imap_host": self.dovecot.host,
                "imap_port": self.dovecot.port,
                "imap_tls": "none",
                "imap_user": BOT,
                "imap_password_env": PASSWORD_ENV,
                "smtp_host": self.smtp.host,
                "smtp_port": self.smtp.port,
                "smtp_tls": "none",
                "smtp_password_env": "",
                "users": [address(p) for p in ("alice", "bob", "carol")],
                "poll_interval_s": 5,  # one IDLE's length: a killed daemon's ends soon
                "timeout_s": 10,
            }
        }

    def env(self) -> dict[str, str]:
        return {PASSWORD_ENV: PASSWORD}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        return None  # the adapter reaches both servers by the config

    def attach(self, daemon: Daemon) -> None:
        self._daemon = daemon  # mail that comes before the adapter reads is unseen: taken then

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"email:{address(person)}"

    # -- people ------------------------------------------------------------------------------------

    def _mail(
        self,
        text: str,
        conversation: str | None,
        person: Person,
        files: Sequence[tuple[str, str, bytes]] = (),
        parent: str | None = None,
    ) -> EmailMessage:
        message_id = f"<{uuid.uuid4().hex}@{DOMAIN}>"
        mail = EmailMessage()
        mail["From"] = f"{person.title()} <{address(person)}>"
        mail["To"] = ADDRESS
        mail["Message-ID"] = message_id
        if conversation is None:
            subject = text.splitlines()[0][:60] if text.strip() else "files"
            self._subjects[message_id] = subject
            mail["Subject"] = subject
        else:
            mail["Subject"] = f"Re: {self._subjects.get(conversation, 'kit')}"
            newest, refs = self._newest(conversation)
            under = parent or newest
            mail["In-Reply-To"] = under
            mail["References"] = " ".join(dict.fromkeys([*refs, under]))
        mail.set_content(text)
        for name, mime_type, data in files:
            maintype, _, subtype = mime_type.partition("/")
            mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
        return mail

    def _newest(self, conversation: str) -> tuple[str, list[str]]:
        """The newest mail of the thread a person has (the bot's latest, else the root), and
        the References a reply to it carries."""
        mails = self._bot_mails(conversation)
        if mails:
            latest = mails[-1]
            refs = re.findall(r"<[^<>\s]+>", str(latest.get("References") or ""))
            return str(latest["Message-ID"]), refs or [conversation]
        return self._last.get(conversation, (conversation, []))

    def say(
        self,
        text: str,
        conversation: str | None = None,
        *,
        person: Person = "alice",
        mention: bool = True,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Said:
        mail = self._mail(text, conversation, person, files)
        raw = mail.as_bytes()
        self._dovecot().deliver(BOT, raw)
        return Said(text, person, conversation, (str(mail["Message-ID"]), raw))

    def redeliver(self, said: Said) -> None:
        self._dovecot().deliver(BOT, said.ref[1])

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        return said.conversation if said.conversation is not None else str(said.ref[0])

    def session_of(self, conversation: str) -> str:
        return session_id_for(thread_token(conversation))

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        conversation, prompt_id, code = prompt.ref
        mail = self._mail(f"{decision} {code}\n\nThanks!", conversation, person, parent=prompt_id)
        self._presses[str(mail["Message-ID"])] = person
        self._dovecot().deliver(BOT, mail.as_bytes())

    # -- what people see -----------------------------------------------------------------------------

    def _all_bot_mails(self) -> list[EmailMessage]:
        assert self.smtp is not None
        return [m for _, _, m in self.smtp.messages() if ADDRESS in str(m.get("From", ""))]

    def _bot_mails(self, conversation: str) -> list[EmailMessage]:
        token = thread_token(conversation)
        return [m for m in self._all_bot_mails() if _token(m) == token]

    def bot_messages(self, conversation: str) -> list[str]:
        return [t for t in (text_of(m) for m in self._bot_mails(conversation)) if t]

    def everywhere(self) -> list[str]:
        return [t for t in (text_of(m) for m in self._all_bot_mails()) if t]

    def told(self, person: Person) -> list[str]:
        mine = {mid for mid, who in self._presses.items() if who == person}
        return [text_of(m) for m in self._all_bot_mails() if str(m.get("In-Reply-To", "")).strip() in mine]

    def edits(self, conversation: str) -> list[Edit]:
        return []  # a sent mail never changes

    def prompts(self, conversation: str) -> list[Prompt]:
        mails = self._bot_mails(conversation)
        answered = {str(m.get("In-Reply-To", "")).strip() for m in mails}
        found = []
        for mail in mails:
            text = text_of(mail)
            asked = _CODE.search(text)
            message_id = str(mail["Message-ID"]).strip()
            if asked is None or message_id in answered:
                continue
            code = asked.group(1)
            found.append(
                Prompt(self._approval_of(conversation, code), text, (conversation, message_id, code))
            )
        return found

    def _approval_of(self, conversation: str, code: str) -> str:
        """The pending approval a code stands for (the control API lists them)."""
        if self._daemon is None:
            return ""
        response = self._daemon.control.get(f"/api/sessions/{self.session_of(conversation)}/approvals")
        if response.status_code != 200:
            return ""
        return next((a["id"] for a in response.json() if approval_code(a["id"]) == code), "")

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        found = []
        for mail in self._bot_mails(conversation):
            for part in mail.iter_attachments():
                data = part.get_payload(decode=True)
                if isinstance(data, bytes):
                    found.append((part.get_filename() or "", data))
        return found

    def _dovecot(self) -> DovecotServer:
        assert self.dovecot is not None, "the driver is not started"
        return self.dovecot


def _token(mail: EmailMessage) -> str | None:
    found = _BOT_ID.match(str(mail.get("Message-ID", "")).strip())
    return found.group(1) if found is not None else None


DRIVER = EmailDriver
