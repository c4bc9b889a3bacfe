"""The chat port over mail (adapters/email/_port.py) with its real store (SQLite in a temp
dir); what it would send over SMTP is kept by the ``send`` it is given."""

from __future__ import annotations

from collections.abc import Sequence
from email.message import EmailMessage
from pathlib import Path

from adapters.chat import Button, Conversation
from adapters.email._mail import approval_code, thread_token
from adapters.email._port import MailPort
from adapters.email._store import MailStore, Thread

BOT = "netclaw@example.org"
ROOT = "<root@example.org>"


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[EmailMessage, list[str]]] = []

    async def __call__(self, mail: EmailMessage, sender: str, recipients: Sequence[str]) -> None:
        assert sender == BOT
        self.sent.append((mail, list(recipients)))


async def port_with_thread(tmp_path: Path, url: str | None = None) -> tuple[MailPort, Outbox, MailStore, str]:
    store = MailStore(tmp_path / "mail.db")
    await store.open()
    token = thread_token(ROOT)
    await store.save_thread(
        Thread(
            token, ROOT, "Plans", ("alice@example.org",), ("bob@example.org",), "<p@example.org>", (ROOT,)
        ),
        message_id="<p@example.org>",
    )
    outbox = Outbox()
    return MailPort(store, outbox, address=BOT, name="netclaw", control_room_url=url), outbox, store, token


async def test_a_post_is_a_threaded_reply_sent_once_per_key(tmp_path: Path) -> None:
    port, outbox, store, token = await port_with_thread(tmp_path)
    to = Conversation(token)
    first = await port.post(to, "the answer", key="k1")
    again = await port.post(to, "the answer", key="k1")  # a retry, or the outbox after a crash
    assert first == again and len(outbox.sent) == 1
    mail, recipients = outbox.sent[0]
    assert recipients == ["alice@example.org", "bob@example.org"]
    assert mail["In-Reply-To"] == "<p@example.org>" and mail["References"] == f"{ROOT} <p@example.org>"
    assert mail["Subject"] == "Re: Plans" and mail["Message-ID"] == first
    assert await port.find_posted(to, "k1", 0.0) == first
    assert await store.token_of([first]) == token  # a reply to it finds the thread
    await store.close()


async def test_an_edit_sends_only_what_is_new_under_the_mail_it_changes(tmp_path: Path) -> None:
    port, outbox, store, token = await port_with_thread(tmp_path)
    to = Conversation(token)
    sent = await port.post(to, "the answer", key="k1")
    await port.edit(to, sent, "the answer")  # the outbox finishing a reply already sent
    assert len(outbox.sent) == 1
    await port.edit(to, sent, "current_time: approve by carol")
    await port.edit(to, sent, "current_time: approve by carol")  # repeated: one mail
    assert len(outbox.sent) == 2
    follow_up = outbox.sent[1][0]
    assert follow_up["In-Reply-To"] == sent
    await store.close()


async def test_an_approval_prompt_carries_its_code_and_the_control_rooms_link(tmp_path: Path) -> None:
    port, outbox, store, token = await port_with_thread(tmp_path, url="https://netclaw.example.org/ui")
    buttons = [
        Button("approve", "Approve", "ap_1"),
        Button("deny", "Deny", "ap_1"),
        Button("always", "Always", "ap_1"),
    ]
    prompt = await port.post_buttons(Conversation(token), "May I run current_time?", buttons, key="p1")
    code = approval_code("ap_1")
    text = str(outbox.sent[0][0].get_body(("plain",)).get_content())  # type: ignore[union-attr]
    assert f"approve {code}, deny {code}, always {code}" in text
    assert "https://netclaw.example.org/ui/approvals" in text
    found = await store.code(code)
    assert found is not None and (found.approval_id, found.message_id, found.token) == ("ap_1", prompt, token)
    await store.close()


async def test_open_thread_writes_to_an_address_in_a_new_thread(tmp_path: Path) -> None:
    port, outbox, store, _ = await port_with_thread(tmp_path)
    opened = await port.open_thread("Carol@Example.org", "Daily report\nall green", key="d1", since=0.0)
    again = await port.open_thread("carol@example.org", "Daily report\nall green", key="d1", since=0.0)
    assert opened == again and len(outbox.sent) == 1
    mail, recipients = outbox.sent[0]
    assert recipients == ["carol@example.org"] and mail["Subject"] == "Daily report"
    assert mail["In-Reply-To"] is None
    reply = await port.post(opened, "more", key="d2")  # a later reply threads under the first
    assert outbox.sent[1][0]["In-Reply-To"] == mail["Message-ID"] and reply != mail["Message-ID"]
    await store.close()
