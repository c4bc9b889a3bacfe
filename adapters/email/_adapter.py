"""The email adapter: mail in over IMAP, replies out over SMTP; a thread is one session.

- **In.** The configured folder is read with IMAP: what is not flagged ``\\Seen`` is new.
  The adapter waits with IDLE (or polls where the server has no IDLE or it failed), and
  takes each new mail in order: a mail is flagged ``\\Seen`` only once its input is
  journaled (or it was refused for good), so a crash in between finds it again — and its
  identity, ``email:<Message-ID>``, has the gateway admit it once. Mail that came while
  the daemon was down is simply unseen at start. Nothing local says what was read.
- **Threads.** ``Message-ID`` / ``In-Reply-To`` / ``References`` map a mail to its thread
  (:mod:`adapters.email._mail`); the session is ``email:<token>``, the token made from the
  thread's root. A person is ``email:<address>`` to roles; ``users`` allows addresses.
- **The loop guard.** No turn for an auto-reply, a bounce or delivery report, a mailing
  list's mail, or the bot's own; and at most ``turns_per_hour`` turns per correspondent,
  so no robot is answered forever whatever its headers say. The bot's mail says
  ``Auto-Submitted: auto-replied``.
- **Out.** The shared :class:`~adapters.chat.ChatRenderer` over the mail port
  (:mod:`adapters.email._port`), without streaming: one reply per turn, threaded.
- **Approvals.** A prompt mail carries a code; a reply ``approve CODE`` (``deny``,
  ``always``) decides it, if its sender may (the gateway checks; a refusal is mailed to
  that person alone). The control room decides them too (its link is in the prompt when
  ``control_room_url`` is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from adapters.base import AdapterStatus, required_secret
from adapters.chat import (
    ButtonClick,
    ChatRenderer,
    Conversation,
    MessageRef,
    RenderOptions,
    SharedFile,
    fetch_files,
)
from adapters.email._config import EmailConfig
from adapters.email._mail import (
    Incoming,
    decision_in,
    parse,
    session_id_for,
    thread_token,
    token_in_bot_id,
    token_of,
    unverified_sender,
)
from adapters.email._port import MailError, MailPort
from adapters.email._store import MailStore, Thread
from netclaw.config import Settings
from netclaw.config.credentials import read_secret
from netclaw.errors import AdapterError, JournalError, NetclawError, SessionUnavailable
from netclaw.gateway import Admission, ChatInput, Inbound
from netclaw.retry import Backoff
from netclaw.security.policy import ChatEvent, Place, dm_audience

if TYPE_CHECKING:
    from adapters.email._imap import Mailbox
    from adapters.email._smtp import SmtpServer

log = logging.getLogger("adapters.email")

DOCS = "docs/channels/email.md"
HOUR_S = 3600.0
MAX_CORRESPONDENTS = 10_000  # the loop guard's memory
MAX_MAIL_BYTES = 40_000_000  # a mail larger than this is not read (the files it could carry: 20 MB each)
# Admission failures that may pass (the journal away, the session unavailable for now): the
# mail stays unread and is taken again at the next look, never acknowledged unjournaled.
NOT_YET: tuple[type[NetclawError], ...] = (JournalError, SessionUnavailable)


def conversation_of(session_id: str) -> Conversation | None:
    token = token_of(session_id)
    return Conversation(token) if token is not None else None


async def _attached(data: bytes, limit: int) -> bytes:
    """An attachment's bytes (already in the mail), refused past ``limit`` like a download."""
    if len(data) > limit:
        raise MailError(f"larger than {limit} bytes")
    return data


