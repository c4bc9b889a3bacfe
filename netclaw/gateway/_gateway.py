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
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from netclaw import attachments
from netclaw.attachments import IncomingFile, check_files
from netclaw.audit import AuditEntry
from netclaw.cluster import Routing
from netclaw.commands import (
    DEFAULT_MODEL,
    HELP_TEXT,
    ChatCommand,
    Command,
    PromptCommand,
    PromptSyntaxError,
    models_text,
    parse_command,
    parse_prompt,
)
from netclaw.config import ChannelAccess, LiveSettings, Settings
from netclaw.context_view import offered_tools
from netclaw.errors import (
    ApprovalNotFound,
    InvalidInput,
    LeaseLost,
    NetclawError,
    NotAnApprover,
    NotPermitted,
    OutcomeUnknown,
    QuestionNotFound,
    SessionMoved,
    SessionUnavailable,
)
from netclaw.history.tokens import fallback_count
from netclaw.identifiers import check_session_id
from netclaw.lineage import (
    ChildRecord,
    ChildReport,
    ChildTask,
    SpawnRequest,
    depth_of,
    describe,
    gone_report,
    is_descendant,
    report_text,
)
from netclaw.mcp import McpHub, PromptExpansion, expand_prompt
from netclaw.messages import Attachment, ChatMessage, MessageKind, PriorMessage, bounded_prior, prior_block
from netclaw.outputs import OutputFilter
from netclaw.persistence import (
    AccessLogic,
    Journal,
    Memory,
    MemoryStore,
    Node,
    Owner,
    ReminderStore,
    SessionQuery,
    SessionRow,
    UsageKey,
    UsageRow,
)
from netclaw.policy import Audience, ChatEvent, Place, audience_of, channel_of, denial_reason
from netclaw.redact import Redacted, merge, notice, redact, redact_identity, redact_prior
from netclaw.roles import may, may_command, refusal, role_for, speaker_of
from netclaw.runtime import Reply
from netclaw.sessions import (
    Admission,
    Announce,
    Cancel,
    CompactNow,
    Decide,
    DetachChild,
    ListApprovals,
    ListChildren,
    ListUndelivered,
    MarkDelivered,
    ModelChoice,
    OwedReports,
    PendingApproval,
    PinModel,
    RecordSpawn,
    ReportStatus,
    Reset,
    Routed,
    SendUserMessage,
    SessionManager,
    SpawnAnswer,
    StatusReport,
    Subscription,
    TurnOutcome,
    build_context,
    continuity_notice,
    load_state,
)
from netclaw.skills import LiveSkills, system_prompt, visible_skills
from netclaw.tools import Questions, ToolRegistry
from netclaw.trust import label

__all__ = [
    "Admission",
    "ChatPermit",
    "CommandDone",
    "Gateway",
    "Inbound",
    "PendingApproval",
    "SessionSummary",
    "SessionView",
    "SessionsFound",
    "StatusReport",
    "Subscription",
    "ThreadOpener",
    "TurnOutcome",
    "check_inbound",
    "check_session_id",
    "parse_prompt_or_fail",
]

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 200_000
MAX_NAME_CHARS = 80
ACK_TIMEOUT_S = 30.0
CONTROL_TIMEOUT_S = 30.0  # a control command's answer (a compaction may take a while)

T = TypeVar("T")

# (channel, text, key, since) → the session id of the thread opened under the new message
ThreadOpener = Callable[[str, str, str, float], Awaitable[str]]  # a channel opens a thread: its id


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
    # Who sent it when the channel authenticated them (the API: "token:NAME", "control") and
    # the role that comes with that (a token's own); chat platforms name their users instead.
    speaker: str | None = None
    speaker_role: str | None = None
    # A sub-agent's task (its first input, from its parent) or report (to its parent); never
    # from outside: only netclaw.subagents makes these.
    subagent: ChildTask | ChildReport | None = None

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
            "speaker": self.speaker,
            "speaker_role": self.speaker_role,
            "subagent": _subagent_json(self.subagent),
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
                speaker=_optional(data.get("speaker")),
                speaker_role=_optional(data.get("speaker_role")),
                subagent=_subagent_of(data.get("subagent")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                "inbound", f"a forwarded message is malformed: {type(exc).__name__}: {exc}"
            ) from exc


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def _subagent_json(value: ChildTask | ChildReport | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"task" if isinstance(value, ChildTask) else "report": value.to_dict()}


