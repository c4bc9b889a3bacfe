"""What the model is offered and sees, for one session (pure): the settings in force, the
audience and its tools, the prompt builder (token cache, calibration) and the context
ladder (what was already tried about the prompt's size).

Settings and skills are picked up at a turn's start (a SIGHUP applies to running
sessions); the audience follows them and where the session lives (a DM's sender). The
static system prompt is a function of those three (:func:`netclaw.skills.system_prompt`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from netclaw.config import LiveSettings, Settings
from netclaw.lineage import SPAWN_TOOL, ChildTask, ModelRole, depth_of
from netclaw.llm import Completion, ToolSchema
from netclaw.policy import (
    Audience,
    Place,
    ToolHints,
    audience_of,
    memory_scope_of,
    recall_scope,
    subagents_allowed,
    tool_matches,
)
from netclaw.roles import turn_tools
from netclaw.sessions import _ladder as ladder
from netclaw.sessions._prompt import Prompt, PromptBuilder
from netclaw.sessions._state import SessionState
from netclaw.skills import LiveSkills, Skills, system_prompt
from netclaw.toolspec import ToolContext


class ToolCatalog(Protocol):
    """The tools on offer (the registry: built-ins and the MCP servers' current tools)."""

    def schemas(self, allowed: Sequence[str] | None = None) -> list[ToolSchema]: ...

    def names(self) -> list[str]: ...

    def hints(self, name: str) -> ToolHints: ...


@dataclass(frozen=True, slots=True)
class SessionEnv:
    """What a session reads from the daemon (nothing it could block on)."""

    live: LiveSettings
    tools: ToolCatalog
    has_memory: bool  # a memory store exists: recall, extraction at passivation
    clock: Callable[[], float] = time.time
    skills: LiveSkills = field(default_factory=LiveSkills)  # the loaded skills (a value; no I/O)


class ModelContext:
    __slots__ = (
        "_allowed",
        "_audience",
        "_catalog",
        "_id",
        "_ladder",
        "_live",
        "_live_skills",
        "_may_spawn",
        "_prompt_of",
        "_role",
        "_settings",
        "_skills",
        "_source",
        "_task",
        "prompts",
    )

    def __init__(
        self, session_id: str, live: LiveSettings, catalog: ToolCatalog, skills: LiveSkills | None = None
    ) -> None:
        self._id = session_id
        self._live = live
        self._catalog = catalog
        self._task: ChildTask | None = None  # a sub-agent's terms: its tools and model
        self._source = live.current
        self._settings = live.current
        self._live_skills = skills or LiveSkills()
        self._skills: Skills = self._live_skills.current
        self._audience: Audience = audience_of(session_id, self._settings)
        self._prompt_of: tuple[Settings, Audience, Skills] = (self._settings, self._audience, self._skills)
        self.prompts = PromptBuilder(
            system_prompt(self._settings, self._audience, self._skills), self._settings.trim_budget_tokens
        )
        self._ladder = ladder.Ladder()
        self._allowed: tuple[str, ...] | None = None
        self._role: str | None = None  # the role of whoever started the turn (netclaw/roles.py)
        self._may_spawn = False
        self.place_changed(None)

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def audience(self) -> Audience:
        return self._audience

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self._allowed

    @property
    def task(self) -> ChildTask | None:
        return self._task

    def recovered(self, state: SessionState) -> None:
        self._task = state.task
        self._settings = self._for_task(self._source)
        self.place_changed(state.place)
        self._ladder = ladder.Ladder.recovered(
            state.last_input_tokens, state.summary_failures, state.summary_failed_turn
        )

    @property
    def role(self) -> str | None:
        return self._role

    def task_given(self, task: ChildTask, place: Place | None) -> None:
        """This session became a sub-agent: its task's tools, model and audience from now on."""
        self._task = task
        self._settings = self._for_task(self._source)
        self.place_changed(place)
        self.prompts.budget = self._settings.trim_budget_tokens

    def refresh(self, place: Place | None, role: str | None) -> None:
        """A turn begins: pick up a config or skills reload; the tools on offer follow the speaker."""
        self._role = role
        self._skills = self._live_skills.current
        current = self._live.current
        if current is not self._source:
            self._source = current
            self._settings = self._for_task(current)
            self.prompts.budget = self._settings.trim_budget_tokens
        self.place_changed(place)

    def _for_task(self, settings: Settings) -> Settings:
        """The settings in force: a sub-agent on the compaction model sees it as its main one
        (its window, its output limit) — the rest of the config is the daemon's."""
        compaction = settings.models.compaction
        if self._task is None or self._task.model != "compaction" or compaction is None:
            return settings
        models = settings.models.model_copy(update={"main": compaction})
        return settings.model_copy(update={"models": models})

    @property
    def model_role(self) -> ModelRole:
        """Whose provider the session's calls go to (``main`` or ``compaction``)."""
        return "compaction" if self._settings is not self._source else "main"

    def place_changed(self, place: Place | None) -> None:
        """The audience follows the settings and where the session lives (a DM's sender);
        the tools, what the audience allows and the speaker's role grants."""
        self._audience = audience_of(self._id, self._settings, place)
        allowed = turn_tools(self._settings, self._audience, self._role, self._catalog.names())
        if self._task is not None:  # a sub-agent: its task's tools, never more than its audience's
            allowed = [t for t in self._task.tools if allowed is None or tool_matches(t, allowed)]
        self._allowed = None if allowed is None else tuple(allowed)
        self._may_spawn = (
            subagents_allowed(self._audience, self._settings)
            and depth_of(self._id) < self._settings.session.max_subagent_depth
        )
        # The static system prompt: rebuilt only when what it is made of changed.
        settings, audience, skills = self._prompt_of
        if settings is not self._settings or audience != self._audience or skills is not self._skills:
            self._prompt_of = (self._settings, self._audience, self._skills)
            self.prompts.system_prompt = system_prompt(*self._prompt_of)

    @property
    def may_spawn(self) -> bool:
        """May this session spawn sub-agents (its audience allows, and not too deep)?"""
        return self._may_spawn

    def tools(self) -> list[ToolSchema]:
        schemas = self._catalog.schemas(self._allowed)
        return schemas if self._may_spawn else [t for t in schemas if t.name != SPAWN_TOOL]

    def hints(self, name: str) -> ToolHints:
        """What the tool says about itself (an MCP server's annotations): approvals read it."""
        return self._catalog.hints(name)

    def tool_context(self, turn: int | None, place: Place | None) -> ToolContext:
        return ToolContext(
            self._id,
            self._audience,
            turn,
            scope=memory_scope_of(self._id, place),
            recall_scope=recall_scope(self._id, self._audience, self._settings, place),
            recall=self._settings.audience(self._audience).memory_scope != "none",
        )

    def budget(self) -> ladder.Budget:
        return ladder.budget_of(self._settings, self.prompts.calibration.ratio)

    # -- the ladder: each decision also remembers what was tried ------------------------------------

    def new_turn(self) -> None:
        self._ladder = self._ladder.new_turn()

    def reset(self) -> None:
        self._ladder = ladder.Ladder()

    def before_call(self, prompt: Prompt, state: SessionState) -> ladder.Send | ladder.Compact:
        trim = prompt.trim
        decision, self._ladder = ladder.before_call(
            self._ladder,
            seq=state.seq,
            untrimmed_estimate=trim.tokens_before if trim is not None else prompt.estimate,
            trim=trim,
            turns=state.turns,
            budget=self.budget(),
        )
        return decision

    def observe(self, estimate: int, completion: Completion) -> None:
        """The provider's count of the prompt we estimated at ``estimate``."""
        reported = completion.usage.input_tokens if completion.usage is not None else None
        if reported is not None:
            self.prompts.observe_usage(estimate, reported)
        self._ladder = ladder.observe(self._ladder, reported_input_tokens=reported)

    def compaction_due(self, state: SessionState) -> ladder.Compact | ladder.Proceed:
        return ladder.compaction_due(self._ladder, turns=state.turns, budget=self.budget())

    def on_overflow(self, state: SessionState, error: str) -> ladder.Compact | ladder.Trim | ladder.Fail:
        decision, self._ladder = ladder.on_overflow(self._ladder, turns=state.turns, error=error)
        return decision

    def after_compaction(
        self,
        state: SessionState,
        *,
        forced: bool,
        summary_failed: bool,
        freed_nothing: bool,
        summarised: bool,
    ) -> ladder.Trim | ladder.Proceed:
        decision, self._ladder = ladder.after_compaction(
            self._ladder,
            seq=state.seq,
            turns=state.turns,
            forced=forced,
            summary_failed=summary_failed,
            freed_nothing=freed_nothing,
            summarised=summarised,
        )
        return decision

    def summaries(self) -> tuple[int, int | None]:
        """Failed summaries in a row, and the turn the LLM tiers try again (None: given up,
        only a forced compaction tries)."""
        record = self._ladder
        return record.summary_failures, None if record.summaries_given_up else record.summary_paused_until
