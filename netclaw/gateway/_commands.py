"""Chat commands and their answers — :class:`CommandService`.

A chat command (``/stop``, ``/reset``, ``/compact``, ``/model``, ``/status``, ``/skills``,
``/agents``, ``/help``, parsed by :mod:`netclaw.commands`) runs instead of becoming model
input: it is carried out through the controls and reads, and its answer, a sentence for
people, is told to every subscriber of the session (:class:`~._views.CommandDone`).
``/prompt`` submits an MCP server's prompt, filled in, as the message.

Who uses it (as the ``Commands`` role): the chat role (``_chat``: a chat message that is a
command, once the chat policy and the sender's role let it through) and the control API
(a message that is a command, after the caller's role). Runs on the I/O loop.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from netclaw.commands import DEFAULT_MODEL, HELP_TEXT, ChatCommand, PromptCommand, models_text
from netclaw.config import LiveSettings, Settings
from netclaw.errors import NotPermitted
from netclaw.gateway._control import ControlService
from netclaw.gateway._inbound import Inbound
from netclaw.gateway._intake import IntakeService
from netclaw.gateway._reads import ReadService
from netclaw.gateway._views import CommandDone
from netclaw.identifiers import check_session_id
from netclaw.lineage import describe
from netclaw.mcp import McpHub, PromptExpansion, expand_prompt
from netclaw.persistence import MemoryStore, ReminderStore
from netclaw.security.policy import Audience, audience_of
from netclaw.security.roles import may_command, refusal, role_for, speaker_of
from netclaw.sessions import Admission, Announce, SessionManager, TurnOutcome
from netclaw.skills import LiveSkills, visible_skills


class CommandService:
    def __init__(
        self,
        manager: SessionManager,
        live: LiveSettings,
        intake: IntakeService,
        control: ControlService,
        reads: ReadService,
        *,
        memory: MemoryStore | None = None,
        reminders: ReminderStore | None = None,
        mcp: McpHub | None = None,
        skills: LiveSkills | None = None,
    ) -> None:
        self._manager = manager
        self._live = live
        self._intake = intake
        self._control = control
        self._reads = reads
        self._memory = memory  # counted for /status
        self._reminders = reminders  # counted for /status (the scheduler owns them)
        self._mcp = mcp  # MCP servers: their prompts are `/prompt` commands
        self._skills = skills or LiveSkills()  # the daemon's: swapped on reload

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    async def command(self, session_id: str, command: ChatCommand, *, by: str) -> CommandDone:
        """Run a chat command and tell the session's subscribers its answer."""
        match command.name:
            case "model" if command.argument is not None:
                wanted = None if command.argument.lower() == DEFAULT_MODEL else command.argument
                choice = await self._control.pin_model(session_id, wanted, by=by, announce=False)
                notice = (
                    f"This conversation uses model {choice.model} ({choice.model_id}) from its next turn."
                )
            case "model":
                report = await self._reads.status(session_id)
                named = {name: model.model for name, model in self.settings.models.named().items()}
                notice = models_text(named, report.model_name, report.pinned)
            case "voice":
                wanted = (command.argument or "").lower()
                if wanted not in ("", "on", "off"):
                    notice = f"/voice takes on or off, not {command.argument!r}."
                else:
                    on = None if not wanted else wanted == "on"
                    notice = (await self._control.set_voice(session_id, on, by=by)).text()
            case "reset":
                await self._control.reset(session_id, by=by)
                notice = "Started afresh: I no longer see our earlier conversation (the transcript is kept)."
            case "stop":
                turn = await self._control.cancel(session_id, by=by)
                notice = f"Stopped turn {turn}." if turn is not None else "Nothing is running."
            case "compact":
                notice = await self._control.compact(session_id)
            case "status":
                notice = await self.status_text(session_id)
            case "skills":
                notice = await self.skills_text(session_id)
            case "agents":
                records = await self._reads.children(session_id)
                notice = describe(records, self._reads.resident_phases())
            case "help":
                notice = HELP_TEXT
            case "prompt":
                notice = (
                    "Send an MCP server's prompt with /prompt server:name args; /prompt alone lists them."
                )
        self._manager.route(session_id, Announce(notice, "command"))
        return CommandDone(session_id, command.name, notice)

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
        return await self._intake.submit(
            replace(inbound, text=expansion.text, files=(*inbound.files, *expansion.files)), wait=wait
        )

    async def status_text(self, session_id: str) -> str:
        """The ``/status`` answer: model, phase, context, turns, today's tokens and cost, the
        provider's cache, approvals waiting, reminders and memories."""
        report = await self._reads.status(session_id)
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
            said = f"{count} {audience} {'memory' if count == 1 else 'memories'}"
            embedding = self._memory.embedding_status()
            if embedding.model is not None and embedding.pending:  # the model changed: re-embedding
                said += (
                    f" ({embedding.pending} still being embedded with {embedding.model}:"
                    " recalled by their words until then)"
                )
            parts.append(said)
        return "; ".join(parts) + "."

    async def skills_text(self, session_id: str) -> str:
        """The ``/skills`` answer: the skills this session's model sees (its audience's)."""
        report = await self._reads.status(session_id)
        audience = cast(Audience, report.audience)
        visible = visible_skills(self._skills.current, self.settings, audience)
        if not visible:
            return f"No skills for {audience} sessions (skills.dirs, audiences.{audience}.skills)."
        listed = "\n".join(f"- {s.name}: {_shorten(s.one_line, 160)}" for s in visible)
        return f"Skills I can follow here ({len(visible)}):\n{listed}"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