def _subagent_of(data: Mapping[str, Any] | None) -> ChildTask | ChildReport | None:
    if not data:
        return None
    if "task" in data:
        return ChildTask.from_dict(data["task"])
    return ChildReport.from_dict(data["report"])


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
class SessionsFound:
    """A page of the session listing (:meth:`Gateway.find_sessions`)."""

    sessions: list[SessionSummary]
    total: int  # matching, on every page
    channels: list[str]  # every channel that has a session


@dataclass(frozen=True, slots=True)
class SessionView:
    summary: SessionSummary
    view: str  # "transcript" or "context"
    messages: Sequence[ChatMessage]  # the transcript, or what the model sees now
    queued: Sequence[ChatMessage] = ()  # admitted, waiting for their turn (transcript view)
    failures: Mapping[str, TurnOutcome] = field(default_factory=dict)  # user message id → failed turn
    # Where the model's view begins in ``messages`` (transcript view) and why.
    kept_from: int = 0
    compactions: int = 0
    trimmed: bool = False
    summarized: bool = False
    resets: int = 0
    tools: Sequence[str] = ()  # context view: the tools the model is offered


def parse_prompt_or_fail(text: str) -> PromptCommand | None:
    """The ``/prompt`` command ``text`` is (None: not one); InvalidInput when unreadable."""
    try:
        return parse_prompt(text)
    except PromptSyntaxError as exc:
        raise InvalidInput("text", str(exc)) from exc


def _summary(row: SessionRow, resident: Mapping[str, Any]) -> SessionSummary:
    phase = resident.get(row.id)
    return SessionSummary(
        id=row.id,
        channel=row.channel,
        title=row.title,
        phase=phase.value if phase is not None else "passivated",
        turns=row.turns,
        last_activity=row.last_activity,
        resident=phase is not None,
        pending=row.pending,
    )


def _check_encodable(field: str, value: str) -> None:
    # JSON can carry lone surrogates ("\\ud800") that no UTF-8 store accepts; refuse them
    # here rather than fail the journal write after the message was routed.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field, f"{field} contains characters that are not valid Unicode ({exc.reason})"
        ) from exc


