"""Driving a pure :class:`Session` in tests: commands in, effects out — no daemon, no
threads, no sleeps. Replies and sinks are real objects nobody waits on; time is a number
the test moves (both clocks), ids are counted, and the daemon's known secrets are the
test's."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from netclaw import outputs as out
from netclaw.config import LiveSettings, Settings
from netclaw.llm import Completion, ToolSchema, Usage
from netclaw.messages import ToolCall
from netclaw.process.runtime import Reply
from netclaw.security.policy import NO_HINTS, ToolHints
from netclaw.security.redact import Scrubber
from netclaw.sessions._core.commands import Command, SendUserMessage, Subscribe
from netclaw.sessions._core.compaction import CompactionOutcome
from netclaw.sessions._core.context.build import SessionEnv
from netclaw.sessions._core.effects import (
    Answer,
    CallModel,
    Effect,
    Persist,
    Publish,
    Recall,
    RunCompaction,
    RunTools,
)
from netclaw.sessions._core.journal.events import SessionEvent
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import CompactionDone, OpFailed, ProviderDone, Recalled, ToolsDone
from netclaw.sessions._core.session import Session
from netclaw.skills import LiveSkills
from netclaw.spend import DailySpend, NoLedger
from netclaw.toolspec import ToolResult

E = TypeVar("E")

TOOLS = [
    ToolSchema("current_time", "The time", {"type": "object", "properties": {}}),
    ToolSchema(
        "deploy",
        "Ship it",
        {"type": "object", "properties": {"env": {"enum": ["staging", "prod"]}}},
    ),
]


class Catalog:
    def __init__(self, tools: Sequence[ToolSchema]) -> None:
        self._tools = list(tools)

    def schemas(self, allowed: Sequence[str] | None = None) -> list[ToolSchema]:
        return [t for t in self._tools if allowed is None or t.name in allowed]

    def names(self) -> list[str]:
        return sorted(t.name for t in self._tools)

    def hints(self, name: str) -> ToolHints:
        return NO_HINTS


class Sink:
    """A subscriber's sink that keeps what it was offered."""

    def __init__(self) -> None:
        self.seen: list[out.Output] = []
        self.gone = False

    def offer(self, output: out.Output) -> bool:
        if self.gone:
            return False
        self.seen.append(output)
        return True

    def close(self) -> None:
        self.gone = True


def settings(**sections: Any) -> Settings:
    data: dict[str, Any] = {
        "data_dir": "/nonexistent/data",
        "providers": {"local": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"main": {"provider": "local", "model": "scripted", "context_window": 32768}},
        "tools": {"workspace_dir": str(Path("/nonexistent/workspace"))},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return Settings(**data)


class Driver:
    """One session, and everything it produced since it was made."""

    def __init__(
        self,
        session_id: str = "cli:t",
        *,
        tools: Sequence[ToolSchema] = TOOLS,
        has_memory: bool = False,
        state: SessionState | None = None,
        held: bool = False,
        skills: LiveSkills | None = None,
        resumed_at: float | None = None,
        ledger: DailySpend | None = None,
        **sections: Any,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.now = 1_700_000_000.0  # both clocks: the wall clock, and the one durations are read on
        self.known = Scrubber(())  # the daemon's own secrets, as the session is told them
        self.live = LiveSettings(settings(**sections))
        self.effects: list[Effect] = []
        self.skills = skills or LiveSkills()
        minted = itertools.count(1)
        env = SessionEnv(
            self.live,
            Catalog(tools),
            has_memory,
            clock=lambda: self.now,
            monotonic=lambda: self.now,
            random_hex=lambda digits: f"{next(minted):0{digits}x}",
            known_secrets=lambda: self.known,
            skills=self.skills,
            spend=ledger or NoLedger(),
        )
        self.session = Session(session_id, env, held=held, resumed_at=resumed_at)
        self.effects += self.session.recovered(state or SessionState(session_id))
        self._ids = itertools.count(1)
        self._recalled: set[int] = set()

    def close(self) -> None:
        self.loop.close()

    # -- commands ---------------------------------------------------------------------------------

    def reply(self) -> Reply[Any]:
        return Reply(self.loop)

    def handle(self, command: Command) -> list[Effect]:
        """What the session decided about ``command`` (kept, in order, in ``effects``)."""
        decided = self.session.handle(command)
        self.effects += decided
        return decided

    def send(self, text: str, identity: str | None = None) -> tuple[Reply[Any], list[Effect]]:
        ack = self.reply()
        return ack, self.handle(SendUserMessage(text, self.now, ack, identity=identity))

    def subscribe(self, sub_id: str = "s1") -> Sink:
        sink = Sink()
        self.handle(Subscribe(sub_id, out.OutputFilter.ALL, sink))
        return sink

    def answer(
        self, text: str = "", *, calls: Iterable[ToolCall] = (), input_tokens: int | None = None
    ) -> list[Effect]:
        """The model's answer to the call in flight; by default the provider counts the
        prompt as we estimated it. A recall still in flight finds nothing first."""
        self.recalled(None)
        call = self.pending(CallModel)
        if input_tokens is None:
            input_tokens = self.session.context.prompts.estimate(self.state, call.request.tools)
        usage = Usage(input_tokens, 10)
        return self.handle(ProviderDone(call.op_id, Completion(text, tuple(calls), usage=usage)))

    def recalled(self, memories: str | None) -> list[Effect]:
        """What the memory store found for the recall in flight (none in flight: nothing)."""
        found = [e for e in self.effects if isinstance(e, Recall)]
        if not found or found[-1].op_id in self._recalled:
            return []
        self._recalled.add(found[-1].op_id)
        return self.handle(Recalled(found[-1].op_id, memories))

    def tools_done(self, content: str = "ok") -> list[Effect]:
        run = self.pending(RunTools)
        results = [ToolResult(c, content) for c in run.calls]
        return self.handle(ToolsDone(run.op_id, results))

    def fail_call(self, error: BaseException) -> list[Effect]:
        self.recalled(None)
        return self.handle(OpFailed(self.pending(CallModel).op_id, error))

    def compaction_done(self, summary: str | None) -> list[Effect]:
        run = self.pending(RunCompaction)
        return self.handle(CompactionDone(run.op_id, CompactionOutcome(summary, 0, True)))

    def call_id(self) -> str:
        return f"call_{next(self._ids)}"

    # -- what came out ----------------------------------------------------------------------------

    def pending(self, kind: type[E]) -> E:
        """The newest effect of ``kind``."""
        found = [e for e in self.effects if isinstance(e, kind)]
        assert found, f"no {kind.__name__} was produced"
        return found[-1]

    @property
    def phase(self) -> Phase:
        return self.session.phase

    @property
    def state(self) -> SessionState:
        return self.session.state

    def events(self, effects: Iterable[Effect] | None = None) -> list[SessionEvent]:
        return [e for p in self._of(Persist, effects) for e in p.events]

    def outputs(self, effects: Iterable[Effect] | None = None) -> list[out.Output]:
        return [o for p in self._of(Publish, effects) for o in p.outputs]

    def answers(self, reply: Reply[Any], effects: Iterable[Effect] | None = None) -> list[object]:
        return [a.value for a in self._of(Answer, effects) if a.reply is reply]

    def _of(self, kind: type[E], effects: Iterable[Effect] | None) -> list[E]:
        return [e for e in (self.effects if effects is None else effects) if isinstance(e, kind)]


def tool_call(name: str, call_id: str = "call_1", arguments: str = "{}") -> ToolCall:
    return ToolCall(call_id, name, arguments)