class EmailAdapter:
    """See the module docstring."""

    name = "email"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        *,
        release_after_s: float | None = None,
        first_retry_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.start_up = start_up = EmailConfig.of(settings)
        self.options = RenderOptions.of(
            settings, edit_interval_s=0.0, reaction="", release_after_s=release_after_s, streaming=False
        )
        self._store = MailStore(settings.data_dir / "email" / "mail.db")
        self._backoff = Backoff(
            first_s=first_retry_s, max_s=min(60.0, start_up.poll_interval_s * 4), jitter=0.2
        )
        self._port: MailPort | None = None
        self.renderer: ChatRenderer | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._owed: asyncio.Future[None] | None = None
        self._recent: dict[str, deque[float]] = {}  # correspondent -> when their mails started turns
        self._running = False
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> EmailConfig:
        """The current ``email`` section (follows a reload; the servers need a restart)."""
        return EmailConfig.of(self.gateway.settings)

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        try:
            self._imap_password()
            for module, package in (("aioimaplib", "aioimaplib"), ("aiosmtplib", "aiosmtplib")):
                if importlib.util.find_spec(module) is None:
                    raise AdapterError(
                        f"email: the {package} library is not installed; install it with "
                        "pip install 'netclaw[email]'"
                    )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return []

    async def probe(self) -> str:
        self.check()
        from adapters.email._imap import Mailbox

        box = await self._connect(Mailbox)
        mode = "IDLE" if box.idle_works and self.start_up.idle else "polling"
        await box.close()
        smtp = await self._smtp().probe()
        c = self.start_up
        return f"{c.address}: IMAP {c.imap_host}:{c.imap_port} {c.folder} ({mode}), {smtp}"

    async def start(self) -> None:
        self.check()
        from adapters.email._imap import Mailbox

        self._status = AdapterStatus("starting", "connecting to the IMAP server")
        try:
            box = await self._connect(Mailbox)
        except MailError as exc:
            self._status = AdapterStatus("failed", str(exc))
            raise
        await self._store.open()
        c = self.start_up
        self._port = port = MailPort(
            self._store,
            self._smtp().send,
            address=c.address,
            name=c.name,
            control_room_url=c.control_room_url,
        )
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        self.gateway.offer_threads("email", self._open_thread)
        self._receiver = asyncio.create_task(self._receive(box), name="email-receive")
        self._receiver.add_done_callback(self._receiving_ended)
        self._owed = asyncio.ensure_future(self.renderer.resume(conversation_of))
        self._status = AdapterStatus("running", self._running_detail(box.idle_works))
        log.info("email: running as %s", self._status.detail)

    def _running_detail(self, idle: bool) -> str:
        c = self.start_up
        how = "IDLE" if idle and c.idle else f"polling every {c.poll_interval_s:g}s"
        return f"{c.address}, {c.imap_host} {c.folder} ({how})"

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``): an address,
        written to in a new thread."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: session_id_for(c.channel), key=key, since=since
        )

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("email", None)
        receiver, self._receiver = self._receiver, None
        if receiver is not None and not receiver.done():
            receiver.cancel()
            with contextlib.suppress(BaseException):
                await receiver
        owed, self._owed = self._owed, None
        if owed is not None and not owed.done():
            owed.cancel()
            with contextlib.suppress(BaseException):
                await owed
        if self.renderer is not None:
            await self.renderer.stop()
        self._port = None
        await self._store.close()
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- mail in ------------------------------------------------------------------------------

    async def _connect(self, mailbox: type[Mailbox]) -> Mailbox:
        c = self.start_up
        return await mailbox.connect(
            c.imap_host,
            c.imap_port,
            c.imap_tls == "tls",
            c.login,
            self._imap_password(),
            c.folder,
            c.timeout_s,
        )

    async def _receive(self, box: Mailbox) -> None:
        """Take what is new, wait for news, again; a lost connection is made again with
        backoff (status "reconnecting"); a refused login stops here (the supervisor starts
        the adapter afresh)."""
        from adapters.email._imap import Mailbox

        failures = 0
        current: Mailbox | None = box
        try:
            while self._running:
                try:
                    if current is None:
                        current = await self._connect(Mailbox)
                        if self.renderer is not None:
                            self.renderer.reconnected()
                    await self._drain(current)
                    if failures:
                        failures = 0
                        self._status = AdapterStatus("running", self._running_detail(current.idle_works))
                    await current.wait(self.start_up.poll_interval_s, idle=self.start_up.idle)
                except MailError as exc:
                    if current is not None:
                        await current.close()
                        current = None
                    if not exc.transient:
                        raise
                    failures += 1
                    wait = self._backoff.delay(failures - 1)
                    self._status = AdapterStatus("reconnecting", f"{exc}; again in {wait:.0f}s")
                    log.warning("email: %s; connecting again in %.1fs", exc, wait)
                    await asyncio.sleep(wait)
        finally:
            if current is not None:
                await current.close()

    async def _drain(self, box: Mailbox) -> None:
        """Every unseen mail, oldest first; each flagged once taken. One that cannot be taken
        yet (its input not journaled) stops the round: it and those after it are looked at
        again next time. One that fails to be handled is logged and taken as it is."""
        too_large = set(await box.unseen(larger_than=MAX_MAIL_BYTES))
        for uid in await box.unseen():
            if not self._running:
                return
            if uid in too_large:  # never read into memory: taken without a turn
                log.warning("email: mail %s is larger than %d bytes; it starts no turn", uid, MAX_MAIL_BYTES)
                await box.mark_taken(uid)
                continue
            raw = await box.fetch(uid)
            if raw is None:
                continue
            try:
                taken = await self.take(raw)
            except MailError:
                raise
            except Exception:  # one bad mail must not stop the ones after it
                log.exception("email: mail %s could not be handled; it is taken as it is", uid)
                taken = True
            if not taken:  # the rest waits too: a thread's mails are taken in order
                return
            await box.mark_taken(uid)

    def _receiving_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or not self._running:
            return
        exc = task.exception()
        if exc is not None:
            log.error("email: receiving failed: %r", exc)
            self._status = AdapterStatus("failed", f"receiving failed: {type(exc).__name__}: {exc}")

    async def take(self, raw: bytes) -> bool:
        """One mail from the folder. True when it is taken for good (its input journaled,
        or it gets no turn): the caller then flags it ``\\Seen``."""
        renderer, port = self.renderer, self._port
        if not self._running or renderer is None or port is None:
            return False
        mail = parse(raw, port.address)
        if mail.automatic:
            log.info("email: no turn for %s from %s: %s", mail.message_id, mail.sender or "?", mail.automatic)
            return True
        token = await self._thread_of(mail, port.domain)
        event = ChatEvent(
            platform="email", channel_id=port.address, user_id=mail.sender, is_dm=True, mentioned=True
        )
        permit = self.gateway.permit(event)
        if permit is None:
            log.info("email: %s from %s is not allowed (email.users)", mail.message_id, mail.sender)
            return True
        unverified = unverified_sender(mail, self.config.authserv_id)
        if unverified:
            log.warning("email: no turn for %s: %s", mail.message_id, unverified)
            return True
        # Everything that makes the bot write (a turn, a command, a decision) counts.
        if not self._within_bound(mail.sender):
            log.warning(
                "email: %s wrote more than %d mails in an hour; %s starts no turn (email.turns_per_hour)",
                mail.sender,
                self.config.turns_per_hour,
                mail.message_id,
            )
            return True
        decision = decision_in(mail.text)
        if decision is not None:
            self._count(mail.sender)
            await self._decide(mail, token, *decision)
            return True
        known = await self._store.thread(token)
        root = known.root if known is not None else mail.root
        # A client that kept only In-Reply-To: the reply's References still start at the root.
        chain = mail.references or tuple(dict.fromkeys([root, *mail.parents]))
        subject = known.subject if known is not None else mail.subject
        await self._store.save_thread(
            Thread(token, root, subject, mail.reply_to, mail.others, mail.message_id, chain),
            message_id=mail.message_id,
        )
        target = Conversation(token)
        files, refused = await fetch_files(
            [
                SharedFile(a.name, a.mime_type, len(a.data), partial(_attached, a.data))
                for a in mail.attachments
            ],
            "email",
        )
        if refused:
            await renderer.note(target, refused)
        if not mail.text and not files:
            return True
        inbound = Inbound(
            session_id_for(token),
            mail.text,
            user=mail.sender,
            identity=f"email:{mail.message_id}",
            user_name=mail.sender_name or None,
            files=files,
            # A person's mail threads share what is remembered; "team" only when an
            # allowlist vetted who may write.
            place=Place(f"email:{mail.sender}", dm_audience(self.config)),
        )
        try:
            admission = await renderer.submit(
                permit, inbound, target, MessageRef(token, mail.message_id), retry_later=NOT_YET
            )
        except NetclawError as exc:  # not journaled (or cannot even subscribe): left unread
            log.warning("email: %s not taken yet, tried again later: %s", mail.message_id, exc)
            return False
        if admission is not None and not (isinstance(admission, Admission) and admission.duplicate):
            self._count(mail.sender)
        # None: refused, and the person was told why in the thread; taken either way.
        return True

    async def _thread_of(self, mail: Incoming, domain: str) -> str:
        """The thread a mail belongs to: one a mail it names is known in, or one of the bot's
        mails it answers, or the one its root starts."""
        known = await self._store.token_of([mail.message_id, *mail.parents])
        if known is not None:
            return known
        for parent in mail.parents:
            token = token_in_bot_id(parent, domain)
            if token is not None:
                return token
        return thread_token(mail.root)

    async def _decide(self, mail: Incoming, token: str, decision: str, code: str) -> None:
        """A reply deciding an approval by its code; a refusal is mailed to its sender alone."""
        renderer, port = self.renderer, self._port
        assert renderer is not None and port is not None
        here = Thread(token, mail.root, mail.subject, mail.reply_to, (), mail.message_id, mail.references)

        async def respond(text: str) -> None:
            await port.answer_alone(here, mail.sender, mail.message_id, text)

        found = await self._store.code(code)
        if found is None:
            with contextlib.suppress(MailError):
                await respond(
                    f"No request waiting for a decision has the code {code} (decided, expired or mistyped)."
                )
            return
        click = ButtonClick(
            action_id=decision,
            value=found.approval_id,
            user_id=mail.sender,
            message=MessageRef(found.token, found.message_id),
            user_name=mail.sender_name or mail.sender,
            respond=respond,
        )
        await renderer.clicked(click)

    def _within_bound(self, sender: str) -> bool:
        now = time.monotonic()
        recent = self._recent.get(sender)
        if recent is None:
            return True
        while recent and recent[0] < now - HOUR_S:
            recent.popleft()
        return len(recent) < self.config.turns_per_hour

    def _count(self, sender: str) -> None:
        self._recent.setdefault(sender, deque()).append(time.monotonic())
        while len(self._recent) > MAX_CORRESPONDENTS:
            self._recent.pop(next(iter(self._recent)))

    def following(self) -> list[str]:
        return self.renderer.following() if self.renderer is not None else []

    # -- credentials and servers ----------------------------------------------------------------

    def _imap_password(self) -> str:
        return required_secret(
            self.start_up.imap_password_env, what="IMAP password", key="email.imap_password_env", docs=DOCS
        )

    def _smtp(self) -> SmtpServer:
        from adapters.email._smtp import SmtpServer

        c = self.start_up
        if c.smtp_password_env == "":
            password = ""
        else:
            password = read_secret(c.smtp_password_env) or self._imap_password()
        return SmtpServer(c.smtp_host, c.smtp_port, c.smtp_tls, c.smtp_login, password, c.timeout_s)