def redact_inbound(inbound: Inbound) -> tuple[Inbound, tuple[str, ...]]:
    """The message as it may be kept: secrets out of its text, its sender's names and ids,
    its replay identity and the conversation it comes with (its files are cleaned where
    they are stored: :func:`netclaw.attachments.save`); what was found."""
    text = redact(inbound.text)
    prior, found = redact_prior(inbound.prior)
    found = merge(text.kinds, found)

    def cleaned(value: str | None, clean: Callable[[str], Redacted] = redact) -> str | None:
        nonlocal found
        if value is None:
            return None
        done = clean(value)
        found = merge(found, done.kinds)
        return done.text

    user, user_name, speaker = cleaned(inbound.user), cleaned(inbound.user_name), cleaned(inbound.speaker)
    identity = cleaned(inbound.identity, redact_identity)
    if not found:
        return inbound, ()
    return dataclasses.replace(
        inbound,
        text=text.text,
        prior=prior,
        user=user,
        user_name=user_name,
        speaker=speaker,
        identity=identity,
    ), found


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
        routing: Routing | None = None,
        access: AccessLogic | None = None,
        mcp: McpHub | None = None,
        questions: Questions | None = None,
        tools: ToolRegistry | None = None,
        skills: LiveSkills | None = None,
    ) -> None:
        self._manager = manager
        self._skills = skills or LiveSkills()  # the daemon's: swapped on reload
        self._tools = tools  # read for the context view (what the model is offered)
        self._mcp = mcp  # MCP servers: their prompts are `/prompt` commands
        self._questions = questions  # what running tools ask people (answered here)
        self.access = access  # the audit table and API tokens (netclaw/persistence/_access.py)
        self.routing = routing  # several nodes: a session's input goes to the node serving it
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
        """The other node that serves the session now (several nodes on one database), or
        None: it is, or may become, resident here."""
        if self.routing is not None:
            return await self.routing.where(session_id)
        return None

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
        for a session another node serves is submitted there (unless it was ``forwarded``
        here by another node: it is then taken here)."""
        check_inbound(inbound)
        if self.routing is None or forwarded:
            return await self._submit_here(inbound, wait, turn_timeout)
        return await self.routing.route(
            inbound.session_id,
            lambda owner: self._submit_on(owner, inbound, wait, turn_timeout),
            lambda: self._submit_here(inbound, wait, turn_timeout),
        )

    async def _submit_here(
        self, inbound: Inbound, wait: bool, turn_timeout: float | None
    ) -> tuple[Admission, TurnOutcome | None]:
        speaker = speaker_of(inbound.session_id, inbound.user, inbound.speaker)
        role = role_for(self.settings, speaker, inbound.speaker_role)
        if not may(self.settings, role, "chat"):
            raise NotPermitted(refusal(role, "sending messages that start turns"))
        # Secrets out before anything is stored or shown to a model (netclaw/redact.py); the
        # speaker as recorded is the redacted one (its role was found from the real one).
        identity = inbound.identity  # as the sender knows it: what a retry must repeat
        inbound, found = redact_inbound(inbound)
        speaker = speaker_of(inbound.session_id, inbound.user, inbound.speaker)
        files: tuple[Attachment, ...] = ()
        if inbound.files:  # scanned, hashed and written in a worker thread, never on the I/O loop
            stored = await asyncio.to_thread(
                attachments.save, self.settings.data_dir, inbound.session_id, inbound.files
            )
            files, found = stored.files, merge(found, stored.redacted)
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
                speaker=speaker,
                speaker_role=role,
                subagent=inbound.subagent,
            ),
        )
        try:
            admission = await ack.wait(ACK_TIMEOUT_S)
        except TimeoutError as exc:
            raise OutcomeUnknown(
                f"session {inbound.session_id} did not confirm the message within {ACK_TIMEOUT_S:g}s; "
                "it may still be recorded",
                identity=identity,
            ) from exc
        except (OutcomeUnknown, SessionMoved):
            raise
        except LeaseLost as exc:  # refused, not written: another node owns the session now
            if self.routing is None:
                raise
            raise SessionMoved(inbound.session_id, str(exc)) from exc
        except SessionUnavailable:
            # Not admitted here: another node may have claimed the session meanwhile (its
            # recovery here then failed). Then the message belongs there, once.
            if self.routing is not None and await self._journal.owner(inbound.session_id) is not None:
                raise SessionMoved(inbound.session_id, "another node took it first") from None
            raise
        if found:
            log.info(
                "%s: redacted %s from message %s", inbound.session_id, ", ".join(found), admission.message_id
            )
            self._manager.route(inbound.session_id, Announce(notice(found), "redaction"))
        if done is None:
            return admission, None
        limit = turn_timeout or self.settings.session.turn_timeout_s + 30
        try:
            outcome = await done.wait(limit)
        except SessionUnavailable as exc:
            if isinstance(exc, SessionMoved) and self.routing is not None and inbound.identity is not None:
                # Handed off before this message's turn ran here: its next node runs it, and
                # the same identity there waits for that turn instead of recording it again.
                raise
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
        assert self.routing is not None
        answer = await self.routing.forwarder.submit(
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
        prompt = parse_prompt_or_fail(inbound.text)
        if prompt is not None:
            check_inbound(inbound)
            submitted = await self.submit_prompt(inbound, prompt)
            return submitted if isinstance(submitted, CommandDone) else submitted[0]
        command = parse_command(inbound.text)
        if command is not None:
            check_inbound(inbound)
            role = role_for(self.settings, f"{permit.event.platform}:{permit.event.user_id}")
            if not may_command(self.settings, role, command.name):
                raise NotPermitted(refusal(role, f"/{command.name}"))
            return await self.command(inbound.session_id, command, by=inbound.user or permit.event.user_id)
        admission, _ = await self.submit(inbound)
        return admission

    async def submit_prompt(
        self, inbound: Inbound, command: PromptCommand, *, wait: bool = False
    ) -> tuple[Admission, TurnOutcome | None] | CommandDone:
        """``/prompt``: an MCP server's prompt, filled in, is submitted as the message; a
        listing, a missing argument or a failure is answered with a notice instead."""
        check_session_id(inbound.session_id)
        role = role_for(
            self.settings, speaker_of(inbound.session_id, inbound.user, inbound.speaker), inbound.speaker_role
        )
        if not may_command(self.settings, role, "prompt"):
            raise NotPermitted(refusal(role, "/prompt"))
        if self._mcp is None or not self._mcp.servers:
            expansion = PromptExpansion(notice="No MCP servers are configured, so there are no prompts.")
        elif audience_of(inbound.session_id, self.settings, inbound.place) == "public":
            expansion = PromptExpansion(notice="MCP prompts are not available in public conversations.")
        else:
            expansion = await expand_prompt(self._mcp, command)
        if expansion.notice is not None or expansion.text is None:
            notice = expansion.notice or "The prompt came back empty."
            self._manager.route(inbound.session_id, Announce(notice, "command"))
            return CommandDone(inbound.session_id, "prompt", notice)
        return await self.submit(
            replace(inbound, text=expansion.text, files=(*inbound.files, *expansion.files)), wait=wait
        )

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
                named = {name: model.model for name, model in self.settings.models.named().items()}
                notice = models_text(named, report.model_name, report.pinned)
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
            case "skills":
                notice = await self.skills_text(session_id)
            case "agents":
                records = await self.children(session_id)
                notice = describe(records, self.resident_phases())
            case "help":
                notice = HELP_TEXT
            case "prompt":
                notice = (
                    "Send an MCP server's prompt with /prompt server:name args; /prompt alone lists them."
                )
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
            count = await self._memory.count(audience)
            parts.append(f"{count} {audience} {'memory' if count == 1 else 'memories'}")
        return "; ".join(parts) + "."

    # -- questions from running tools (MCP elicitation, sampling's go-ahead) ------------------

    def questions(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The open questions (of one session, or all on this node), oldest first."""
        if session_id is not None:
            check_session_id(session_id)
        found = self._questions.of(session_id) if self._questions is not None else []
        return [q.to_json() for q in sorted(found, key=lambda q: q.asked_at)]

    def answer_question(
        self,
        session_id: str,
        question_id: str,
        action: str,
        content: Mapping[str, Any] | None = None,
        *,
        by: str,
        approver: str | None = None,
    ) -> dict[str, Any]:
        """Answer a question a running tool asked: ``accept`` (with the form's ``content``),
        ``decline`` or ``cancel``. ``approver`` (a platform user id) must be one of the
        audience's approvers when it names any; the control-token holder passes None."""
        check_session_id(session_id)
        if self._questions is None:
            raise QuestionNotFound(f"no open question {question_id!r} in session {session_id}")
        pending = self._questions.answer(
            session_id,
            question_id,
            action,
            content,
            by=by,
            approver=approver,
            approvers=lambda audience: self.settings.audience(audience).approvers,
        )
        log.info("%s: question %s (%s) answered %s by %s", session_id, question_id, pending.tool, action, by)
        return {"question_id": question_id, "action": action, "by": by}

    async def skills_text(self, session_id: str) -> str:
        """The ``/skills`` answer: the skills this session's model sees (its audience's)."""
        report = await self.status(session_id)
        audience = cast(Audience, report.audience)
        visible = visible_skills(self._skills.current, self.settings, audience)
        if not visible:
            return f"No skills for {audience} sessions (skills.dirs, audiences.{audience}.skills)."
        listed = "\n".join(f"- {s.name}: {_shorten(s.one_line, 160)}" for s in visible)
        return f"Skills I can follow here ({len(visible)}):\n{listed}"

    async def audit(self, kind: str, actor: str, session_id: str | None = None, **detail: Any) -> None:
        """Append to the audit trail what happened outside sessions (see netclaw/audit.py)."""
        if self.access is not None:
            await self.access.record(AuditEntry(time.time(), kind, actor, session_id, detail))

    async def delete(self, session_id: str, *, memories: bool = False, by: str = "api") -> bool:
        """Erase a session: its journal, snapshot, listing row and webhook deliveries (and,
        with ``memories``, what was learnt in it), and its sub-agents with it; a deleted
        sub-agent's parent is told it is over. False when there is no such session."""
        check_session_id(session_id)
        if not await self.knows(session_id):
            return False
        family = [r.id for r in await self._journal.list_sessions() if is_descendant(r.id, session_id)]
        for doomed in [*sorted(family, key=depth_of, reverse=True), session_id]:  # the deepest first

            async def erase(doomed: str = doomed) -> None:
                if self.access is not None:  # the session's trail outlives its journal
                    await self.access.keep_trail_of(doomed)
                await self._journal.erase(doomed)
                await asyncio.to_thread(attachments.erase, self.settings.data_dir, doomed)
                if memories and self._memory is not None:
                    await self._memory.delete_session(doomed)

            await self._manager.erase(doomed, erase)
            log.info("%s: deleted%s", doomed, " with its memories" if memories else "")
            await self.audit("session_deleted", by, doomed, memories=memories)
        gone = gone_report(session_id, by)
        if gone is not None:  # its parent stays: the child no longer counts as running there
            with contextlib.suppress(NetclawError):
                await self.submit(
                    Inbound(
                        gone.parent,
                        report_text(gone, label),
                        user=session_id,
                        identity=gone.identity,
                        subagent=gone,
                    )
                )
        return True

    async def memories(
        self, *, query: str | None = None, audience: str | None = None, session_id: str | None = None
    ) -> list[Memory]:
        """Memories for people: matching ``query``, or newest first; with their source."""
        if self._memory is None:
            return []
        return await self._memory.listing(query=query, audience=audience, session_id=session_id)

    async def forget(self, memory_id: int, *, by: str = "api") -> bool:
        deleted = self._memory is not None and await self._memory.delete(memory_id)
        if deleted:
            await self.audit("memory_deleted", by, memory_id=memory_id)
        return deleted

    def announce(self, session_id: str, text: str, kind: str) -> None:
        """Tell the session's subscribers something (a ``notice``); no turn, nothing stored."""
        check_session_id(session_id)
        self._manager.route(session_id, Announce(text, kind))

    # -- sub-agents (netclaw.subagents drives them) --------------------------------------------

    async def record_spawn(self, parent: str, turn: int, call_id: str, request: SpawnRequest) -> SpawnAnswer:
        """Record a child in ``parent`` (or find the one ``call_id`` spawned): SubagentRefused
        when it may not."""
        return await self._ask(parent, lambda reply: RecordSpawn(turn, call_id, request, reply))

    async def detach_child(self, parent: str, n: int) -> bool:
        """``parent`` stops waiting for its child ``n`` (False: the child reported already)."""
        return await self._ask(parent, lambda reply: DetachChild(n, reply))

    async def children(self, session_id: str) -> list[ChildRecord]:
        """The sub-agents ``session_id`` spawned, oldest first."""
        return await self._ask(session_id, ListChildren)

    async def owed_reports(self, child: str) -> list[ChildReport]:
        """A sub-agent's answers its parent has not admitted yet."""
        return await self._ask(child, OwedReports)

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
        elif self.routing is not None:
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
        return self.settings.cluster.lease_s / 3 if self.routing is not None else None

    # -- approvals ----------------------------------------------------------------------------

    async def approvals(self, session_id: str) -> list[PendingApproval]:
        """The session's tool calls waiting for a decision (a session with one never sleeps,
        so a session that is not resident has none)."""
        check_session_id(session_id)
        if not self._manager.is_resident(session_id):
            return []
        return await self._ask(session_id, ListApprovals)

    async def all_approvals(self) -> list[PendingApproval]:
        """Pending approvals across sessions."""
        found: list[PendingApproval] = []
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
        role = role_for(self.settings, f"{platform}:{user_id}")
        if role is not None and not may(self.settings, role, "approve"):
            raise NotAnApprover(f"{user_name} may not decide on tool calls: {refusal(role, 'approving')}")
        return await self.decide(session_id, approval_id, decision, by=user_name, approver=user_id)

    async def find_approval(self, approval_id: str) -> str | None:
        """The session holding ``approval_id`` (for the CLI, which names only the id)."""
        for item in await self.all_approvals():
            if item.id == approval_id:
                return item.session_id
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

    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]:
        """Provider tokens from the journal, per session, UTC day or model (of ``sessions``
        only, when given)."""
        return await self._journal.usage(by, since, sessions)

    async def cluster_nodes(self) -> list[Node]:
        """The nodes sharing the database (empty on one node with an embedded journal)."""
        return await self._journal.nodes()

    async def list_sessions(self) -> list[SessionSummary]:
        resident = self._manager.resident()
        return [_summary(r, resident) for r in await self._journal.list_sessions()]

    async def find_sessions(
        self, *, text: str = "", channel: str = "", phase: str = "", offset: int = 0, limit: int = 50
    ) -> SessionsFound:
        """A page of the listing, the most recently active first: ``text`` in the id or
        title, one ``channel``, one ``phase`` ("passivated": not resident here)."""
        resident = self._manager.resident()
        query = SessionQuery(text, channel, offset=offset, limit=limit)
        if phase == "passivated":
            query = replace(query, excluding=tuple(resident))
        elif phase:
            query = replace(query, only=[sid for sid, p in resident.items() if p.value == phase])
        found = await self._journal.find_sessions(query)
        return SessionsFound([_summary(r, resident) for r in found.rows], found.total, found.channels)

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
            settings = self.settings
            prompt = system_prompt(
                settings, audience_of(session_id, settings, state.place), self._skills.current
            )
            messages = await asyncio.to_thread(build_context, state, prompt)
            resumed_at = self._manager.continuity_of(session_id)
            if resumed_at is not None:  # the tail the next model call records, until it has
                messages.append(continuity_notice(resumed_at, time.time()))
            tools = offered_tools(session_id, state.place, settings, self._tools)
            return SessionView(summary, "context", messages, tools=tools)
        # The transcript is what was said: netclaw's notes to the model (a turn's tail) are not.
        note = MessageKind.CONTEXT
        said = [m for m in state.transcript if m.kind is not note]
        return SessionView(
            summary,
            "transcript",
            said,
            state.inbox,
            state.failures,
            kept_from=sum(1 for m in state.transcript[: state.kept_from] if m.kind is not note),
            compactions=state.compactions,
            trimmed=state.trimmed,
            summarized=state.summary is not None,
            resets=state.resets,
        )

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


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
