"""Each effect a session decides is carried out exactly once — through the real actor and
its real Effector (a real I/O loop, a real SQLite journal and memory store), driven one
command at a time from the test's thread: every type of the closed command union, the
recovery and the stop. The Effector counts what it carries out; the Session keeps what it
returned. Also: work that cannot start comes back to the session as a command, and a
journal write that fails ends the command there (nothing decided after it is carried out)
while every caller it owed is still answered."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from netclaw import outputs as out
from netclaw.config import LiveSettings
from netclaw.errors import JournalError, ProviderUnavailable, SessionMoved, SessionUnavailable
from netclaw.lineage import SpawnRequest
from netclaw.llm import Completion, Delta, OnDelta, ProviderRequest, Usage
from netclaw.messages import Attachment, ToolCall, Transcript
from netclaw.persistence import SqliteJournal, SqliteMemoryStore, prepare_database
from netclaw.process.runtime import IoLoop, Reply
from netclaw.sessions._core.commands import (
    COMMAND_TYPES,
    Announce,
    Cancel,
    Command,
    CompactNow,
    ConfirmStop,
    Decide,
    DetachChild,
    HandOff,
    ListApprovals,
    ListChildren,
    ListUndelivered,
    MarkDelivered,
    OwedReports,
    PassivateNow,
    PinModel,
    RecordSpawn,
    Release,
    ReportStatus,
    Reset,
    SendUserMessage,
    SetVoice,
    Shutdown,
    Subscribe,
    Unsubscribe,
)
from netclaw.sessions._core.compaction import CompactionOutcome
from netclaw.sessions._core.effects import (
    Answer,
    AskToStop,
    CallModel,
    Effect,
    Persist,
    Recall,
    Refuse,
    RunCompaction,
    RunExtraction,
    RunTools,
    SaveMemories,
    StartTimer,
    Stop,
    TimerKind,
    Transcribe,
)
from netclaw.sessions._core.journal.events import TurnRecorded
from netclaw.sessions._core.journal.state import TurnOutcome
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import (
    ApprovalsDue,
    CompactionDone,
    ExtractionDone,
    GraceElapsed,
    IdleTick,
    MemoriesSaved,
    OpFailed,
    ProviderDeltas,
    ProviderDone,
    Recalled,
    Spoken,
    SubscriberLeft,
    ToolEvent,
    ToolsDone,
    Transcribed,
    TurnTimeout,
)
from netclaw.sessions._core.session import Session
from netclaw.sessions._shell import actor as _actor
from netclaw.sessions._shell.deps import SessionDeps
from netclaw.sessions._shell.effector import Effector
from netclaw.tools import Tool, ToolContext, ToolRegistry, ToolResult
from tests.unit.sessions.harness import Sink, settings

E = TypeVar("E")
SID = "cli:once"


class Silent:
    """A provider that never answers (its results are the test's to give)."""

    name = "local"

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def check(self, model: str | None = None) -> str:
        return "silent"

    async def aclose(self) -> None:
        pass


class Manager:
    """What the actor tells its manager (on the loop): kept, by name."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def told(*args: object, **kwargs: object) -> None:
            self.told.append(name)

        return told


class CountingEffector(Effector):
    """The real Effector, counting every effect it carries out (by identity)."""

    made: list[CountingEffector] = []

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.carried: Counter[int] = Counter()
        CountingEffector.made.append(self)

    def __call__(self, effect: Effect) -> None:
        self.carried[id(effect)] += 1
        super().__call__(effect)


class KeptSession(Session):
    """The real Session, keeping every list of effects it returns (by ``recovered``,
    ``handle`` or ``stopping``), in order."""

    made: list[KeptSession] = []
    returned: list[list[Effect]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        KeptSession.made.append(self)

    def recovered(self, *args: Any) -> list[Effect]:
        return self._kept(super().recovered(*args))

    def handle(self, *args: Any) -> list[Effect]:
        return self._kept(super().handle(*args))

    def stopping(self, *args: Any) -> list[Effect]:
        return self._kept(super().stopping(*args))

    def _kept(self, effects: list[Effect]) -> list[Effect]:
        KeptSession.returned.append(effects)
        return effects


def decided() -> list[Effect]:
    """Every effect the session returned, in order."""
    return [e for effects in KeptSession.returned for e in effects]


async def _ok(args: dict[str, Any], context: ToolContext) -> str:
    return "ok"


class World:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **sections: Any) -> None:
        KeptSession.returned.clear()
        CountingEffector.made.clear()
        KeptSession.made.clear()
        monkeypatch.setattr(_actor, "Effector", CountingEffector)
        monkeypatch.setattr(_actor, "Session", KeptSession)
        self.io = IoLoop("test-io").start()
        db = tmp_path / "netclaw.db"
        prepare_database(db)
        self.journal = self.io.run(SqliteJournal(db).open(), 10)
        self.memory = self.io.run(SqliteMemoryStore(db).open(), 10)
        self.manager = Manager()
        tools = ToolRegistry(
            [
                Tool("current_time", "The time", {"type": "object"}, _ok),
                Tool("deploy", "Ship it", {"type": "object"}, _ok),
            ]
        )
        live = LiveSettings(settings(data_dir=str(tmp_path), **sections))
        deps = SessionDeps(
            io=self.io,
            journal=self.journal,
            providers={"local": Silent()},
            tools=tools,
            live=live,
            manager=self.manager,
            memory=self.memory,
        )
        self.actor = _actor.SessionActor(SID, deps)  # never started: the test is its thread
        self.handled: set[type] = set()
        self.checked = 0

    @property
    def effector(self) -> CountingEffector:
        [effector] = CountingEffector.made
        return effector

    @property
    def session(self) -> Session:
        [session] = KeptSession.made
        return session

    def broken(self) -> bool:
        """Has the actor told its manager it failed?"""

        async def told() -> list[str]:  # after what the actor handed the loop before
            return self.manager.told

        return "actor_failed" in self.io.run(told(), 10)

    def close(self) -> None:
        self.io.run(self.memory.close(), 10)
        self.io.run(self.journal.close(), 10)
        self.io.stop()

    # -- driving the actor ------------------------------------------------------------------------

    def reply(self) -> Reply[Any]:
        return Reply(self.io.loop)

    def start(self) -> None:
        self.actor.on_start()
        self.check()

    def send(self, command: Command) -> list[Effect]:
        """What the session decided about ``command`` (and what came back of it)."""
        before = len(decided())
        self.actor.on_receive(command)
        self.handled.add(type(command))
        self.check()
        return decided()[before:]

    def recalled(self) -> None:
        """What the memory store found for the recall in flight (none in flight: a stale
        answer, still a command the session handles)."""
        found = [e for e in decided() if isinstance(e, Recall)]
        op_id = found[-1].op_id if found else 0
        self.send(Recalled(op_id, None))

    def message(self, text: str, done: Reply[TurnOutcome] | None = None) -> list[Effect]:
        return self.send(SendUserMessage(text, 1_700_000_000.0, self.reply(), done=done))

    def stop(self) -> list[Effect]:
        before = len(decided())
        self.actor.on_stop()
        self.check()
        return decided()[before:]

    def check(self) -> None:
        """Every effect the session returned was carried out exactly once, and nothing else."""
        carried = self.effector.carried
        twice = [e for e in decided() if carried[id(e)] > 1]
        assert not twice, f"carried out more than once: {twice}"
        never = [e for e in decided() if carried[id(e)] == 0]
        assert not never, f"decided, never carried out: {never}"
        assert sum(carried.values()) == len(decided()), "carried out what the session did not decide"
        self.checked = len(decided())

    # -- what came out ----------------------------------------------------------------------------

    def latest(self, kind: type[E]) -> E:
        found = [e for e in decided() if isinstance(e, kind)]
        assert found, f"no {kind.__name__} was decided"
        return found[-1]

    def answer(self, reply: Reply[Any]) -> Any:
        return self.io.run(reply.wait(5), 10)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    w = World(tmp_path, monkeypatch, audiences={"personal": {"approve": ["deploy"]}})
    try:
        yield w
    finally:
        w.close()


def _idle_epoch(w: World) -> int:
    timer = [e for e in decided() if isinstance(e, StartTimer) and e.kind is TimerKind.IDLE][-1]
    assert isinstance(timer.message, IdleTick | GraceElapsed)
    return timer.message.epoch


def test_each_effect_is_carried_out_once_for_every_command_and_at_the_stop(world: World) -> None:
    w = world
    w.start()
    w.send(Subscribe("s1", out.OutputFilter.ALL, Sink()))

    # A turn: memories looked up, a streamed answer calling a tool that waits for approval,
    # the decision, the tool's news and its round, the answer.
    done = w.reply()
    w.message("deploy it", done)
    w.recalled()
    call = w.latest(CallModel)
    w.send(ProviderDeltas(call.op_id, (Delta("text", "On it"),)))
    w.send(ProviderDone(call.op_id, Completion("", (ToolCall("c1", "deploy", "{}"),), usage=Usage(50, 5))))
    pending = w.session.state.pending_round
    assert pending is not None and pending.open
    w.send(ListApprovals(w.reply()))
    w.send(Decide(pending.open[0].id, "approve", "ana", None, w.reply()))
    tools = w.latest(RunTools)
    w.send(ToolEvent(1, output=out.Notice(session_id=SID, text="deploying", kind="progress")))
    w.send(ToolsDone(tools.op_id, [ToolResult(c, "deployed") for c in tools.calls]))
    w.send(ProviderDone(w.latest(CallModel).op_id, Completion("Deployed.", (), usage=Usage(60, 5))))
    assert w.answer(done).status == "completed"

    # What a session answers without changing course, and the rest of the session-wide ones.
    for command in (
        ReportStatus(w.reply()),
        ListUndelivered(w.reply()),
        MarkDelivered(1, (), w.reply()),
        OwedReports(w.reply()),
        ListChildren(w.reply()),
        PinModel(None, "ana", w.reply()),
        Announce("maintenance at noon", "notice"),
        RecordSpawn(1, "c9", SpawnRequest("help"), w.reply()),  # no such round: refused
        DetachChild(1, w.reply()),  # no such child: refused
        ApprovalsDue(1),  # the turn is over: stale
    ):
        w.send(command)

    # Turns that end otherwise: timed out, cancelled, failed (the model's error).
    w.message("two")
    w.recalled()
    w.send(TurnTimeout(2))
    w.message("three")
    cancelled = w.reply()
    w.send(Cancel(cancelled, "ana"))
    assert w.answer(cancelled) == 3
    w.message("four")
    w.recalled()
    w.send(OpFailed(w.latest(CallModel).op_id, ProviderUnavailable("the model is down")))

    # A voice note: heard before its turn (the transcript recorded), then answered.
    note = Attachment("note.wav", "audio/wav", "/nonexistent/note.wav", 10, "audio")
    w.send(SendUserMessage("", 1_700_000_000.0, w.reply(), files=(note,)))
    w.send(Transcribed(w.latest(Transcribe).op_id, ((0, Transcript("hello", "en", 1.0)),)))
    w.recalled()
    w.send(ProviderDone(w.latest(CallModel).op_id, Completion("Hello.", (), usage=Usage(10, 2))))
    w.send(SetVoice(True, "ana", w.reply()))  # spoken replies: asked for, and one that failed
    w.send(Spoken(5, None, error="text-to-speech is down"))

    # A compaction asked for, and a reset.
    effects = w.send(CompactNow(w.reply()))
    if any(isinstance(e, RunCompaction) for e in effects):
        w.send(CompactionDone(w.latest(RunCompaction).op_id, CompactionOutcome("The summary.", 0, True)))
    else:  # nothing to compact: a stale result, still handled
        w.send(CompactionDone(999, CompactionOutcome(None, 0, True)))
    w.send(Reset("ana", w.reply()))

    # Nobody watching any more, then idle: passivation with memory extraction, to the stop.
    w.send(Unsubscribe("s1"))
    w.send(SubscriberLeft("s1"))
    w.send(IdleTick(_idle_epoch(w)))
    assert w.session.phase is Phase.PASSIVATING
    extraction = w.latest(RunExtraction)
    w.send(ExtractionDone(extraction.op_id, [("ships on fridays", "fact")]))
    w.send(MemoriesSaved(w.latest(SaveMemories).op_id, extraction.plan.through_turn, 1))
    w.send(GraceElapsed(_idle_epoch(w)))
    w.send(PassivateNow())  # the manager's, while on its way out: asked again
    assert Stop() in w.send(ConfirmStop(w.latest(AskToStop).epoch))
    w.send(Release())  # not held: nothing
    w.send(Shutdown())

    # The stop: a caller still waiting on a turn is answered — once.
    waiting = w.reply()
    w.message("five", waiting)
    w.send(HandOff())  # a turn runs: it finishes first (here, it is stopped)
    refused = [e for e in w.stop() if isinstance(e, Refuse)]
    assert [e.reply for e in refused] == [waiting]
    with pytest.raises(SessionMoved):
        w.answer(waiting)

    assert w.handled == set(COMMAND_TYPES), f"not driven: {set(COMMAND_TYPES) - w.handled}"
    assert w.checked == len(decided()) > 100


def test_work_that_cannot_start_comes_back_as_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call whose provider the daemon does not have (a model added by a reload, say)
    fails the turn, visibly, instead of breaking the session."""
    w = World(
        tmp_path,
        monkeypatch,
        providers={"elsewhere": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        models={"alt": {"provider": "elsewhere", "model": "other"}},
    )
    try:
        w.start()
        w.send(PinModel("alt", "ana", w.reply()))
        done = w.reply()
        w.message("hello", done)
        w.recalled()
        assert w.answer(done).status == "failed"  # the turn failed: answered, not refused
        assert not w.broken()
        recorded = [e for p in decided() if isinstance(p, Persist) for e in p.events]
        [ended] = [e for e in recorded if isinstance(e, TurnRecorded)]
        assert ended.error is not None and ended.error["code"] == "internal"
    finally:
        w.stop()
        w.close()


def test_a_write_that_fails_ends_the_command_and_every_caller_it_owed_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's record fails to be written: what the session decided after it (the
    answer to the caller waiting, the outputs) is never carried out; the actor breaks, and
    the caller is told the session failed — never left waiting, never told it completed."""
    w = World(tmp_path, monkeypatch)
    try:
        w.start()
        sink = Sink()
        w.send(Subscribe("s1", out.OutputFilter.ALL, sink))
        done = w.reply()
        w.message("hello", done)
        w.recalled()
        real = w.journal.append_threadsafe

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise JournalError("injected: the disk is full")

        monkeypatch.setattr(w.journal, "append_threadsafe", failing)
        shown = len(sink.seen)
        calls = len(KeptSession.returned)
        w.actor.on_receive(ProviderDone(w.latest(CallModel).op_id, Completion("Hi.", (), usage=Usage(9, 2))))
        monkeypatch.setattr(w.journal, "append_threadsafe", real)
        handled, stopped = KeptSession.returned[calls:]  # by handle; by stopping, as the actor broke
        assert [e.reply for e in stopped if isinstance(e, Refuse)] == [done]
        kinds = [type(e) for e in handled]
        after_write = handled[kinds.index(Persist) + 1 :]
        assert [e for e in after_write if isinstance(e, Answer) and e.reply is done]  # decided, not given
        carried = w.effector.carried
        assert all(carried[id(e)] == 0 for e in after_write), "carried out after the write failed"
        assert w.broken()
        with pytest.raises(SessionUnavailable):
            w.answer(done)
        assert not [o for o in sink.seen[shown:] if isinstance(o, out.Text)]  # the answer never went out
    finally:
        w.close()
