"""The gateway: the one surface every channel, the API and the CLI use to reach sessions.

- **Input.** :meth:`Gateway.submit` normalises and checks a message and hands it to
  the SessionManager as the same ``SendUserMessage`` command whatever its channel;
  it returns once the message is durable (and, with ``wait``, once its turn is
  recorded). Chat-platform messages first get a :class:`ChatPermit` from
  :meth:`Gateway.permit` — the channel/user/mention policy, run once per message,
  here and nowhere else.
- **Output.** :meth:`Gateway.subscribe` returns a :class:`~netclaw.sessions.Subscription`:
  an async iterator of typed outputs (:mod:`netclaw.outputs`) whose ``close()``
  unsubscribes without waking a session that has stopped.
- **Reads.** Session listings and views; decoding and replay run in a worker thread,
  never on the I/O loop.

It reads the live settings (a reload applies at once) and never reaches into the
manager's dependencies. Runs on the I/O loop. Adapters depend on the gateway, never
the reverse.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from netclaw import attachments
from netclaw.attachments import IncomingFile, check_files
from netclaw.cluster import Forwarder
from netclaw.commands import DEFAULT_MODEL, HELP_TEXT, ChatCommand, Command, models_text, parse_command
from netclaw.config import ChannelAccess, LiveSettings, Settings
from netclaw.errors import ApprovalNotFound, InvalidInput, NotAnApprover, OutcomeUnknown, SessionUnavailable
from netclaw.history.tokens import fallback_count
from netclaw.identifiers import check_session_id
from netclaw.messages import Attachment, ChatMessage, MessageKind, PriorMessage, bounded_prior, prior_block
from netclaw.outputs import OutputFilter
from netclaw.persistence import Journal, Memory, MemoryStore, Owner, ReminderStore, UsageKey, UsageRow
from netclaw.policy import ChatEvent, Place, audience_of, channel_of, denial_reason
from netclaw.runtime import Reply
from netclaw.sessions import (
    Admission,
    Announce,
    Cancel,
    CompactNow,
    Decide,
    ListApprovals,
    ListUndelivered,
    MarkDelivered,
    ModelChoice,
    PinModel,
    ReportStatus,
    Reset,
    Routed,
    SendUserMessage,
    SessionManager,
    StatusReport,
    Subscription,
    TurnOutcome,
    build_context,
    continuity_notice,
    load_state,
)
from netclaw.system_prompt import system_prompt

__all__ = [
    "Admission",
    "ChatPermit",
    "CommandDone",
    "Gateway",
    "Inbound",
    "SessionSummary",
    "SessionView",
    "StatusReport",
    "Subscription",
    "TurnOutcome",
    "check_session_id",
]

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 200_000
MAX_NAME_CHARS = 80
ACK_TIMEOUT_S = 30.0
CONTROL_TIMEOUT_S = 30.0  # a control command's answer (a compaction may take a while)

T = TypeVar("T")

# (channel, text, key, since) → the session id of the thread opened under the new message
ThreadOpener = Callable[[str, str, str, float], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Inbound:
    session_id: str
    text: str  # may be empty when files come without a comment
    user: str | None = None  # a stable id of the sender
    identity: str | None = None  # inbound event id or idempotency key, if the channel has one
    user_name: str | None = None  # how people call the sender; the model sees it
    prior: Sequence[PriorMessage] = ()  # the conversation before the bot was addressed
    files: Sequence[IncomingFile] = ()
    place: Place | None = None  # where the session lives, when the channel knows better than its id

    def to_json(self) -> dict[str, Any]:
        """As it is forwarded to the node that owns the session (:mod:`netclaw.cluster`)."""
        return {
            "session_id": self.session_id,
            "text": self.text,
            "user": self.user,
            "identity": self.identity,
            "user_name": self.user_name,
            "prior": [{"user": p.user, "user_name": p.user_name, "text": p.text} for p in self.prior],
            "files": [
                {"name": f.name, "mime_type": f.mime_type, "data_base64": base64.b64encode(f.data).decode()}
                for f in self.files
            ],
            "place": self.place.to_dict() if self.place is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Inbound:
        """From :meth:`to_json`; InvalidInput naming what is missing or malformed."""
        try:
            place = data.get("place")
            return cls(
                session_id=str(data["session_id"]),
                text=str(data["text"]),
                user=_optional(data.get("user")),
                identity=_optional(data.get("identity")),
                user_name=_optional(data.get("user_name")),
                prior=tuple(
                    PriorMessage(str(p["user"]), str(p["user_name"]), str(p["text"]))
                    for p in data.get("prior") or ()
                ),
                files=tuple(
                    IncomingFile(
                        str(f["name"]),
                        str(f["mime_type"]),
                        base64.b64decode(str(f["data_base64"]), validate=True),
                    )
                    for f in data.get("files") or ()
                ),
                place=Place.from_dict(dict(place)) if place is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                "inbound", f"a forwarded message is malformed: {type(exc).__name__}: {exc}"
            ) from exc


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ChatPermit:
    """A chat-platform message that passed the access policy (:meth:`Gateway.permit`)."""

    event: ChatEvent


@dataclass(frozen=True, slots=True)
class CommandDone:
    """A chat command ran (no model turn); ``notice`` is its answer, also told to every
    subscriber of the session."""

    session_id: str
    command: Command
    notice: str


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    channel: str
    title: str | None
    phase: str  # a resident session's phase, or "passivated"
    turns: int
    last_activity: float
    resident: bool
    pending: int = 0  # admitted messages not yet answered


@dataclass(frozen=True, slots=True)
class SessionView:
    summary: SessionSummary
    view: str  # "transcript" or "context"
    messages: Sequence[ChatMessage]  # the transcript, or what the model sees now
    queued: Sequence[ChatMessage] = ()  # admitted, waiting for their turn (transcript view)
    failures: Mapping[str, TurnOutcome] = field(default_factory=dict)  # user message id → failed turn


def _check_encodable(field: str, value: str) -> None:
    # JSON can carry lone surrogates ("\\ud800") that no UTF-8 store accepts; refuse them
    # here rather than fail the journal write after the message was routed.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field, f"{field} contains characters that are not valid Unicode ({exc.reason})"
        ) from exc


def check_inbound(inbound: Inbound) -> None:
    check_session_id(inbound.session_id)
    if not inbound.text.strip() and not inbound.files:
        raise InvalidInput("text", "text is empty")
    if len(inbound.text) > MAX_TEXT_CHARS:
        raise InvalidInput("text", f"text is longer than {MAX_TEXT_CHARS} characters")
    _check_encodable("text", inbound.text)
    if inbound.user is not None:
        _check_encodable("user", inbound.user)
    if inbound.user_name is not None:
        if not inbound.user_name.strip() or len(inbound.user_name) > MAX_NAME_CHARS:
            raise InvalidInput("user_name", f"user_name must be 1 to {MAX_NAME_CHARS} characters")
        _check_encodable("user_name", inbound.user_name)
    for prior in inbound.prior:
        _check_encodable("prior", prior.text)
    check_files(inbound.files)
    if inbound.identity is not None:
        _check_encodable("identity", inbound.identity)


class Gateway:
    def __init__(
        self,
        manager: SessionManager,
        journal: Journal,
        live: LiveSettings,
        memory: MemoryStore | None = None,
        reminders: ReminderStore | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self._manager = manager
        self.forwarder = forwarder  # several nodes: input for a session owned elsewhere goes there
        self._journal = journal
        self._live = live
        self._memory = memory
        self._reminders = reminders  # read for /status (the scheduler owns them)
        self._openers: dict[str, ThreadOpener] = {}  # platform → its adapter's thread opener
        self._shown: dict[str, Callable[[str], None]] = {}  # platform → its channel's outbox
        manager.on_reply_owed(self._reply_owed)

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    # -- input --------------------------------------------------------------------------------

    async def owner_of(self, session_id: str) -> Owner | None:
        """The other node that holds the session now (several nodes on one database), or
        None: it is, or may become, resident here."""
        if self._manager.is_resident(session_id):
            return None
        return await self._journal.owner(session_id)

    async def submit(
        self,
        inbound: Inbound,
        *,
        wait: bool = False,
        turn_timeout: float | None = None,
        forwarded: bool = False,
    ) -> tuple[Admission, TurnOutcome | None]:
        """Admit a message; returns once it is durable (and, with ``wait``, once its turn
        is recorded). If durability cannot be confirmed in time the answer is
        :class:`OutcomeUnknown`: sending again with the same identity is safe. A message
        for a session another node owns is submitted there (unless it was ``forwarded``
        here by another node: it is then taken here)."""
        check_inbound(inbound)
        if self.forwarder is not None and not forwarded:
            owner = await self.owner_of(inbound.session_id)
            if owner is not None:
                return await self._submit_on(owner, inbound, wait, turn_timeout)
        files: tuple[Attachment, ...] = ()
        if inbound.files:  # hashed and written in a worker thread, never on the I/O loop
            files = await asyncio.to_thread(
                attachments.store, self.settings.data_dir, inbound.session_id, inbound.files
            )
        loop = asyncio.get_running_loop()
        ack: Reply[Admission] = Reply(loop)
        done: Reply[TurnOutcome] | None = Reply(loop) if wait else None
        self._manager.route(
            inbound.session_id,
            SendUserMessage(
                text=inbound.text.strip() if files else inbound.text,
                ts=time.time(),
                ack=ack,
                identity=inbound.identity,
                user=inbound.user,
                done=done,
                user_name=inbound.user_name.strip() if inbound.user_name else None,
                prior=self._prior_block(inbound),
                files=files,
                place=inbound.place,
            ),
        )
        try:
            admission = await ack.wait(ACK_TIMEOUT_S)
        except TimeoutError as exc:
            raise OutcomeUnknown(
                f"session {inbound.session_id} did not confirm the message within {ACK_TIMEOUT_S:g}s; "
                "it may still be recorded",
                identity=inbound.identity,
            ) from exc
        except OutcomeUnknown:
            raise
        except SessionUnavailable:
            # Not admitted here: another node may have claimed the session meanwhile (its
            # recovery here then failed). Then the message belongs there, once.
            owner = (
                await self._journal.owner(inbound.session_id) if self.forwarder and not forwarded else None
            )
            if owner is None:
                raise
            return await self._submit_on(owner, inbound, wait, turn_timeout)
        if done is None:
            return admission, None
        limit = turn_timeout or self.settings.session.turn_timeout_s + 30
        try:
            outcome = await done.wait(limit)
        except SessionUnavailable as exc:
            raise SessionUnavailable(
                f"message {admission.message_id} is accepted, but its session stopped before "
                f"the turn finished ({exc}); the turn resumes when the session recovers"
            ) from exc
        except TimeoutError as exc:
            raise SessionUnavailable(
                f"message {admission.message_id} is accepted, but its turn did not finish "
                f"within {limit:g}s; its reply will appear in the session"
            ) from exc
        return admission, outcome

    async def _submit_on(
        self, owner: Owner, inbound: Inbound, wait: bool, turn_timeout: float | None
    ) -> tuple[Admission, TurnOutcome | None]:
        assert self.forwarder is not None
        answer = await self.forwarder.submit(
            inbound.session_id,
            owner,
            {"inbound": inbound.to_json(), "wait": wait, "turn_timeout": turn_timeout},
        )
        try:
            admission = Admission(**answer["admission"])
            outcome = answer.get("outcome")
            return admission, TurnOutcome(**outcome) if outcome is not None else None
        except (KeyError, TypeError) as exc:
            raise SessionUnavailable(
                f"node {owner.node_id} answered a forwarded message in an unknown shape ({exc})"
            ) from exc

    def permit(self, event: ChatEvent) -> ChatPermit | None:
        """The chat access policy for one platform message, from the live settings. A
        denied message gets no turn: it is logged with the reason and None returned."""
        reason = denial_reason(self._access(event.platform), event)
        if reason is not None:
            log.info(
                "%s message from %s in %s denied: %s", event.platform, event.user_id, event.channel_id, reason
            )
            return None
        return ChatPermit(event)

    def _prior_block(self, inbound: Inbound) -> str | None:
        """The earlier conversation as the model gets it: the newest messages that fit the
        channel's ``thread_context`` bounds (count and tokens)."""
        if not inbound.prior:
            return None
        platform = channel_of(inbound.session_id)
        access = self._access(platform) if platform in ("slack", "discord") else ChannelAccess()
        max_messages, max_tokens = access.thread_context_messages, access.thread_context_tokens
        kept, left_out = bounded_prior(
            inbound.prior, max_messages=max_messages, max_tokens=max_tokens, count=fallback_count
        )
        return prior_block(kept, left_out=left_out)

    async def submit_chat(self, permit: ChatPermit, inbound: Inbound) -> Admission | CommandDone:
        """A chat-platform message that has its permit (for a session of its platform). A
        chat command runs instead of becoming model input."""
        if channel_of(inbound.session_id) != permit.event.platform:
            raise InvalidInput(
                "session_id",
                f"a {permit.event.platform} message cannot go to session {inbound.session_id[:80]!r}",
            )
        command = parse_command(inbound.text)
        if command is not None:
            check_inbound(inbound)
            return await self.command(inbound.session_id, command, by=inbound.user or permit.event.user_id)
        admission, _ = await self.submit(inbound)
        return admission

    # -- control --------------------------------------------------------------------------------

    async def command(self, session_id: str, command: ChatCommand, *, by: str) -> CommandDone:
        """Run a chat command and tell the session's subscribers its answer."""
        match command.name:
            case "model" if command.argument is not None:
                wanted = None if command.argument.lower() == DEFAULT_MODEL else command.argument
                choice = await self.pin_model(session_id, wanted, by=by, announce=False)
                notice = (
                    f"This conversation uses model {choice.model} ({choice.model_id}) from its next turn."
                )
            case "model":
                report = await self.status(session_id)
                notice = models_text(self.settings, report.model_name, report.pinned)
            case "reset":
                await self.reset(session_id, by=by)
                notice = "Started afresh: I no longer see our earlier conversation (the transcript is kept)."
            case "stop":
                turn = await self.cancel(session_id, by=by)
                notice = f"Stopped turn {turn}." if turn is not None else "Nothing is running."
            case "compact":
                notice = await self.compact(session_id)
            case "status":
                notice = await self.status_text(session_id)
            case "help":
                notice = HELP_TEXT
        self._manager.route(session_id, Announce(notice, "command"))
        return CommandDone(session_id, command.name, notice)

    async def model_of(self, session_id: str) -> ModelChoice:
        """The model a session uses (from its status: a passivated session starts for it)."""
        report = await self.status(session_id)
        available = tuple(self.settings.models.named())
        return ModelChoice(session_id, report.model_name, report.model, report.pinned, available)

    async def pin_model(
        self, session_id: str, model: str | None, *, by: str = "api", announce: bool = True
    ) -> ModelChoice:
        """Choose the session's model from its next turn on (None: back to models.main);
        InvalidInput naming the models when there is no such model. ``announce``: the
        session tells its subscribers in a notice (a chat command's answer is its own)."""
        return await self._ask(session_id, lambda reply: PinModel(model, by, reply, announce))

    async def cancel(self, session_id: str, *, by: str = "api") -> int | None:
        """Stop the running turn (recorded as cancelled; queued messages go on). The turn's
        number, or None when nothing was running."""
        return await self._ask(session_id, lambda reply: Cancel(reply, by))

    async def reset(self, session_id: str, *, by: str = "api") -> None:
        """The model-visible context starts empty; the transcript and memories stay."""
        await self._ask(session_id, lambda reply: Reset(by, reply))

    async def compact(self, session_id: str) -> str:
        """Compact now, whatever the threshold; a sentence saying what happened."""
        return await self._ask(session_id, CompactNow)

    async def status(self, session_id: str) -> StatusReport:
        return await self._ask(session_id, ReportStatus)

    async def status_text(self, session_id: str) -> str:
        report = await self.status(session_id)
        used = round(100 * report.context_tokens / report.context_window) if report.context_window else 0
        named = ""  # main by default: no need to say
        if report.pinned or report.model_name != "main":
            named = f" ({report.model_name}{', chosen for this conversation' if report.pinned else ''})"
        cost = f", {report.cost_today:.4f} {report.currency}" if report.cost_today else ""
        parts = [
            f"Model {report.model}{named}, {report.phase}",
            f"context {report.context_tokens} of {report.context_window} tokens ({used}%)",
            f"{report.turns} turn(s), {report.queued} queued",
            f"today {report.tokens_today:,} tokens{cost}",
        ]
        if report.last_input_tokens:
            share = round(100 * report.last_cache_read_tokens / report.last_input_tokens)
            parts.append(
                f"last prompt {report.last_input_tokens:,} tokens, {share}% from the provider's cache"
            )
        if report.approvals:
            parts.append(f"waiting for approval of {', '.join(report.approvals)}")
        if self._reminders is not None:
            parts.append(f"{await self._reminders.count(session_id)} reminder(s)")
        if self._memory is not None:
            audience = audience_of(session_id, self.settings)
            parts.append(f"{await self._memory.count(audience)} {audience} memorie(s)")
        return "; ".join(parts) + "."

    async def delete(self, session_id: str, *, memories: bool = False) -> bool:
        """Erase a session: its journal, snapshot, listing row and webhook deliveries (and,
        with ``memories``, what was learnt in it). False when there is no such session."""
        check_session_id(session_id)
        if not await self.knows(session_id):
            return False

        async def erase() -> None:
            await self._journal.erase(session_id)
            await asyncio.to_thread(attachments.erase, self.settings.data_dir, session_id)
            if memories and self._memory is not None:
                await self._memory.delete_session(session_id)

        await self._manager.erase(session_id, erase)
        log.info("%s: deleted%s", session_id, " with its memories" if memories else "")
        return True

    async def memories(
        self, *, query: str | None = None, audience: str | None = None, session_id: str | None = None
    ) -> list[Memory]:
        """Memories for people: matching ``query``, or newest first; with their source."""
        if self._memory is None:
            return []
        return await self._memory.listing(query=query, audience=audience, session_id=session_id)

    async def forget(self, memory_id: int) -> bool:
        return self._memory is not None and await self._memory.delete(memory_id)

    def announce(self, session_id: str, text: str, kind: str) -> None:
        """Tell the session's subscribers something (a ``notice``); no turn, nothing stored."""
        check_session_id(session_id)
        self._manager.route(session_id, Announce(text, kind))

    # -- the outbox: chat replies shown exactly once -----------------------------------------

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        """Chat sessions of ``platform`` whose recorded replies are not all shown yet."""
        return await self._journal.sessions_owing_replies(platform)

    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]:
        """(turn, text, recorded at) of each reply the conversation is still owed."""
        return await self._ask(session_id, ListUndelivered)

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        """The channel showed the reply of ``turn``; False if it was not owed (any more)."""
        return await self._ask(session_id, lambda reply: MarkDelivered(turn, tuple(message_ids), reply))

    def offer_threads(self, platform: str, opener: ThreadOpener | None) -> None:
        """A chat adapter that can open threads (delivery targets) offers it here while it
        runs (None withdraws it)."""
        if opener is None:
            self._openers.pop(platform, None)
        else:
            self._openers[platform] = opener

    async def open_thread(self, platform: str, channel: str, text: str, *, key: str, since: float) -> str:
        """Post ``text`` as a new message in ``channel`` of ``platform``; the session id of the
        thread under it. The same ``key`` again opens no second thread where the platform
        can tell (see ``ChatPort.open_thread``)."""
        opener = self._openers.get(platform)
        if opener is None:
            raise SessionUnavailable(f"{platform} is not connected, so nothing can be delivered to {channel}")
        return await opener(channel, text, key, since)

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        """``listener(session_id)`` on the loop whenever a session of ``platform`` records a
        reply (its channel follows the session and posts it, whether or not anyone was
        watching), until :meth:`unwatch_owed_replies`."""
        self._shown[platform] = listener

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        """The channel stopped here (its adapter stopped, or another node took it over)."""
        if self._shown.get(platform) == listener:
            del self._shown[platform]

    def _reply_owed(self, session_id: str) -> None:
        platform = channel_of(session_id)
        listener = self._shown.get(platform)
        if listener is not None:
            listener(session_id)
        elif self.forwarder is not None:
            # Several nodes: the platform is connected on another one (Discord's one
            # connection). Let the session go, so the node that shows its replies takes it
            # over and posts this one (its outbox looks for owed replies every few seconds).
            log.info(
                "%s: recorded a reply %s is not connected here for; handing the session over",
                session_id,
                platform,
            )
            self._manager.passivate(session_id)

    @property
    def cluster_poll_s(self) -> float | None:
        """Several nodes: how often a channel looks for replies owed in sessions another node
        recorded (None on one node, where every reply is recorded here)."""
        return self.settings.cluster.lease_s / 3 if self.forwarder is not None else None

    # -- approvals ----------------------------------------------------------------------------

    async def approvals(self, session_id: str) -> list[dict[str, object]]:
        """The session's tool calls waiting for a decision (a session with one never sleeps,
        so a session that is not resident has none)."""
        check_session_id(session_id)
        if not self._manager.is_resident(session_id):
            return []
        found = await self._ask(session_id, ListApprovals)
        return [{**a, "session_id": session_id} for a in found]

    async def all_approvals(self) -> list[dict[str, object]]:
        """Pending approvals across sessions, each with its ``session_id``."""
        found: list[dict[str, object]] = []
        for session_id in sorted(self._manager.resident()):
            with contextlib.suppress(SessionUnavailable):
                found += await self.approvals(session_id)
        return found

    async def decide(
        self, session_id: str, approval_id: str, decision: str, *, by: str, approver: str | None = None
    ) -> str:
        """Decide a pending tool call: ``approve``, ``deny`` or ``always``. ``approver`` is the
        platform user who clicked (checked against the audience's approvers); None for the
        control-token holder. Raises ApprovalNotFound / ApprovalClosed / NotAnApprover."""
        if decision not in ("approve", "deny", "always"):
            raise InvalidInput("decision", f"decision must be approve, deny or always (got {decision!r})")
        if not await self.knows(session_id):
            raise ApprovalNotFound(f"no pending approval {approval_id!r} in session {session_id}")
        return await self._ask(session_id, lambda reply: Decide(approval_id, decision, by, approver, reply))

    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str:
        """A button press: only people who may talk to the session (and, when the audience
        names ``approvers``, only those) decide."""
        if channel_of(session_id) != platform:
            raise NotAnApprover(f"a {platform} user cannot decide in session {session_id}")
        access = self._access(platform)
        if access.users is not None and user_id not in access.users:
            raise NotAnApprover(f"{user_name} may not talk to this session, so may not decide")
        return await self.decide(session_id, approval_id, decision, by=user_name, approver=user_id)

    async def find_approval(self, approval_id: str) -> str | None:
        """The session holding ``approval_id`` (for the CLI, which names only the id)."""
        for item in await self.all_approvals():
            if item["id"] == approval_id:
                return str(item["session_id"])
        return None

    async def _ask(self, session_id: str, make: Callable[[Reply[T]], Routed]) -> T:
        check_session_id(session_id)
        reply: Reply[T] = Reply(asyncio.get_running_loop())
        self._manager.route(session_id, make(reply))
        try:
            return await reply.wait(CONTROL_TIMEOUT_S)
        except TimeoutError as exc:
            raise SessionUnavailable(
                f"session {session_id} did not answer within {CONTROL_TIMEOUT_S:g}s; try again"
            ) from exc

    def _access(self, platform: str) -> ChannelAccess:
        settings = self.settings
        if platform == "slack":
            return settings.slack
        if platform == "discord":
            return settings.discord
        raise ValueError(f"no chat access policy for platform {platform!r}")

    # -- output -------------------------------------------------------------------------------

    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription:
        """Watch a session's outputs (it starts if it is not resident). Close the
        subscription when done; that never wakes a session that has stopped."""
        check_session_id(session_id)
        return self._manager.subscribe(session_id, mask)

    # -- reads --------------------------------------------------------------------------------

    async def usage(self, by: UsageKey, since: float | None = None) -> list[UsageRow]:
        """Provider tokens from the journal, per session, UTC day or model."""
        return await self._journal.usage(by, since)

    async def list_sessions(self) -> list[SessionSummary]:
        resident = self._manager.resident()
        rows = await self._journal.list_sessions()
        return [
            SessionSummary(
                id=r.id,
                channel=r.channel,
                title=r.title,
                phase=resident[r.id].value if r.id in resident else "passivated",
                turns=r.turns,
                last_activity=r.last_activity,
                resident=r.id in resident,
                pending=r.pending,
            )
            for r in rows
        ]

    async def get_session(self, session_id: str, *, context: bool = False) -> SessionView | None:
        """One session: its transcript (and queued input), or with ``context`` what the
        model sees now (under the live system prompt). None when it does not exist."""
        check_session_id(session_id)
        state = await load_state(self._journal, session_id)
        if state.seq == 0:
            return None
        phase = self._manager.resident().get(session_id)
        summary = SessionSummary(
            id=state.session_id,
            channel=state.channel,
            title=state.title,
            phase=phase.value if phase is not None else "passivated",
            turns=state.turns,
            last_activity=state.last_activity,
            resident=phase is not None,
            pending=state.pending_inputs,
        )
        if context:
            messages = await asyncio.to_thread(build_context, state, system_prompt(self.settings))
            resumed_at = self._manager.continuity_of(session_id)
            if resumed_at is not None:  # the tail the next model call records, until it has
                messages.append(continuity_notice(resumed_at, time.time()))
            return SessionView(summary, "context", messages)
        said = [m for m in state.transcript if m.kind is not MessageKind.CONTEXT]  # not netclaw's notes
        return SessionView(summary, "transcript", said, state.inbox, state.failures)

    async def knows(self, session_id: str) -> bool:
        """Is this an existing session (a thread the bot already takes part in)?"""
        if self._manager.is_resident(session_id):
            return True
        return await self._journal.get_session(session_id) is not None

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]:
        """Sessions with admitted messages not yet answered (e.g. interrupted by a restart)."""
        found = await self._journal.sessions_with_pending_input()
        return [s for s in found if channel is None or channel_of(s) == channel]

    def resident_phases(self) -> dict[str, str]:
        return {sid: phase.value for sid, phase in self._manager.resident().items()}
