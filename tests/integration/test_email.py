"""The email channel end to end against real mail servers: Dovecot (IMAP) and aiosmtpd
(SMTP), started by the tests (``tests/dovecot.py``); skipped, saying why, where Dovecot is
not installed (CI requires it).

The daemon runs in-process; people's mail reaches the bot's INBOX by IMAP APPEND, as mail
an MTA delivered appears to a client; the bot's replies are read where the SMTP server
kept them. Each test has its own bot account (``botN``) on the module's servers.
"""

from __future__ import annotations

import email
import email.policy
import itertools
import re
import uuid
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from adapters.email import EmailAdapter, session_id_for, thread_token
from adapters.email._mail import parse
from netclaw.config import Settings, settings_model
from netclaw.errors import AdapterError, JournalError
from tests.conftest import DaemonHandle, settings_data, wait_until
from tests.dovecot import PASSWORD, DovecotServer, SmtpSink, require_dovecot
from tests.fakes.scripted_openai import ScriptedOpenAIThread

DOMAIN = "kit.test"
BOTS = [f"bot{n}" for n in range(1, 25)]  # one account per test: no mail of another's
_bots = itertools.count()
PASSWORD_ENV = "EMAIL_IMAP_PASSWORD"
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[DovecotServer, SmtpSink]]:
    dovecot = DovecotServer(require_dovecot(), BOTS).start()
    smtp = SmtpSink().start()
    try:
        yield dovecot, smtp
    finally:
        smtp.stop()
        dovecot.stop()


@pytest.fixture
def make_settings(tmp_path: Path, scripted: ScriptedOpenAIThread) -> Callable[..., Settings]:
    """Settings with the installed channels' sections (``email`` is not one of Settings' own)."""

    def make(**sections: Any) -> Settings:
        return settings_model()(**settings_data(tmp_path / "data", scripted.base_url, **sections))

    return make


def mail(
    text: str,
    *,
    sender: str = "alice",
    to: str,
    subject: str = "a question",
    parent: EmailMessage | None = None,
    references: bool = True,
    headers: dict[str, str] | None = None,
) -> EmailMessage:
    """A person's mail (to ``to``), replying to ``parent`` the way clients do."""
    message = EmailMessage()
    message["From"] = f"{sender.title()} <{sender}@{DOMAIN}>"
    message["To"] = to
    message["Message-ID"] = f"<{uuid.uuid4().hex}@{DOMAIN}>"
    if parent is None:
        message["Subject"] = subject
    else:
        message["Subject"] = f"Re: {parent['Subject']}".replace("Re: Re: ", "Re: ")
        message["In-Reply-To"] = str(parent["Message-ID"])
        if references:
            chain = re.findall(r"<[^<>\s]+>", str(parent.get("References") or ""))
            message["References"] = " ".join([*chain, str(parent["Message-ID"])])
    for name, value in (headers or {}).items():
        message[name] = value
    message.set_content(text)
    return message


