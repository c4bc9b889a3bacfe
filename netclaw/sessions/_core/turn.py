"""The agent turn, as pure pieces: its progress, and — for each step of a turn — the
events it records and the outputs it publishes. The turn activity (:mod:`netclaw.sessions._core.activities.turning`)
persists and publishes what these return; nothing here does I/O, reads a clock or mints
an id (each new message's id and time are given: ``new_id``, ``now``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from netclaw import outputs as out
from netclaw.config import ModelConfig, SpeechConfig
from netclaw.history import INTERRUPTED_TEXT, TrimResult
from netclaw.llm import Completion, Delta, Usage
from netclaw.messages import Attachment, ChatMessage, ToolCall, Transcript, unmarked
from netclaw.security.redact import Scrubber, merge, notice, redact, redact_arguments, redact_known
from netclaw.sessions._core.commands import SendUserMessage
from netclaw.sessions._core.effects import Charge, Measure
from netclaw.sessions._core.journal.events import (
    HistoryTrimmed,
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    SpeechTranscribed,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
    TurnStatus,
)
from netclaw.sessions._core.journal.state import SessionState
from netclaw.spend import billed_tokens, cost_of, speech_cost, utc_day
from netclaw.toolspec import ToolResult

log = logging.getLogger(__name__)

TITLE_MAX = 60

NewId = Callable[[str], str]  # a fresh id with a prefix (the session's env mints them)


@dataclass(slots=True)
class TurnRun:
    """In-memory progress of the active turn (the durable part is in SessionState)."""

    turn: int
    message_id: str
    iteration: int  # tool iterations done
    op_id: int = 0  # the one async result we accept; anything else is stale
    pending_calls: ChatMessage | None = None  # assistant message whose tools are running
    estimate: int = 0  # our token estimate of the prompt in flight
    started: float = 0.0  # the monotonic clock when the turn began (metrics)
    input_tokens: int = 0  # what the provider reported over the turn's calls (log, usage, guard)
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0  # what the calls cost at their models' prices
    model: str = ""  # the model id the turn's last call went to (usage reports)
    model_name: str = "main"  # its name under `models`
    tried: list[str] = field(default_factory=list)  # model names this turn has used, in order
    waiting_on_people: int = 0  # questions a running tool asked and nobody answered yet

    def spent(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    def recorded_cost(self) -> float | None:
        return round(self.cost, 9) if self.cost else None


@dataclass(frozen=True, slots=True)
class Step:
    """What one step of a turn records, and what it then tells subscribers."""

    events: tuple[SessionEvent, ...]
    outputs: tuple[out.Output, ...]


# -- voice notes heard before the turn reads them ----------------------------------------------


def unheard(state: SessionState, message_id: str) -> tuple[tuple[int, Attachment], ...]:
    """The audio files of ``message_id`` with no transcript recorded yet (index → file)."""
    message = state.find_message(message_id)
    if message is None:
        return ()
    return tuple((i, f) for i, f in enumerate(message.files) if f.kind == "audio" and f.transcript is None)


def price_per_minute(speech: SpeechConfig, model: str | None) -> float | None:
    """The price of the transcription endpoint whose model heard a note."""
    stt = speech.transcription
    if stt is None or model is None:
        return None
    return next((e.price_per_minute for e in (stt, *stt.fallbacks) if e.model == model), None)


def heard_step(
    session_id: str,
    message_id: str,
    heard: Sequence[tuple[int, Transcript]],
    files: Sequence[tuple[int, Attachment]],
    speech: SpeechConfig,
    now: float,
    known: Scrubber,
    *,
    show: bool = False,
) -> tuple[Step, list[Measure | Charge]]:
    """What transcribing a message's audio records (``SpeechTranscribed``, its audio time
    and cost), what people are told (a notice for each note that could not be heard: never
    a silent drop; secrets said aloud, taken out of the transcript as out of a typed
    message; with ``show``, what was heard, for the audiences that want it shown under the
    note), and what it charges."""
    names = dict((i, f.name) for i, f in files)
    found: tuple[str, ...] = ()
    kept = []
    for i, transcript in heard:
        if transcript.text is not None:
            said = redact(transcript.text, known)
            if said.changed:
                found = merge(found, said.kinds)
                transcript = replace(transcript, text=said.text)
        kept.append((i, transcript))
    heard = kept
    ms, cost, effects = 0, 0.0, list[Measure | Charge]()
    for _, transcript in heard:
        if transcript.text is None:
            continue
        seconds = transcript.seconds or 0.0
        ms += round(seconds * 1000)
        spent = speech_cost(seconds, price_per_minute(speech, transcript.model))
        cost += spent
        effects.append(Charge(utc_day(now), transcript.model or "speech", 0, spent))
        if seconds:
            effects.append(Measure("speech_audio_seconds", seconds, "transcription"))
    model = next((t.model for _, t in heard if t.text is not None and t.model), None)
    event = SpeechTranscribed(
        message_id, tuple(heard), {"speech_ms": ms} if ms else None, round(cost, 9) if cost else None, model
    )
    notices = tuple(
        out.Notice(
            session_id=session_id,
            text=f"I could not transcribe the voice note {names.get(i, 'attached')}: {t.error}",
            kind="transcription_failed",
        )
        for i, t in heard
        if t.text is None
    )
    if show:
        notices += tuple(
            out.Notice(
                session_id=session_id,
                text=f"Transcribed {names.get(i, 'voice note')}: {t.text}",
                kind="transcript",
            )
            for i, t in heard
            if t.text is not None
        )
    if found:
        notices += (out.Notice(session_id=session_id, text=notice(found), kind="redaction"),)
    return Step((event,), notices), effects


# -- messages a turn records ----------------------------------------------------------------------


def admitted(
    state: SessionState, send: SendUserMessage, *, start: bool, message_id: str
) -> tuple[ChatMessage, tuple[SessionEvent, ...]]:
    """The user message an inbound text becomes (``message_id``), and the events that
    admit it — with its turn's start in the same write when ``start`` (nothing else is
    running or queued)."""
    message = ChatMessage(
        id=message_id,
        role="user",
        content=send.text,
        ts=send.ts,
        identity=send.identity or f"{message_id}@{send.ts:.6f}",  # id + timestamp
        user=send.user,
        user_name=send.user_name,
        prior=send.prior,
        files=send.files,
        speaker=send.speaker,
        speaker_role=send.speaker_role,
    )
    # The place is journaled while it is news (a session's first message, or a change).
    place = send.place if send.place is not None and send.place != state.place else None
    if start:
        return message, (InputAdmitted(message, place), TurnStarted(state.turns + 1, message.id))
    return message, (InputAdmitted(message, place),)


def without_secrets(completion: Completion, known: Scrubber) -> tuple[Completion, tuple[str, ...]]:
    """A model's answer as it may be kept, and the kinds of secret taken out: its tool
    calls' names and arguments redacted like a message (here, before anything reads them,
    so the journal, the approval a person is asked, the next provider request and the
    tool's run all see the same text), and the daemon's own secrets (``known``) out of
    its text."""
    found: tuple[str, ...] = ()
    calls = []
    for call in completion.tool_calls:
        name, arguments = redact(call.name, known), redact_arguments(call.arguments, known)
        if name.changed or arguments.changed:
            found = merge(found, merge(name.kinds, arguments.kinds))
            call = ToolCall(call.id, name.text, arguments.text)
        calls.append(call)
    text, thinking = redact_known(completion.text, known), redact_known(completion.thinking, known)
    found = merge(found, merge(text.kinds, thinking.kinds))
    if not found:
        return completion, ()
    return replace(completion, text=text.text, thinking=thinking.text, tool_calls=tuple(calls)), found


def assistant_message(
    completion: Completion, *, with_tool_calls: bool, message_id: str, ts: float
) -> ChatMessage:
    text = completion.text
    calls: tuple[ToolCall, ...] = completion.tool_calls if with_tool_calls else ()
    if not with_tool_calls and completion.tool_calls and not text:
        text = "[stopped: the tool-call limit for this turn was reached]"
    return ChatMessage(
        id=message_id,
        role="assistant",
        content=text,
        ts=ts,
        tool_calls=calls,
        thinking=completion.thinking or None,
        extra=dict(completion.extra),
    )


def tool_message(
    call: ToolCall,
    content: str,
    is_error: bool,
    images: tuple[Attachment, ...] = (),
    *,
    message_id: str,
    ts: float,
) -> ChatMessage:
    return ChatMessage(
        id=message_id,
        role="tool",
        content=content,
        ts=ts,
        tool_call_id=call.id,
        name=call.name,
        is_error=is_error,
        files=images,
    )


def interrupted_results(calls: Sequence[ToolCall], new_id: NewId, now: float) -> list[ChatMessage]:
    return [tool_message(c, INTERRUPTED_TEXT, True, message_id=new_id("t"), ts=now) for c in calls]


def make_title(text: str) -> str:
    words = re.sub(r"\s+", " ", unmarked(text)).strip()
    if len(words) <= TITLE_MAX:
        return words or "untitled"
    return words[: TITLE_MAX - 1].rsplit(" ", 1)[0].rstrip(",.;:") + "…"


# -- steps: events to record, outputs to publish --------------------------------------------------


def text_deltas(session_id: str, turn: int, deltas: Sequence[Delta]) -> list[out.TextDelta]:
    """One ``text_delta`` output for a batch of provider deltas (empty when none is text)."""
    text = "".join(d.text for d in deltas if d.kind == "text")
    return [out.TextDelta(session_id=session_id, turn=turn, delta=text)] if text else []


def answer_outputs(
    session_id: str, turn: int, completion: Completion, model: ModelConfig
) -> list[out.Output]:
    """What a provider answer tells subscribers before the turn goes on: usage, thinking."""
    found: list[out.Output] = []
    if completion.usage is not None:
        usage = completion.usage
        found.append(
            out.Usage(
                session_id=session_id,
                turn=turn,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                context_window=model.context_window,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost=cost_of(usage, model.price),
                model=model.model,
            )
        )
    if completion.thinking:
        found.append(out.Thinking(session_id=session_id, turn=turn, text=completion.thinking))
    return found


def tool_call_outputs(session_id: str, turn: int, assistant: ChatMessage) -> list[out.Output]:
    return [
        out.ToolCall(session_id=session_id, turn=turn, id=c.id, name=c.name, arguments=c.arguments)
        for c in assistant.tool_calls
    ]


def tool_step(
    session_id: str, run: TurnRun, results: Sequence[ToolResult], new_id: NewId, now: float
) -> Step:
    """A tool round: the calls and all their results, recorded together."""
    assert run.pending_calls is not None
    messages = [
        tool_message(r.call, r.content, r.is_error, r.images, message_id=new_id("t"), ts=now) for r in results
    ]
    shown = tuple(
        out.ToolResult(
            session_id=session_id,
            turn=run.turn,
            id=r.call.id,
            name=r.call.name,
            content=m.content,
            is_error=m.is_error,
        )
        for r, m in zip(results, messages, strict=True)
    )
    files = tuple(
        out.File(
            session_id=session_id, turn=run.turn, name=f.name, mime_type=f.mime_type, path=f.path, size=f.size
        )
        for r in results
        for f in r.files
    )
    return Step((StepRecorded(run.turn, (run.pending_calls, *messages)),), shown + files)


def completed_turn(
    session_id: str, state: SessionState, run: TurnRun, completion: Completion, new_id: NewId, now: float
) -> Step:
    """The final answer: the reply, its usage, and the session's title on its first turn."""
    reply = assistant_message(completion, with_tool_calls=False, message_id=new_id("a"), ts=now)
    usage = None
    if completion.usage is not None:
        usage = {
            "input_tokens": completion.usage.input_tokens,
            "output_tokens": completion.usage.output_tokens,
        }
    events: list[SessionEvent] = [
        TurnRecorded(
            run.turn,
            run.message_id,
            "completed",
            (reply,),
            usage=usage,
            spent=run.spent(),
            model=run.model,
            cost=run.recorded_cost(),
        )
    ]
    outputs: list[out.Output] = [
        out.Text(session_id=session_id, turn=run.turn, message_id=reply.id, text=reply.content)
    ]
    if state.title is None:
        first = state.find_message(run.message_id)
        title = make_title(first.content if first else reply.content)
        events.append(SessionTitleSet(title))
        outputs.append(out.Title(session_id=session_id, title=title))
    return Step(tuple(events), tuple(outputs))


