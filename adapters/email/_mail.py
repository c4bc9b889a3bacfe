"""Mail as the email channel reads and writes it (pure: the standard library's ``email``
package, no I/O).

- **Reading**: :func:`parse` turns a raw message into an :class:`Incoming`: who sent it,
  which thread it belongs to (``Message-ID``, ``In-Reply-To``, ``References``), its text
  without the quoted mail below it, its attachments, and — the loop guard — why it must
  not start a turn (:func:`automatic`: an auto-reply, a bounce, a mailing list, the bot's
  own mail), whatever its sender's rights.
- **Threads**: a thread is named by a token made from its root's Message-ID
  (:func:`thread_token`); its session is ``email:<token>``. The bot's own Message-IDs carry
  the token (:func:`bot_message_id`), so a reply to the bot finds its thread even when
  its client kept only ``In-Reply-To``.
- **Writing**: :func:`compose` makes a reply threaded as clients expect (``In-Reply-To``,
  ``References``, ``Re:`` subject) and marked ``Auto-Submitted: auto-replied`` so other
  robots do not answer it.
- **Approvals by reply**: a prompt carries a short code (:func:`approval_code`); a reply
  whose first line is ``approve CODE`` / ``deny CODE`` / ``always CODE`` decides
  (:func:`decision_in`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.header import decode_header, make_header
from email.headerregistry import Address
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import format_datetime, getaddresses, parseaddr

from adapters.email._config import normal_address

TOKEN_CHARS = 16
_TOKEN = re.compile(r"[0-9a-f]{16}")
_SESSION = re.compile(r"email:([0-9a-f]{16})")
_BOT_ID = re.compile(r"<nc\.([0-9a-f]{16})\.[0-9a-zA-Z]+@([^>\s]+)>")
_MSG_ID = re.compile(r"<[^<>\s]+>")
_ADDRESS = re.compile(r"[^\s@<>()\[\],;:\"\\]+@[^\s@<>()\[\],;:\"\\]+")
# "approve K7Q2M4PX" on the first line that says anything (a client may add a greeting after).
_DECISION = re.compile(r"^\s*(approve|deny|always)\s+([A-Za-z0-9]{8})\b", re.IGNORECASE)
_WROTE = re.compile(r"^(On\b.*\bwrote:|-----\s*Original Message\s*-----)\s*$", re.IGNORECASE)
BOUNCE_SENDERS = frozenset({"mailer-daemon", "postmaster"})
LIST_PRECEDENCE = frozenset({"bulk", "junk", "list", "auto_reply"})
MAX_REFERENCES = 20  # a long thread's References keep the root and the newest


def thread_token(root_message_id: str) -> str:
    return hashlib.sha256(root_message_id.strip().encode()).hexdigest()[:TOKEN_CHARS]


def session_id_for(token: str) -> str:
    return f"email:{token}"


def token_of(session_id: str) -> str | None:
    found = _SESSION.fullmatch(session_id)
    return found.group(1) if found is not None else None


def is_token(value: str) -> bool:
    return _TOKEN.fullmatch(value) is not None


def domain_of(address: str) -> str:
    return address.rpartition("@")[2] or "netclaw.invalid"


def bot_message_id(token: str, key: str, domain: str) -> str:
    """The Message-ID of a mail the bot sends in thread ``token`` with idempotency ``key``:
    the same for a resend of the same post (a client shows one mail)."""
    safe = re.sub(r"[^0-9a-zA-Z]", "", key)[:40] or "x"
    return f"<nc.{token}.{safe}@{domain}>"


def token_in_bot_id(message_id: str, domain: str) -> str | None:
    found = _BOT_ID.fullmatch(message_id.strip())
    return found.group(1) if found is not None and found.group(2) == domain else None


def approval_code(approval_id: str) -> str:
    """The eight-character code a prompt mail carries for an approval (no 0/1/8/9 mix-ups:
    base32's letters and digits 2-7)."""
    digest = hashlib.sha256(f"mail-approval|{approval_id}".encode()).digest()
    return base64.b32encode(digest[:5]).decode()


def decision_in(text: str) -> tuple[str, str] | None:
    """``(decision, code)`` when the first line that says anything decides an approval."""
    for line in text.splitlines():
        if line.strip():
            found = _DECISION.match(line)
            return (found.group(1).lower(), found.group(2).upper()) if found is not None else None
    return None


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str
    mime_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Incoming:
    """One mail as the adapter sees it."""

    message_id: str
    sender: str  # the From address, normalised ("" when there is none)
    sender_name: str
    reply_to: tuple[str, ...]  # where a reply goes (Reply-To, else From)
    others: tuple[str, ...]  # the other addresses it went to (To, Cc), for a reply to all
    subject: str
    in_reply_to: str | None
    references: tuple[str, ...]
    text: str  # the new text: the quoted mail below it and a signature left out
    attachments: tuple[Attachment, ...]
    automatic: str  # why no turn may answer it ("" for a person's mail)
    # What the receiving servers said of its sender (Authentication-Results): (authserv-id,
    # the results' text), newest first.
    authentication: tuple[tuple[str, str], ...] = ()

    @property
    def parents(self) -> tuple[str, ...]:
        """The thread's earlier Message-IDs this mail names, nearest first."""
        found = [self.in_reply_to] if self.in_reply_to else []
        found += [r for r in reversed(self.references) if r != self.in_reply_to]
        return tuple(found)

    @property
    def root(self) -> str:
        """The first message of its thread, as its headers say (itself when it starts one)."""
        if self.references:
            return self.references[0]
        return self.in_reply_to or self.message_id


def _ids(value: object) -> list[str]:
    return _MSG_ID.findall(str(value or ""))


def _address(value: str) -> str:
    """An address fit to write to and to name a person by ("" when it is not one: spaces,
    brackets, control characters)."""
    value = normal_address(value)
    return value if _ADDRESS.fullmatch(value) else ""


def _headers(message: Message, name: str) -> list[str]:
    """Every ``name`` header's text. A value the header registry refuses (an encoded word
    hiding a line break in an address) is read as its decoded raw text instead."""
    try:
        return [str(v) for v in message.get_all(name, [])]
    except (ValueError, IndexError, TypeError, LookupError):
        found = []
        for key, value in message.raw_items():
            if key.lower() == name.lower():
                try:
                    found.append(str(make_header(decode_header(str(value)))))
                except (ValueError, LookupError, UnicodeError):
                    found.append(str(value))
        return found


def _header(message: Message, name: str) -> str:
    found = _headers(message, name)
    return found[0] if found else ""


def _one_line(value: object) -> str:
    """A header's text on one line (an encoded word may carry line breaks)."""
    return " ".join(str(value or "").split())


def parse(raw: bytes, own_address: str) -> Incoming:
    """A raw RFC 5322 message. A mail without a Message-ID is named by its bytes' hash (the
    same mail found again is still one)."""
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    ids = _ids(_header(message, "Message-ID"))
    message_id = ids[0] if ids else f"<{hashlib.sha256(raw).hexdigest()[:32]}@netclaw.no-message-id>"
    name, sender = parseaddr(_header(message, "From"))
    sender = _address(sender)
    reply_to = [a for a in (_address(a) for _, a in getaddresses(_headers(message, "Reply-To"))) if a]
    own = normal_address(own_address)
    others = [
        a
        for a in (_address(a) for _, a in getaddresses([*_headers(message, "To"), *_headers(message, "Cc")]))
        if a and a not in (own, sender)
    ]
    in_reply_to = _ids(_header(message, "In-Reply-To"))
    return Incoming(
        message_id=message_id,
        sender=sender,
        sender_name=_one_line(name)[:100],
        reply_to=tuple(reply_to or ([sender] if sender else [])),
        others=tuple(dict.fromkeys(others)),
        subject=_one_line(_header(message, "Subject"))[:200],
        in_reply_to=in_reply_to[0] if in_reply_to else None,
        references=tuple(_ids(" ".join(_headers(message, "References")))),
        text=new_text(body_text(message)),
        attachments=tuple(attachments_of(message)),
        automatic=automatic(message, own),
        authentication=tuple(
            (str(v).split(";", 1)[0].strip().lower(), str(v).partition(";")[2].lower())
            for v in _headers(message, "Authentication-Results")
        ),
    )


def unverified_sender(mail: Incoming, authserv_id: str | None) -> str:
    """Why ``mail``'s From cannot be trusted ("" when it can): with ``authserv_id`` set,
    the newest Authentication-Results header must be that server's (a sender can forge
    headers below it, not the one the receiving server adds on top) and say
    ``dmarc=pass``. Without it, From is taken as the mail server delivered it."""
    if authserv_id is None:
        return ""
    if not mail.authentication:
        return f"no Authentication-Results from {authserv_id} (email.authserv_id)"
    server, results = mail.authentication[0]
    if server != authserv_id.lower():
        return f"the newest Authentication-Results is {server!r}'s, not {authserv_id!r} (email.authserv_id)"
    if not re.search(r"\bdmarc=pass\b", results):
        return f"{mail.sender}'s mail did not pass DMARC at {authserv_id}"
    return ""


def automatic(message: Message, own_address: str) -> str:
    """Why this mail must start no turn ("" when a person wrote it): the loop guard's
    header checks (RFC 3834's Auto-Submitted, the common auto-responder and list headers,
    bounces and delivery reports, the bot's own address)."""
    submitted = _header(message, "Auto-Submitted").strip().lower()
    if submitted and submitted.split(";")[0].strip() != "no":
        return f"Auto-Submitted: {submitted}"
    for header in ("X-Autoreply", "X-Autorespond", "X-Autoresponder"):
        if _headers(message, header):
            return f"an auto-reply ({header})"
    precedence = _header(message, "Precedence").strip().lower()
    if precedence in LIST_PRECEDENCE:
        return f"Precedence: {precedence}"
    for header in ("List-Id", "List-Unsubscribe"):
        if _headers(message, header):
            return f"a mailing list ({header})"
    if _header(message, "Return-Path").strip() == "<>":
        return "a bounce (empty Return-Path)"
    _, sender = parseaddr(_header(message, "From"))
    sender = _address(sender)
    if not sender:
        return "no sender address"
    if sender.partition("@")[0] in BOUNCE_SENDERS:
        return f"a bounce (from {sender})"
    if message.get_content_type() == "multipart/report":
        return f"a delivery report ({message.get_param('report-type') or 'unknown'})"
    if sender == normal_address(own_address):
        return "the bot's own mail"
    return ""


def body_text(message: EmailMessage) -> str:
    """The mail's text: its text/plain part, else its HTML with the tags taken out."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):  # an unknown charset: the bytes as Latin-1, never lost
        payload = part.get_payload(decode=True)
        content = payload.decode("latin-1") if isinstance(payload, bytes) else ""
    text = str(content)
    if part.get_content_type() == "text/html":
        text = re.sub(r"<(br|/p|/div)\s*/?>", "\n", text, flags=re.IGNORECASE)
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return text.replace("\r\n", "\n")


def new_text(text: str) -> str:
    """What the writer added: up to the quoted mail ("On … wrote:", lines of ``>``) or the
    signature (``-- ``), trimmed."""
    kept: list[str] = []
    for line in text.split("\n"):
        if (line.rstrip() == "--" and line.startswith("-- ")) or _WROTE.match(line.strip()):
            break
        if line.startswith(">"):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def attachments_of(message: EmailMessage) -> list[Attachment]:
    found: list[Attachment] = []
    for part in message.iter_attachments():
        if not isinstance(part, EmailMessage) or part.is_multipart():
            continue
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            continue
        name = part.get_filename() or f"attachment-{len(found) + 1}"
        found.append(Attachment(name.replace("/", "_"), part.get_content_type(), data))
    return found


def reply_subject(subject: str) -> str:
    subject = subject.strip() or "(no subject)"
    return subject if re.match(r"(re|aw|sv)\s*:", subject, re.IGNORECASE) else f"Re: {subject}"


def references_for(references: Sequence[str], parent: str | None) -> list[str]:
    """A reply's References: the parent's, then the parent; a long chain keeps its root."""
    chain = list(dict.fromkeys([*references, *([parent] if parent else [])]))
    if len(chain) > MAX_REFERENCES:
        chain = [chain[0], *chain[-(MAX_REFERENCES - 1) :]]
    return chain


def compose(
    *,
    sender: str,
    sender_name: str,
    to: Sequence[str],
    cc: Sequence[str] = (),
    subject: str,
    text: str,
    message_id: str,
    in_reply_to: str | None,
    references: Sequence[str],
    attachments: Sequence[Attachment] = (),
    now: datetime | None = None,
) -> EmailMessage:
    """A mail from the bot, threaded under ``in_reply_to`` (None: it starts a thread)."""
    mail = EmailMessage(policy=policy.SMTP)
    mail["From"] = Address(sender_name, addr_spec=sender) if sender_name else sender
    mail["To"] = ", ".join(to)
    if cc:
        mail["Cc"] = ", ".join(cc)
    mail["Subject"] = subject
    mail["Date"] = format_datetime(now or datetime.now(UTC))
    mail["Message-ID"] = message_id
    if in_reply_to:
        mail["In-Reply-To"] = in_reply_to
    if references:
        mail["References"] = " ".join(references)
    # RFC 3834: a robot's mail; auto-responders (and Exchange's) must not answer it.
    mail["Auto-Submitted"] = "auto-replied"
    mail["X-Auto-Response-Suppress"] = "All"
    mail.set_content(text or "", cte="quoted-printable" if not text.isascii() else None)
    for attachment in attachments:
        maintype, _, subtype = attachment.mime_type.partition("/")
        mail.add_attachment(
            attachment.data,
            maintype=maintype or "application",
            subtype=subtype or "octet-stream",
            filename=attachment.name,
        )
    return mail
