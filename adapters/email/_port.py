"""The chat port over mail: what the shared renderer does, as mail can do it.

A conversation is ``Conversation(<thread token>)``; how to answer the thread (whom, under
which mail, the subject) is in the :class:`~adapters.email._store.MailStore`. Mail is
sent and never changed, so:

- ``post`` sends a reply in the thread, its Message-ID made from the post's key (a repeat
  is found in the store and not sent again; a resend after a crash carries the same
  Message-ID, which clients show once);
- ``edit`` sends the new text as a follow-up under the mail it changes — only when it
  says something new (an approval's decision, a sub-agent's end); the same text again (the
  outbox finishing a reply already sent) sends nothing;
- ``delete``, ``react`` and ``typing`` do nothing (replies do not stream: one per turn);
- ``post_buttons`` sends the approval prompt with its reply code (and the control room's
  link where one is configured); the code is kept to find the approval when a reply
  quotes it;
- ``upload`` sends the file as an attachment; ``open_thread`` starts a thread (a delivery
  target's mail to an address).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from email.message import EmailMessage

from adapters.chat import Button, ChatApiError, Conversation, MessageRef, new_key
from adapters.email._mail import (
    Attachment,
    approval_code,
    bot_message_id,
    compose,
    domain_of,
    references_for,
    reply_subject,
    thread_token,
)
from adapters.email._store import MailStore, Thread, digest

log = logging.getLogger("adapters.email")

MESSAGE_LIMIT = 1_000_000  # characters in one mail: no practical limit, a reply is never split
SUBJECT_CHARS = 78


class MailError(ChatApiError):
    """An IMAP or SMTP exchange failed (see :class:`~adapters.chat.ChatApiError`)."""

    code = "email_error"


Send = Callable[[EmailMessage, str, Sequence[str]], Awaitable[None]]


class MailPort:
    """:class:`~adapters.chat.ChatPort` over SMTP (``send``) and the store."""

    def __init__(
        self, store: MailStore, send: Send, *, address: str, name: str, control_room_url: str | None
    ) -> None:
        self._store = store
        self._send = send
        self.address = address
        self.name = name
        self.domain = domain_of(address)
        self.control_room_url = control_room_url

    @property
    def platform(self) -> str:
        return "email"

    @property
    def message_limit(self) -> int:
        return MESSAGE_LIMIT

    def escape(self, text: str) -> str:
        return text

    async def _thread(self, to: Conversation) -> Thread:
        thread = await self._store.thread(to.channel)
        if thread is None:
            raise MailError(f"email: thread {to.channel} is unknown here (its record is gone)")
        return thread

    async def _mail(
        self,
        thread: Thread,
        text: str,
        *,
        key: str,
        to: Sequence[str] | None = None,
        parent: str | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        """Send ``text`` in ``thread`` (under ``parent``, by default the newest person's
        mail), once per ``key``; the Message-ID."""
        sent = await self._store.sent(key)
        if sent is not None:
            return sent
        message_id = bot_message_id(thread.token, key, self.domain)
        under = parent or thread.parent
        recipients = list(to) if to is not None else list(thread.reply_to)
        cc = [] if to is not None else [a for a in thread.cc if a not in recipients]
        mail = compose(
            sender=self.address,
            sender_name=self.name,
            to=recipients,
            cc=cc,
            subject=reply_subject(thread.subject) if under else thread.subject,
            text=text,
            message_id=message_id,
            in_reply_to=under,
            references=references_for(thread.references, under) if under else [],
            attachments=attachments,
        )
        await self._send(mail, self.address, [*recipients, *cc])
        await self._store.remember_sent(key, thread.token, message_id, text)
        return message_id

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        return await self._mail(await self._thread(to), text, key=key)

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        if await self._store.sent_digest(message_id) == digest(text):
            return  # it says that already
        thread = await self._thread(to)
        key = f"e{digest(message_id + '|' + text)[:20]}"
        await self._mail(thread, text, key=key, parent=message_id)

    async def delete(self, to: Conversation, message_id: str) -> None:
        return None  # a sent mail stays

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        return None

    async def typing(self, to: Conversation) -> None:
        return None

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        thread = await self._thread(to)
        return await self._mail(thread, "", key=new_key(), attachments=[Attachment(name, mime_type, data)])

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        thread = await self._thread(to)
        approval_id = buttons[0].value if buttons else ""
        code = approval_code(approval_id)
        choices = ", ".join(f"{b.action_id} {code}" for b in buttons)
        lines = [text, "", f"To decide, reply with one of: {choices}"]
        if self.control_room_url:
            lines.append(f"or decide in the control room: {self.control_room_url}/approvals")
        # The code is recorded before the mail leaves: a crash between the two must not leave
        # a person holding a code nobody knows (the Message-ID is the key's, known already).
        await self._store.remember_code(
            code, approval_id, thread.token, bot_message_id(thread.token, key, self.domain)
        )
        return await self._mail(thread, "\n".join(lines), key=key)

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        address = channel.strip().lower()
        if address.count("@") != 1 or " " in address:
            raise MailError(f"email: {channel!r} is not an address to write to (name@example.org)")
        token = thread_token(f"opened|{key}")
        root = bot_message_id(token, key, self.domain)
        subject = (text.strip().splitlines() or ["netclaw"])[0][:SUBJECT_CHARS]
        thread = Thread(token, root, subject, (address,), (), None, ())
        await self._store.save_thread(thread)
        await self._mail(thread, text, key=key)
        # From now on the thread's replies answer under the mail that opened it.
        await self._store.save_thread(Thread(token, root, subject, (address,), (), root, ()))
        return Conversation(token)

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        return await self._store.sent(key, since)

    async def answer_alone(self, thread: Thread, person: str, parent: str, text: str) -> None:
        """A mail for ``person`` alone under their ``parent`` mail (a refused decision)."""
        await self._mail(thread, text, key=new_key(), to=[person], parent=parent)
