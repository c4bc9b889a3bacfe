"""The email channel: a mailbox read over IMAP, replies sent over SMTP; a thread is a session.

The libraries: ``aioimaplib`` and ``aiosmtplib`` — asyncio clients, maintained, so the
adapter runs on the I/O loop like every other (the standard library's ``imaplib`` has no
IDLE before Python 3.14 and would need a thread per blocking call). Mail itself is
parsed and written with the standard library's ``email`` package. The modules:

- ``_mail``: reading and writing mail (pure): threads, the loop guard's checks, replies
  threaded as clients expect, approval codes.
- ``_adapter``: :class:`EmailAdapter` — the receive loop (IDLE or polling), policy, the
  loop guard's bound, threads ↔ sessions; replies are rendered by the shared
  :class:`~adapters.chat.ChatRenderer` without streaming.
- ``_port``: the chat port over mail (:class:`MailPort`) and its error type.
- ``_imap`` and ``_smtp``: aioimaplib and aiosmtplib themselves, imported only when the
  adapter starts or probes.
- ``_store``: the little kept locally (how to answer each thread, what was sent by key,
  approval codes).
- ``_config``: the ``email`` config section (:class:`EmailConfig`).

Set-up for people: docs/channels/email.md. (The package is ``adapters.email``: imports
are absolute, so the standard library's ``email`` is never shadowed by it.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.email._config import EmailConfig

if TYPE_CHECKING:
    from adapters.email._adapter import EmailAdapter, conversation_of
    from adapters.email._mail import approval_code, session_id_for, thread_token
    from adapters.email._port import MailError, MailPort

__all__ = [
    "CHANNEL",
    "EmailAdapter",
    "EmailConfig",
    "MailError",
    "MailPort",
    "approval_code",
    "conversation_of",
    "session_id_for",
    "thread_token",
]

__getattr__ = lazy_names(
    __name__,
    {
        "EmailAdapter": "_adapter",
        "conversation_of": "_adapter",
        "approval_code": "_mail",
        "session_id_for": "_mail",
        "thread_token": "_mail",
        "MailError": "_port",
        "MailPort": "_port",
    },
)

CHANNEL = Channel(
    name="email",
    section=EmailConfig,
    adapter="adapters.email._adapter:EmailAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="replies",
        edits=False,  # a sent mail stays as it is: one reply per turn
        files_in=True,
        files_out=True,
    ),
    summary="Email over IMAP and SMTP: each mail thread is a session",
    # One reader of the mailbox: two nodes would both take a mail before either flags it.
    one_node=True,
    requires="pip install 'netclaw[email]'",
    docs="docs/channels/email.md",
)