class Mailbox:
    """One test's bot account on the module's servers, and the daemon over it."""

    def __init__(
        self,
        servers: tuple[DovecotServer, SmtpSink],
        start_daemon: Callable[..., DaemonHandle],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self.dovecot, self.smtp = servers
        self.user = BOTS[next(_bots)]  # an IndexError: more tests than BOTS, add some
        self.address = f"{self.user}@{DOMAIN}"
        self._start_daemon = start_daemon
        monkeypatch.setenv(PASSWORD_ENV, PASSWORD)

    def section(self, **overrides: Any) -> dict[str, Any]:
        return {
            "enabled": True,
            "address": self.address,
            "imap_host": self.dovecot.host,
            "imap_port": self.dovecot.port,
            "imap_tls": "none",
            "imap_user": self.user,
            "smtp_host": self.smtp.host,
            "smtp_port": self.smtp.port,
            "smtp_tls": "none",
            "smtp_password_env": "",
            "users": [f"alice@{DOMAIN}", f"bob@{DOMAIN}"],
            "poll_interval_s": 5,
            "timeout_s": 10,
            **overrides,
        }

    def start(self, **overrides: Any) -> DaemonHandle:
        handle = self._start_daemon(email=self.section(**overrides))
        assert self.adapter(handle).status().state == "running", self.adapter(handle).status()
        return handle

    @staticmethod
    def adapter(handle: DaemonHandle) -> EmailAdapter:
        [adapter] = [a for a in handle.daemon.adapters if a.name == "email"]
        assert isinstance(adapter, EmailAdapter), adapter
        return adapter

    def deliver(self, message: EmailMessage) -> EmailMessage:
        self.dovecot.deliver(self.user, message)
        return message

    def replies(self) -> list[EmailMessage]:
        return [m for _, _, m in self.smtp.messages() if self.address in str(m.get("From", ""))]

    def texts(self) -> list[str]:
        return [text_of(m) for m in self.replies()]

    def wait_replies(self, count: int) -> list[EmailMessage]:
        wait_until(
            lambda: len(self.replies()) >= count, TIMEOUT_S, f"{count} replies (so far {self.texts()})"
        )
        return self.replies()

    def seen(self, message: EmailMessage) -> bool:
        return "\\Seen" in self.dovecot.flags(self.user).get(str(message["Message-ID"]), set())


def text_of(message: EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain",))
    return str(body.get_content()).replace("\r\n", "\n").rstrip("\n") if body is not None else ""


@pytest.fixture
def box(
    servers: tuple[DovecotServer, SmtpSink],
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> Mailbox:
    return Mailbox(servers, start_daemon, monkeypatch)


def user_texts(handle: DaemonHandle, session_id: str) -> list[str]:
    response = handle.http.get(f"/api/sessions/{session_id}")
    response.raise_for_status()
    return [
        m["content"] if isinstance(m["content"], str) else str(m["content"])
        for m in response.json()["messages"]
        if m["role"] == "user"
    ]


def ids(value: object) -> list[str]:
    return re.findall(r"<[^<>\s]+>", str(value or ""))


# -- threads --------------------------------------------------------------------------------------


def test_a_thread_of_three_mails_is_one_session_and_the_replies_are_threaded(box: Mailbox) -> None:
    handle = box.start()
    first = box.deliver(mail("first mail", to=box.address, subject="Plans for Monday"))
    [reply1] = box.wait_replies(1)
    # The second answers the bot's reply; the third answers the second reply with a client
    # that keeps only In-Reply-To (no References): still the same thread.
    second = box.deliver(mail("second mail", to=box.address, parent=reply1))
    reply2 = box.wait_replies(2)[1]
    third = box.deliver(mail("third mail", to=box.address, parent=reply2, references=False))
    reply3 = box.wait_replies(3)[2]

    root = str(first["Message-ID"])
    session = session_id_for(thread_token(root))
    listed = [s["id"] for s in handle.http.get("/api/sessions").json()]
    assert listed == [session]
    texts = user_texts(handle, session)
    assert len(texts) == 3 and [t for t in texts if "mail" in t]
    assert ["first mail" in texts[0], "second mail" in texts[1], "third mail" in texts[2]] == [True] * 3
    assert [text_of(r) for r in (reply1, reply2, reply3)] == [
        "echo: first mail",
        "echo: second mail",
        "echo: third mail",
    ]
    for reply, answered in ((reply1, first), (reply2, second), (reply3, third)):
        assert reply["In-Reply-To"] == answered["Message-ID"]
        chain = ids(reply["References"])
        assert chain[0] == root and chain[-1] == str(answered["Message-ID"]), chain
        assert reply["Subject"] == "Re: Plans for Monday"
        assert reply["Auto-Submitted"] == "auto-replied"
        assert ids(reply["Message-ID"]) and str(reply["Message-ID"]).endswith(f"@{DOMAIN}>")
        assert f"<{box.address}>" in str(reply["From"])
        assert str(reply["To"]) == f"alice@{DOMAIN}"
    assert ids(reply2["References"]) == [root, str(reply1["Message-ID"]), str(second["Message-ID"])]
    assert all(box.seen(m) for m in (first, second, third))


def test_an_auto_reply_a_bounce_a_list_and_the_bots_own_mail_start_no_turn(
    box: Mailbox, scripted: ScriptedOpenAIThread
) -> None:
    handle = box.start()
    to = box.address
    robots = [
        mail("I am out of office", to=to, headers={"Auto-Submitted": "auto-replied"}),
        mail("Away until Monday", to=to, headers={"X-Autoreply": "yes"}),
        mail("Thanks, ticket 123 opened", to=to, headers={"Precedence": "bulk"}),
        mail("digest", to=to, headers={"List-Id": "<team.lists.kit.test>"}),
        mail("echo: a reply of ours", sender=box.user, to=to),
    ]
    bounce = email.message_from_bytes(
        (
            f"From: Mail Delivery System <MAILER-DAEMON@{DOMAIN}>\r\n"
            f"To: {to}\r\nReturn-Path: <>\r\nSubject: Undelivered Mail Returned to Sender\r\n"
            f"Message-ID: <{uuid.uuid4().hex}@{DOMAIN}>\r\nMIME-Version: 1.0\r\n"
            'Content-Type: multipart/report; report-type="delivery-status"; boundary="b1"\r\n\r\n'
            "--b1\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
            "--b1\r\nContent-Type: message/delivery-status\r\n\r\n"
            "Reporting-MTA: dns; mx.kit.test\r\n\r\nFinal-Recipient: rfc822; nobody@kit.test\r\n"
            "Action: failed\r\nStatus: 5.1.1\r\n\r\n--b1--\r\n"
        ).encode(),
        policy=email.policy.default,
    )
    assert isinstance(bounce, EmailMessage)
    robots.append(bounce)
    for robot in robots:
        box.deliver(robot)
    person = box.deliver(mail("a person asks", to=to))
    box.wait_replies(1)

    # Mail is taken in order: the person's last mail answered means every robot's was read.
    wait_until(lambda: all(box.seen(m) for m in [*robots, person]), TIMEOUT_S, "every mail flagged seen")
    assert box.texts() == ["echo: a person asks"]
    assert [s["id"] for s in handle.http.get("/api/sessions").json()] == [
        session_id_for(thread_token(str(person["Message-ID"])))
    ]
    assert len(scripted.requests) == 1
    assert all(parse(r.as_bytes(), to).automatic for r in robots)  # each for a reason of its own


def test_a_sender_beyond_the_bound_per_hour_starts_no_turn(
    box: Mailbox, scripted: ScriptedOpenAIThread
) -> None:
    box.start(turns_per_hour=2)
    robot = [box.deliver(mail(f"ping {n}", to=box.address, subject=f"ping {n}")) for n in range(4)]
    box.wait_replies(2)
    wait_until(lambda: all(box.seen(m) for m in robot), TIMEOUT_S, "every ping taken")
    assert box.texts() == ["echo: ping 0", "echo: ping 1"]
    assert len(scripted.requests) == 2


def test_commands_and_unknown_codes_count_toward_the_bound_too(
    box: Mailbox, scripted: ScriptedOpenAIThread
) -> None:
    # A robot that answers with "/status" or "approve <code>" is not answered forever either.
    box.start(turns_per_hour=3)
    sent = [
        box.deliver(mail(text, to=box.address, subject=f"robot {n}"))
        for n, text in enumerate(["/status", "approve ABCDEFGH", "/status", "/status", "approve ABCDEFGH"])
    ]
    box.wait_replies(3)
    wait_until(lambda: all(box.seen(m) for m in sent), TIMEOUT_S, "every robot mail taken")
    texts = box.texts()
    assert len(texts) == 3, texts
    # The first three are answered, in whichever order their replies leave: two statuses and
    # the unknown code (a loaded machine sent the second status's first).
    assert sum("has the code ABCDEFGH" in t for t in texts) == 1, texts
    assert sum(t.startswith("Model scripted") for t in texts) == 2, texts
    assert not scripted.requests


def test_a_mail_too_large_is_taken_without_being_read(
    box: Mailbox, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapters.email._adapter as email_adapter

    monkeypatch.setattr(email_adapter, "MAX_MAIL_BYTES", 20_000)
    box.start()
    huge = mail("read all of it", to=box.address, subject="huge")
    huge.add_attachment(b"x" * 50_000, maintype="application", subtype="octet-stream", filename="blob.bin")
    box.deliver(huge)
    small = box.deliver(mail("a short one", to=box.address, subject="small"))
    box.wait_replies(1)
    wait_until(lambda: box.seen(huge) and box.seen(small), TIMEOUT_S, "both taken")
    assert box.texts() == ["echo: a short one"]
    assert len(scripted.requests) == 1


def test_a_sender_outside_the_allowlist_is_never_answered(
    box: Mailbox, scripted: ScriptedOpenAIThread
) -> None:
    box.start()
    stranger = box.deliver(mail("let me in", sender="mallory", to=box.address))
    person = box.deliver(mail("hello", to=box.address))
    box.wait_replies(1)
    wait_until(lambda: box.seen(stranger) and box.seen(person), TIMEOUT_S, "both taken")
    assert box.texts() == ["echo: hello"]
    assert len(scripted.requests) == 1


def test_a_server_without_idle_is_polled(
    servers: tuple[DovecotServer, SmtpSink],
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Dovecot told to offer no IDLE after login (its capability list without it).
    plain = DovecotServer(require_dovecot(), ["quiet"], extra_config="imap_capability = IMAP4rev1 LITERAL+\n")
    plain.start()
    try:
        box = Mailbox((plain, servers[1]), start_daemon, monkeypatch)
        box.user, box.address = "quiet", f"quiet@{DOMAIN}"
        handle = box.start(poll_interval_s=0.3)
        assert "polling every 0.3s" in box.adapter(handle).status().detail
        box.deliver(mail("are you there", to=box.address))
        assert [text_of(m) for m in box.wait_replies(1)] == ["echo: are you there"]
    finally:
        plain.stop()


def test_idle_off_polls_and_a_folder_may_have_a_space(box: Mailbox) -> None:
    box.dovecot.deliver(box.user, mail("made the folder", to=box.address), seen=True, folder="Bot mail")
    handle = box.start(idle=False, poll_interval_s=0.3, folder="Bot mail")
    assert "polling every 0.3s" in box.adapter(handle).status().detail
    box.dovecot.deliver(box.user, mail("polled", to=box.address), folder="Bot mail")
    assert [text_of(m) for m in box.wait_replies(1)] == ["echo: polled"]


def test_with_authserv_id_only_mail_the_server_vouches_for_starts_a_turn(
    box: Mailbox, scripted: ScriptedOpenAIThread
) -> None:
    box.start(authserv_id="mx.kit.test")
    forged = box.deliver(mail("I am alice, honest", to=box.address))  # no verdict of our server
    vouched = box.deliver(
        mail(
            "the real alice",
            to=box.address,
            headers={
                "Authentication-Results": "mx.kit.test; spf=pass; dkim=pass; dmarc=pass header.from=kit.test"
            },
        )
    )
    box.wait_replies(1)
    wait_until(lambda: box.seen(forged) and box.seen(vouched), TIMEOUT_S, "both taken")
    assert box.texts() == ["echo: the real alice"]
    assert len(scripted.requests) == 1


# -- durability -----------------------------------------------------------------------------------


def test_mail_that_arrived_while_the_daemon_was_down_is_answered_once_after_it_starts(
    box: Mailbox, start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread
) -> None:
    early = box.deliver(mail("written at night", to=box.address, subject="night"))
    box.deliver(early)  # and delivered twice, as a retrying MTA may
    other = box.deliver(mail("and another", sender="bob", to=box.address, subject="other"))
    handle = box.start()
    box.wait_replies(2)
    wait_until(lambda: box.seen(early) and box.seen(other), TIMEOUT_S, "both taken")
    assert sorted(box.texts()) == ["echo: and another", "echo: written at night"]
    handle.stop()

    # Started again: the server's flags say both were taken; nothing is answered twice.
    again = box.start()
    late = box.deliver(mail("a new one", to=box.address, subject="late"))
    box.wait_replies(3)
    assert sorted(box.texts()) == ["echo: a new one", "echo: and another", "echo: written at night"]
    assert len(scripted.requests) == 3
    assert box.seen(late)
    again.stop()


def test_a_mail_is_flagged_seen_only_once_its_input_is_journaled(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = box.start(poll_interval_s=0.5)
    gateway = box.adapter(handle).gateway
    real = gateway.submit_chat
    failing = {"left": 2}

    async def journal_away(*args: Any, **kwargs: Any) -> Any:
        if failing["left"] > 0:
            failing["left"] -= 1
            raise JournalError("the journal is unreachable (a test)")
        return await real(*args, **kwargs)

    monkeypatch.setattr(gateway, "submit_chat", journal_away)
    message = box.deliver(mail("keep this", to=box.address))
    wait_until(lambda: failing["left"] == 0, TIMEOUT_S, "two tries refused by the journal")
    assert not box.seen(message)  # not journaled: not taken, and nobody told it failed
    [reply] = box.wait_replies(1)  # the next look takes it
    assert text_of(reply) == "echo: keep this"
    wait_until(lambda: box.seen(message), TIMEOUT_S, "the mail taken")


# -- the doctor ----------------------------------------------------------------------------


async def test_probe_logs_in_to_imap_and_reaches_smtp(
    box: Mailbox, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = EmailAdapter(make_settings(email=box.section()), _NoGateway())  # type: ignore[arg-type]
    said = await adapter.probe()
    assert box.address in said and "IDLE" in said and f"SMTP {box.smtp.host}:{box.smtp.port}" in said
    dead = EmailAdapter(make_settings(email=box.section(smtp_port=1)), _NoGateway())  # type: ignore[arg-type]
    with pytest.raises(AdapterError, match="cannot reach SMTP"):
        await dead.probe()

    # A wrong password, on a server of its own: Dovecot slows every login from an address
    # that just failed one (its auth penalty), which the module's other tests must not meet.
    other = DovecotServer(require_dovecot(), [box.user]).start()
    try:
        section = box.section(imap_port=other.port)
        monkeypatch.setenv(PASSWORD_ENV, "wrong")
        refused = EmailAdapter(make_settings(email=section), _NoGateway())  # type: ignore[arg-type]
        with pytest.raises(AdapterError, match=f"refused the login of '{box.user}'"):
            await refused.probe()
    finally:
        other.stop()


class _NoGateway:
    settings: Any = None