def failed_turn(
    session_id: str,
    run: TurnRun,
    code: str,
    message: str,
    status: TurnStatus,
    *,
    as_notice: bool = False,
    detail: dict[str, str] | None = None,
    new_id: NewId,
    now: float,
) -> Step:
    """A turn that ends without an answer. Every tool call in flight still gets a result.
    ``as_notice``: people see a ``notice`` (a limit doing its job), not an ``error``.
    ``detail``: more of the error, recorded with it (a spend stop's cap and reset time)."""
    events: list[SessionEvent] = []
    if run.pending_calls is not None:
        calls = run.pending_calls
        events.append(StepRecorded(run.turn, (calls, *interrupted_results(calls.tool_calls, new_id, now))))
    totals = run.spent()
    spent = totals if any(totals.values()) else None
    events.append(
        TurnRecorded(
            run.turn,
            run.message_id,
            status,
            error={"code": code, "message": message, **(detail or {})},
            spent=spent,
            model=run.model or None,  # usage by model: a failed turn is the model's too
            cost=run.recorded_cost(),
        )
    )
    shown: out.Output = (
        out.Notice(session_id=session_id, text=message, kind=code)
        if as_notice
        else out.Error(session_id=session_id, turn=run.turn, code=code, message=message)
    )
    return Step(tuple(events), (shown,))


