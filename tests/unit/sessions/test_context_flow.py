"""The prompt's size, through the pure session: tiered compaction after a turn and
between tool rounds, the overflow ladder (compact, trim, fail — never a loop), and
``/compact``."""

from __future__ import annotations

import itertools

from netclaw import outputs as out
from netclaw.errors import ContextOverflow
from netclaw.sessions._core.commands import CompactNow
from netclaw.sessions._core.effects import CallModel, CompactionHealth, Publish, RunCompaction
from netclaw.sessions._core.journal.events import HistoryTrimmed, SessionCompacted, TurnRecorded
from netclaw.sessions._core.phases import Phase
from tests.unit.sessions.harness import Driver, tool_call

WINDOW = 2000  # threshold 1500 provider tokens
WORDS = " ".join(f"word{i}" for i in range(50))  # ~150 tokens a message


def _driver() -> Driver:
    main = {"provider": "local", "model": "scripted", "context_window": WINDOW, "max_output_tokens": 256}
    return Driver(models={"main": main})


def _turns(d: Driver, n: int) -> None:
    for i in range(n):
        d.send(f"{i} {WORDS}")
        d.answer(f"answer {i} {WORDS}")


def _phases(d: Driver) -> list[str]:
    return [o.to for p in d.effects if isinstance(p, Publish) for o in p.outputs if isinstance(o, out.Phase)]


def test_a_turn_the_provider_counts_past_the_threshold_is_followed_by_compaction() -> None:
    d = _driver()
    _turns(d, 3)
    d.send(f"3 {WORDS}")
    d.answer("four", input_tokens=1600)  # over 0.75 x 2000
    assert d.phase is Phase.COMPACTING
    plan = d.pending(RunCompaction).plan
    assert plan.to_summarise and plan.to_summarise[0].content.startswith("0 ")
    effects = d.compaction_done("## Decisions\n- none\n")
    (compacted,) = [e for e in d.events(effects) if isinstance(e, SessionCompacted)]
    assert compacted.summary is not None and "summary" in compacted.tiers
    assert d.phase is Phase.READY
    assert [o.event for o in d.outputs(effects)].count("compaction") == 1
    d.send("after")
    messages = d.pending(CallModel).request.messages
    assert messages[1].id.startswith("summary:")  # system prompt, then the summary
    d.close()


def test_compaction_between_tool_rounds_resumes_the_turn() -> None:
    d = _driver()
    _turns(d, 3)
    d.send(f"3 {WORDS}")
    d.answer(calls=[tool_call("current_time", "c1")], input_tokens=1600)
    d.tools_done()
    assert d.phase is Phase.COMPACTING
    calls = len([e for e in d.effects if isinstance(e, CallModel)])
    d.compaction_done("## Decisions\n- none\n")
    assert d.phase is Phase.PROCESSING
    assert len([e for e in d.effects if isinstance(e, CallModel)]) == calls + 1
    d.answer("done")
    assert _phases(d)[-4:] == ["processing", "compacting", "processing", "ready"]
    d.close()


def test_the_overflow_ladder_compacts_then_trims_then_fails_never_looping() -> None:
    d = _driver()
    _turns(d, 4)
    d.send(f"4 {WORDS}")
    d.fail_call(ContextOverflow("prompt is too long"))
    assert d.phase is Phase.COMPACTING  # rung 1: compact (forced), then retry
    d.compaction_done(None)  # the summary failed
    assert d.phase is Phase.PROCESSING
    effects = d.fail_call(ContextOverflow("prompt is too long"))  # rung 2: trim, retry
    (trimmed,) = [e for e in d.events(effects) if isinstance(e, HistoryTrimmed)]
    assert trimmed.reason == "overflow" and trimmed.dropped_turns >= 1
    assert any(isinstance(o, out.HistoryTrimmed) for o in d.outputs(effects))
    d.fail_call(ContextOverflow("prompt is too long"))
    effects = d.fail_call(ContextOverflow("prompt is too long"))  # past MAX_OVERFLOW_PASSES
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "failed" and recorded.error is not None
    assert recorded.error["code"] == "context_overflow"
    assert d.phase is Phase.READY
    d.close()


def test_compact_now_between_turns_answers_what_it_did() -> None:
    d = _driver()
    _turns(d, 4)
    reply = d.reply()
    d.handle(CompactNow(reply))
    assert d.phase is Phase.COMPACTING
    effects = d.compaction_done("## Decisions\n- none\n")
    (said,) = d.answers(reply, effects)
    assert isinstance(said, str) and said.startswith("Compacted: summarised the earlier conversation")
    assert d.phase is Phase.READY
    d.close()


def test_compact_now_during_a_turn_is_not_now() -> None:
    d = _driver()
    d.send("hi")
    reply = d.reply()
    (said,) = d.answers(reply, d.handle(CompactNow(reply)))
    assert isinstance(said, str) and said.startswith("not now")
    d.close()


def test_compact_now_with_nothing_to_compact_says_so() -> None:
    d = _driver()
    _turns(d, 1)
    reply = d.reply()
    (said,) = d.answers(reply, d.handle(CompactNow(reply)))
    assert isinstance(said, str) and said.startswith("Nothing to compact yet")
    assert d.phase is Phase.READY
    d.close()


def test_a_model_that_cannot_summarise_backs_off_says_why_and_keeps_answering() -> None:
    d = _driver()
    _turns(d, 3)
    summaries_tried: list[int] = []
    for i in range(3, 40):
        d.send(f"{i} {WORDS}")
        while True:  # compactions (failing) and calls, until the turn ends
            if d.phase is Phase.COMPACTING:
                run = d.pending(RunCompaction)
                summaries_tried.append(d.state.turns)
                assert run.plan is not None
                d.compaction_done(None)  # the summary failed
            elif d.phase is Phase.PROCESSING:
                d.answer(f"answer {i} {WORDS}", input_tokens=1600)  # always past the threshold
            else:
                break
    # The LLM tiers ran at ever longer intervals (3, 6, 12 ... turns), not every few turns.
    gaps = [b - a for a, b in itertools.pairwise(summaries_tried)]
    assert gaps == sorted(gaps) and gaps[0] >= 3 and len(summaries_tried) <= 5
    notices = [o for o in d.outputs() if isinstance(o, out.Notice) and o.kind == "compaction_failing"]
    assert len(notices) == len(summaries_tried)
    assert "tries again in" in notices[0].text
    health = [e.failures for e in d.effects if isinstance(e, CompactionHealth)]
    assert health == list(range(1, len(summaries_tried) + 1))
    assert d.state.summary_failures == len(summaries_tried)
    recorded = [e for e in d.events() if isinstance(e, TurnRecorded)]
    assert all(r.status == "completed" for r in recorded)  # every turn still answered
    # Meanwhile trimming kept the prompt within its budget while the record grew.
    assert any(isinstance(e, HistoryTrimmed) for e in d.events())
    prompt = d.pending(CallModel).request
    assert len(prompt.messages) < len(d.state.transcript) / 2
    assert d.session.context.prompts.estimate(d.state, prompt.tools) <= d.live.current.trim_budget_tokens
