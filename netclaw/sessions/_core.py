"""What every part of the session actor shares: its state, and the few steps they all
take (persist, publish, change phase, start an op).

The actor is split by concern — the turn (:mod:`._turn_flow`), compaction
(:mod:`._compaction_flow`), passivation (:mod:`._passivation`) and the pykka shell that
dispatches messages (:mod:`._actor`) — and composed in :class:`~._actor.SessionActor`.
Steps one part takes in another are declared here; the part named beside each
implements it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import NetclawError
from netclaw.messages import ChatMessage
from netclaw.policy import Audience, allowed_tools, audience_of, memory_scope_of, recall_scope
from netclaw.providers import ToolSchema
from netclaw.runtime import Reply
from netclaw.sessions import _turn as turn
from netclaw.sessions._clock import SessionClock
from netclaw.sessions._compaction import CompactionRun
from netclaw.sessions._deps import SessionDeps, SessionRef
from netclaw.sessions._events import SessionEvent
from netclaw.sessions._extraction import Extraction
from netclaw.sessions._ladder import Budget, Compact, Ladder, budget_of
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._prompt import PromptBuilder
from netclaw.sessions._recorder import Recorder
from netclaw.sessions._state import SessionState
from netclaw.sessions._subscribers import SubscriberSet, Waiters
from netclaw.sessions._turn import TurnRun
from netclaw.tools import ToolContext

log = logging.getLogger(__name__)


class SessionCore:
    """The state and shared steps of a session actor (see the module docstring)."""

    session_id: str
    deps: SessionDeps
    settings: Settings
    state: SessionState
    phases: PhaseMachine
    subscribers: SubscriberSet
    recorder: Recorder
    clock: SessionClock
    ladder: Ladder
    prompts: PromptBuilder | None  # built on the actor's thread (on_start)
    audience: Audience
    allowed_tools: list[str] | None  # None: every tool
    run: TurnRun | None  # the turn in progress
    compacting: CompactionRun | None
    extraction: Extraction | None  # memories being extracted at passivation
    grace_over: bool
    waiters: Waiters
    resumed_at: float | None  # warmed after a graceful restart: tell the model once
    held: bool  # warmed at start-up: recovered, but going on only when released
    leaving: bool  # handed off: no new turn starts; it stops once nothing runs
    received: int  # routed commands received (compared with the manager's count)
    broken: str | None
    _op_counter: int

    if TYPE_CHECKING:

        @property
        def actor_ref(self) -> SessionRef: ...  # pykka's, on the composed actor

    def _persist(self, *events: SessionEvent) -> None:
        self.state = self.recorder.persist(self.state, *events)

    def _record(self, step: turn.Step) -> None:
        """Persist a step's events, then tell subscribers what happened."""
        self._persist(*step.events)
        self._publish(*step.outputs)

    def _publish(self, *outputs: out.Output) -> None:
        for output in outputs:
            self.subscribers.publish(output)

    def _set_phase(self, new: Phase) -> None:
        old = self.phases.phase
        try:
            self.phases.transition_to(new)
        except NetclawError:
            log.exception("%s: refused phase change", self.session_id)
            raise
        if new is Phase.READY and old is Phase.PASSIVATING:
            self.clock.abort()  # invalidates the grace timer and any stop confirmation
            if self.extraction is not None:  # its result is stale now: nothing gets written
                self.extraction.future.cancel()
                self.extraction = None
            self._arm_idle()
        self.subscribers.publish(out.Phase(session_id=self.session_id, from_=old.value, to=new.value))
        self.deps.io.call(self.deps.manager.phase_changed, self.session_id, self.actor_ref, new)

    def _new_op(self) -> int:
        self._op_counter += 1
        return self._op_counter

    def _next_op(self) -> int:
        """A new op id for the turn: results of any earlier op are stale from now on."""
        assert self.run is not None
        self.run.op_id = self._new_op()
        return self.run.op_id

    def _current(self, op_id: int) -> bool:
        if self.run is not None and self.run.op_id == op_id:
            return True
        log.debug("%s: dropping stale result of op %d", self.session_id, op_id)
        return False

    def _refresh_settings(self) -> None:
        """Pick up a config reload at a turn boundary (SIGHUP applies to running sessions)."""
        current = self.deps.live.current
        if current is self.settings:
            return
        self.settings = current
        self._place_changed()
        assert self.prompts is not None
        self.prompts.system_prompt = current.agent.system_prompt
        self.prompts.budget = current.trim_budget_tokens

    def _place_changed(self) -> None:
        """The audience follows the settings and where the session lives (a DM's sender)."""
        self.audience = audience_of(self.session_id, self.settings, self.state.place)
        self.allowed_tools = allowed_tools(self.audience, self.settings)

    def _tool_context(self, turn: int | None) -> ToolContext:
        place = self.state.place
        return ToolContext(
            self.session_id,
            self.audience,
            turn,
            scope=memory_scope_of(self.session_id, place),
            recall_scope=recall_scope(self.session_id, self.audience, self.settings, place),
            recall=self.settings.audience(self.audience).memory_scope != "none",
        )

    def _budget(self) -> Budget:
        assert self.prompts is not None
        return budget_of(self.settings, self.prompts.calibration.ratio)

    def _tools(self) -> list[ToolSchema]:
        return self.deps.tools.schemas(self.allowed_tools)

    def _idle(self) -> bool:
        return (
            self.phases.phase is Phase.READY
            and self.run is None
            and not self.state.inbox
            and len(self.subscribers) == 0
        )

    def _arm_idle(self) -> None:
        self.clock.arm(self._idle(), self.settings.session.idle_timeout_s)

    # -- steps one part takes in another ------------------------------------------------------

    def _call_provider(self) -> None:
        raise NotImplementedError  # the turn: _turn_flow

    def _overflow_trim(self) -> None:
        raise NotImplementedError  # the turn: _turn_flow

    def _start_next_turn(self) -> None:
        raise NotImplementedError  # the turn: _turn_flow

    def _leave(self) -> None:
        raise NotImplementedError  # handed off: _passivation

    def _compact_if_due(self, *, resume_turn: bool) -> bool:
        raise NotImplementedError  # compaction: _compaction_flow

    def _begin_compaction(
        self, decision: Compact, *, resume_turn: bool, reply: Reply[str] | None = None
    ) -> None:
        raise NotImplementedError  # compaction: _compaction_flow

    def _abandon_compaction(self) -> None:
        raise NotImplementedError  # compaction: _compaction_flow

    def _gate_round(self, assistant: ChatMessage) -> bool:
        raise NotImplementedError  # approvals: _approval_flow

    def _await_decisions(self) -> None:
        raise NotImplementedError  # approvals: _approval_flow

    def _close_open_approvals(self) -> None:
        raise NotImplementedError  # approvals: _approval_flow