def trim_step(session_id: str, trim: TrimResult, reason: str) -> tuple[HistoryTrimmed, out.HistoryTrimmed]:
    """A whole-turn trim, as recorded (so recovery rebuilds the same projection) and shown."""
    assert trim.first_kept_id is not None
    event = HistoryTrimmed(
        first_kept_id=trim.first_kept_id,
        dropped_messages=trim.dropped_messages,
        dropped_turns=trim.dropped_turns,
        kept_turns=trim.kept_turns,
        tokens_before=trim.tokens_before,
        tokens_after=trim.tokens_after,
        budget=trim.budget,
        reason=reason,
    )
    return event, out.HistoryTrimmed(session_id=session_id, **event.to_payload())


def turn_completed(session_id: str, run: TurnRun, status: TurnStatus) -> out.TurnCompleted:
    return out.TurnCompleted(
        session_id=session_id, turn=run.turn, message_id=run.message_id, status=turn_end(status)
    )


def turn_end(status: TurnStatus) -> out.TurnEnd:
    """How a recorded turn ended, as ``turn_completed`` reports it to channels."""
    if status == "completed":
        return "completed"
    if status == "cancelled":
        return "cancelled"
    return "failed"  # failed, timed out, interrupted


def count_tokens(run: TurnRun, usage: Usage, model: ModelConfig, now: float) -> list[Measure | Charge]:
    """Add a call's usage and cost to the turn's totals; what it charges to the daemon's day
    and the metrics it feeds."""
    run.input_tokens += usage.input_tokens or 0
    run.output_tokens += usage.output_tokens or 0
    run.cache_read_tokens += usage.cache_read_tokens or 0
    run.cache_write_tokens += usage.cache_write_tokens or 0
    run.cost += cost_of(usage, model.price)
    return charges(usage, model, now)


def charges(usage: Usage, model: ModelConfig, now: float) -> list[Measure | Charge]:
    """What calls' usage charges to the daemon's day, and the token metrics it feeds."""
    counts = (
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_tokens),
        ("cache_write", usage.cache_write_tokens),
    )
    found: list[Measure | Charge] = [
        Charge(utc_day(now), model.model, billed_tokens(usage), cost_of(usage, model.price))
    ]
    return found + [Measure("tokens", count, kind) for kind, count in counts if count]


def log_end(session_id: str, run: TurnRun, status: TurnStatus, seconds: float) -> None:
    """The turn's one line in the log (with fields for the JSON format)."""
    log.info(
        "%s: turn %d %s in %.2fs (tokens in %d, out %d)",
        session_id,
        run.turn,
        status,
        seconds,
        run.input_tokens,
        run.output_tokens,
        extra={
            "session": session_id,
            "turn": run.turn,
            "event": "turn_completed",
            "outcome": status,
            "duration_s": round(seconds, 3),
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
        },
    )
