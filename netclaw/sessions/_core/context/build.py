"""What the model is offered and sees, for one session (pure): the settings in force, the
model it talks to, the audience and its tools, the prompt builder (token cache,
calibration) and the context ladder (what was already tried about the prompt's size).

Settings and skills are picked up at a turn's start (a SIGHUP applies to running
sessions); the audience follows them and where the session lives (a DM's sender). The
static system prompt is a function of those three (:func:`netclaw.skills.system_prompt`).
The model is the one a person pinned (``ModelPinned``), else a sub-agent's task's, else
``models.main``, or a fallback the turn switched to; the budget and the trim follow its
window, so a switch re-fits the prompt.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from netclaw.config import LiveSettings, ModelConfig, Settings
from netclaw.history import BudgetCalibration
from netclaw.lineage import SPAWN_TOOL, ChildTask, depth_of
from netclaw.llm import Completion, ToolSchema, Usage
from netclaw.security.policy import (
    Audience,
    Place,
    ToolHints,
    audience_of,
    memory_scope_of,
    recall_scope,
    subagents_allowed,
    tool_matches,
)
from netclaw.security.redact import Scrubber
from netclaw.security.roles import turn_tools
from netclaw.sessions._core.context import ladder as ladder
from netclaw.sessions._core.context.prompt import CALIBRATION_FLOOR, Prompt, PromptBuilder
from netclaw.sessions._core.journal.state import SessionState
from netclaw.skills import LiveSkills, Skills, system_prompt
from netclaw.spend import DailySpend, NoLedger
from netclaw.toolspec import ToolContext

log = logging.getLogger(__name__)


class ToolCatalog(Protocol):
    """The tools on offer (the registry: built-ins and the MCP servers' current tools)."""

    def schemas(self, allowed: Sequence[str] | None = None) -> list[ToolSchema]: ...

    def names(self) -> list[str]: ...

    def hints(self, name: str) -> ToolHints: ...


@dataclass(frozen=True, slots=True)
class SessionEnv:
    """What a session reads from the daemon (nothing it could block on), and all it takes
    from the world besides its commands: the clocks, fresh ids and the daemon's own
    secrets. The shell passes the real ones; a test its own, so a run replays exactly."""

    live: LiveSettings
    tools: ToolCatalog
    has_memory: bool  # a memory store exists: recall, extraction at passivation
    clock: Callable[[], float]  # the wall clock (seconds since the epoch): what is recorded and shown
    monotonic: Callable[[], float]  # for durations (a turn's seconds)
    random_hex: Callable[[int], str]  # n fresh random hex digits: what every new id is made of
    known_secrets: Callable[[], Scrubber]  # the daemon's own secret values, as they are now
    skills: LiveSkills = field(default_factory=LiveSkills)  # the loaded skills (a value; no I/O)
    spend: DailySpend = field(default_factory=NoLedger)  # the daemon's day (netclaw.spend)
    may_recall: Callable[[str], bool] = lambda audience: True  # the store may hold its memories


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
        "_model",
        "_prompt_of",
        "_role",
        "_settings",
        "_skills",
        "_task",
        "cache_key",
        "last_usage",
        "model_name",
        "prompts",
    )

    def __init__(
        self, session_id: str, live: LiveSettings, catalog: ToolCatalog, skills: LiveSkills | None = None
    ) -> None:
        self._id = session_id
        self._live = live
        self._catalog = catalog
        self._task: ChildTask | None = None  # a sub-agent's terms: its tools and model
        self._settings = settings = live.current
        self.model_name = "main"
        self._model = settings.models.main
        self._live_skills = skills or LiveSkills()
        self._skills: Skills = self._live_skills.current
        self._audience: Audience = audience_of(session_id, settings)
        self._prompt_of: tuple[Settings, Audience, Skills] = (settings, self._audience, self._skills)
        self.prompts = PromptBuilder(
            system_prompt(settings, self._audience, self._skills),
            settings.trim_budget_of(self._model),
            low_water=settings.history.low_water,
        )
        # Providers keep a session's cached prompts together under this (no id leaves netclaw).
        self.cache_key = hashlib.sha256(session_id.encode()).hexdigest()[:32]
        self.last_usage: Usage | None = None  # the provider's count of the last call (/status)
        self._ladder = ladder.Ladder()
        self._allowed: tuple[str, ...] | None = None
        self._role: str | None = None  # the role of whoever started the turn (netclaw/security/roles.py)
        self._may_spawn = False
        self.place_changed(None)

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def model(self) -> ModelConfig:
        """The model the next call goes to."""
        return self._model

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
        self.place_changed(state.place)
        self._ladder = ladder.Ladder.recovered(
            state.last_input_tokens, state.summary_failures, state.summary_failed_turn
        )
        self.use_model(self.chosen(state))

    @property
    def role(self) -> str | None:
        return self._role

    def task_given(self, task: ChildTask, place: Place | None) -> None:
        """This session became a sub-agent: its task's tools, model and audience from now on."""
        self._task = task
        self.place_changed(place)
        self.use_model(task.model if self.known(task.model) else "main")

    def refresh(self, state: SessionState, role: str | None) -> None:
        """At a turn's start: pick up a config or skills reload; the tools on offer follow
        the speaker; the model the turn starts on (a fallback it had switched to before a
        restart, else the session's)."""
        self._role = role
        self._skills = self._live_skills.current
        current = self._live.current
        if current is not self._settings:
            self._settings = current
            self.prompts.low_water = current.history.low_water
        self.place_changed(state.place)
        active = state.active.model if state.active is not None else None
        self.use_model(active if active is not None and self.known(active) else self.chosen(state))

    def chosen(self, state: SessionState) -> str:
        """The session's model: the one pinned, if the config still has it; else a
        sub-agent's task's (``compaction`` when configured); else main."""
        pin = state.model_pin
        if pin is not None and not self.known(pin):
            log.warning("%s: pinned model %r is no longer configured; using main", self._id, pin)
            pin = None
        if pin is not None:
            return pin
        task = self._task
        return task.model if task is not None and self.known(task.model) else "main"

    def known(self, name: str) -> bool:
        return self._settings.models.get(name) is not None

    def use_model(self, name: str) -> None:
        """Talk to the model ``name`` from the next call on: the budget follows its window,
        and a different model's tokenizer starts a fresh calibration."""
        model = self._settings.models.get(name) or self._settings.models.main
        if model.model != self._model.model or model.provider != self._model.provider:
            self.prompts.calibration = BudgetCalibration(min_ratio=CALIBRATION_FLOOR)
        self.model_name, self._model = name, model
        self.prompts.budget = self._settings.trim_budget_of(model)

    def fallbacks(self, start: str) -> list[str]:
        """The models a turn that started on ``start`` may go on with, in order."""
        model = self._settings.models.get(start)
        return [name for name in (model.fallbacks if model is not None else []) if self.known(name)]

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
        """The tools on offer, sorted by name: the head of every request, the same bytes
        until the tool set changes."""
        schemas = sorted(self._catalog.schemas(self._allowed), key=lambda tool: tool.name)
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
        return ladder.budget_of(self._settings, self.prompts.calibration.ratio, self._model, self.model_name)

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
            self.last_usage = completion.usage
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
