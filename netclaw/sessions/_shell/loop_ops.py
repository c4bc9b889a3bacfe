"""Work a session hands to the I/O loop, and how its outcome comes back.

Each function here carries out one effect (:mod:`netclaw.sessions._core.effects`) that starts work: it
submits one operation and returns at once; the outcome (or failure) is told to the
actor as a command carrying the ``op_id`` (``Recalled``, ``ProviderDone``, ``ToolsDone``,
``CompactionDone``, ``ExtractionDone``, ``MemoriesSaved``, ``OpFailed``). A model call
relays its streamed deltas back coalesced. Recall is its own op: the session records what
it found in the turn's tail before the call that carries it. The coroutines run on the
loop and talk to the actor only by ``tell``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pykka

from netclaw import attachments
from netclaw.errors import NetclawError
from netclaw.history import Flushed, flush_request, parse_flush
from netclaw.history.compaction import bound_summary, missing_sections, summary_request
from netclaw.llm import Completion, Delta, Provider, ProviderRequest, Usage
from netclaw.messages import Attachment, ChatMessage, ToolCall, Transcript
from netclaw.persistence import MemoryStore, NewMemory, format_recall
from netclaw.process.metrics import Metrics
from netclaw.process.runtime import Cancellable, IoLoop, Tellable
from netclaw.process.traces import NO_SPAN, Span
from netclaw.providers import Speech
from netclaw.sessions._core.compaction import CompactionOutcome, CompactionPlan
from netclaw.sessions._core.effects import (
    CallModel,
    Recall,
    RecallQuery,
    RunCompaction,
    RunExtraction,
    RunTools,
    SaveMemories,
    Speak,
    Transcribe,
)
from netclaw.sessions._core.extraction import ExtractionPlan
from netclaw.sessions._core.results import (
    CompactionDone,
    ExtractionDone,
    MemoriesSaved,
    OpFailed,
    ProviderDeltas,
    ProviderDone,
    Recalled,
    Spoken,
    ToolsDone,
    Transcribed,
)
from netclaw.tools import ToolContext, ToolRegistry, ToolResult

log = logging.getLogger(__name__)

RECALL_TIMEOUT_S = 0.5
T = TypeVar("T")


async def recalled(memory: MemoryStore, query: RecallQuery) -> str | None:
    """The block of memories relevant to the query (for the turn's volatile tail), or None."""
    try:
        async with asyncio.timeout(RECALL_TIMEOUT_S):  # no task of its own, unlike wait_for
            found = await memory.search(query.query, audience=query.audience, scope=query.scope, used=True)
    except Exception as exc:  # noqa: BLE001 - slow or broken recall: no recall, never a failed turn
        log.warning("memory recall skipped: %s", exc)
        return None
    return format_recall(found)


def recall(io: IoLoop, actor: Tellable, effect: Recall, memory: MemoryStore) -> Cancellable:
    op_id = effect.op_id
    return io.submit_and_tell(
        recalled(memory, effect.query),
        actor,
        lambda memories: Recalled(op_id, memories),
        lambda error: Recalled(op_id, None),  # never a failed turn
    )


async def heard(speech: Speech | None, file: Attachment, metrics: Metrics | None) -> Transcript:
    """What speech-to-text heard in one stored audio file (read off the loop), or why not."""
    if speech is None:
        return Transcript(error="speech-to-text is not configured (speech.transcription)")
    try:
        data = await asyncio.to_thread(Path(file.path).read_bytes)
    except OSError as exc:
        return Transcript(error=f"its stored file cannot be read ({exc.strerror or exc})")
    seconds = attachments.audio_seconds(data)
    started = time.perf_counter()
    transcript = await speech.transcribe(data, file.name, file.mime_type, seconds)
    if metrics is not None and transcript.model is not None:
        metrics.speech_seconds.labels("transcription", transcript.model).observe(
            time.perf_counter() - started
        )
    return transcript


async def transcribed(
    speech: Speech | None, effect: Transcribe, metrics: Metrics | None, span: Span = NO_SPAN
) -> tuple[tuple[int, Transcript], ...]:
    """Every audio file of the message heard, one after the other (a voice note is one file)."""
    try:
        found = tuple([(i, await heard(speech, f, metrics)) for i, f in effect.files])
    except BaseException as exc:
        span.fail(exc)
        span.end()
        raise
    if span.recording:
        span.update(
            {
                "gen_ai.request.model": next((t.model for _, t in found if t.model), None),
                "netclaw.speech.seconds": sum(t.seconds or 0.0 for _, t in found if t.text is not None),
                "netclaw.speech.failed": sum(1 for _, t in found if t.text is None),
            }
        )
    span.end()
    return found


def transcribe(
    io: IoLoop,
    actor: Tellable,
    effect: Transcribe,
    speech: Speech | None,
    metrics: Metrics | None,
    span: Span = NO_SPAN,
) -> Cancellable:
    op_id = effect.op_id

    def failed(error: BaseException) -> Transcribed:  # a bug here: still a notice, never a lost note
        why = f"the transcription failed unexpectedly ({type(error).__name__})"
        return Transcribed(op_id, tuple((i, Transcript(error=why)) for i, _ in effect.files))

    return io.submit_and_tell(
        transcribed(speech, effect, metrics, span), actor, lambda heard: Transcribed(op_id, heard), failed
    )


async def spoken(
    speech: Speech | None, effect: Speak, metrics: Metrics | None, data_dir: Path, session_id: str
) -> Spoken:
    """The reply spoken and its audio stored with the session's files (written off the
    loop), or why not."""
    if speech is None:
        return Spoken(effect.turn, None, error="text-to-speech is not configured (speech.synthesis)")
    started = time.perf_counter()
    said = await speech.synthesize(effect.text)
    if said.error is not None:
        return Spoken(effect.turn, None, said.chars, said.model, said.error)
    if metrics is not None and said.model is not None:
        metrics.speech_seconds.labels("synthesis", said.model).observe(time.perf_counter() - started)
    audio = attachments.IncomingFile(
        f"reply-{effect.turn}{Path(said.name).suffix}", said.mime_type, said.data
    )
    (stored,) = await asyncio.to_thread(attachments.store, data_dir, session_id, [audio])
    return Spoken(effect.turn, stored, said.chars, said.model)


def speak(
    io: IoLoop,
    actor: Tellable,
    effect: Speak,
    speech: Speech | None,
    metrics: Metrics | None,
    data_dir: Path,
    session_id: str,
) -> Cancellable:
    def failed(error: BaseException) -> Spoken:  # the reply stays text, and people are told
        return Spoken(effect.turn, None, error=f"the speech failed unexpectedly ({type(error).__name__})")

    return io.submit_and_tell(
        spoken(speech, effect, metrics, data_dir, session_id), actor, lambda s: s, failed
    )


class DeltaRelay:
    """Runs a model call on the loop and forwards its deltas to the actor, coalesced:
    every delta that arrives in one loop iteration travels in one ``tell``; the ones still
    waiting when the answer is complete travel with it (one message, not two). Deltas
    arriving while ``wanted()`` is false (nobody watches the session's streamed text: an
    API caller that waits for the answer, a webhook) are not relayed: the actor would only
    publish them to nobody, at a thread hop and a message handled per batch."""

    __slots__ = ("_first_ns", "_metrics", "_op_id", "_pending", "_ref", "_scheduled", "_span", "_wanted")

    def __init__(
        self,
        ref: Tellable,
        op_id: int,
        span: Span = NO_SPAN,
        metrics: Metrics | None = None,
        wanted: Callable[[], bool] = lambda: True,
    ) -> None:
        self._ref = ref
        self._op_id = op_id
        self._wanted = wanted
        self._pending: list[Delta] = []
        self._scheduled = False
        self._span = span  # the call's (telemetry.traces), ended here
        self._metrics = metrics  # the call's latency and time to first token, by model
        self._first_ns = 0  # when the first delta came (time to first token), if one did

    async def stream(
        self,
        provider: Provider,
        request: ProviderRequest,
        answered: Callable[[Completion], None] | None = None,
    ) -> ProviderDone:
        span, started = self._span, time.perf_counter_ns()
        try:
            with span.current():  # the provider's request carries its traceparent
                completion = await provider.complete(request, self._on_delta)
        except BaseException as exc:
            self._flush()  # what was shown before the failure still reaches the actor first
            span.fail(exc)
            span.end()
            raise
        first_s = (self._first_ns - started) / 1e9 if self._first_ns else None
        if self._metrics is not None:
            self._metrics.model_seconds.labels(request.model).observe(
                (time.perf_counter_ns() - started) / 1e9
            )
            if first_s is not None:
                self._metrics.first_token_seconds.labels(request.model).observe(first_s)
        if span.recording:
            span.set("gen_ai.response.time_to_first_chunk", first_s)
            if answered is not None:
                answered(completion)
            span.end()
        tail, self._pending = tuple(self._pending), []
        return ProviderDone(self._op_id, completion, tail)

    def _on_delta(self, delta: Delta) -> None:
        if not self._first_ns:
            self._first_ns = time.perf_counter_ns()
            self._span.event("first_token")
        if not self._wanted():
            return
        self._pending.append(delta)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._pending:
            batch, self._pending = tuple(self._pending), []
            with contextlib.suppress(pykka.ActorDeadError):
                self._ref.tell(ProviderDeltas(self._op_id, batch))


def call_model(
    io: IoLoop,
    actor: Tellable,
    effect: CallModel,
    provider: Provider,
    span: Span = NO_SPAN,
    answered: Callable[[Span, CallModel, Completion], None] | None = None,
    metrics: Metrics | None = None,
    wanted: Callable[[], bool] = lambda: True,
) -> Cancellable:
    relay = DeltaRelay(actor, effect.op_id, span, metrics, wanted)
    op_id = effect.op_id
    record = (lambda completion: answered(span, effect, completion)) if answered is not None else None
    return io.submit_and_tell(
        relay.stream(provider, effect.request, record),
        actor,
        lambda done: done,
        lambda error: OpFailed(op_id, error),
    )


def run_tools(
    io: IoLoop, actor: Tellable, effect: RunTools, tools: ToolRegistry, turn: Span = NO_SPAN
) -> Cancellable:
    op_id = effect.op_id
    return io.submit_and_tell(
        _round(tools, effect.calls, effect.timeout_s, effect.allowed, effect.context, effect.refusals, turn),
        actor,
        lambda results: ToolsDone(op_id, results),
        lambda error: OpFailed(op_id, error),
    )


async def _round(
    tools: ToolRegistry,
    calls: tuple[ToolCall, ...],
    timeout_s: float,
    allowed: Sequence[str] | None,
    context: ToolContext,
    refusals: Mapping[str, str],
    turn: Span = NO_SPAN,
) -> list[ToolResult]:
    running = [c for c in calls if c.id not in refusals]
    with turn.current():  # each call's span (the registry's) is the turn's child
        ran = iter(await tools.run_batch(running, timeout_s, allowed=allowed, context=context))
    return [ToolResult(c, refusals[c.id], True) if c.id in refusals else next(ran) for c in calls]


def compact(
    io: IoLoop,
    actor: Tellable,
    effect: RunCompaction,
    provider: Provider,
    memory: MemoryStore | None,
    span: Span = NO_SPAN,
) -> Cancellable:
    op_id = effect.op_id
    return io.submit_and_tell(
        _spanned(run_compaction(effect.plan, provider, memory), span),
        actor,
        lambda outcome: CompactionDone(op_id, outcome),
        lambda error: OpFailed(op_id, error),
    )


def extract(
    io: IoLoop, actor: Tellable, effect: RunExtraction, provider: Provider, memory: MemoryStore | None = None
) -> Cancellable:
    op_id = effect.op_id
    return io.submit_and_tell(
        run_extraction(effect.plan, provider, memory),
        actor,
        lambda observations: ExtractionDone(op_id, observations),
        lambda error: OpFailed(op_id, error),
    )


def save_memories(io: IoLoop, actor: Tellable, effect: SaveMemories, memory: MemoryStore) -> Cancellable:
    """Store what passivation extracted; the session records ``MemoriesExtracted`` once
    they are (whatever it is doing by then: a message may have woken it meanwhile)."""
    op_id, plan = effect.op_id, effect.plan
    saving = memory.add(
        [NewMemory(*observation) for observation in effect.observations],
        session_id=plan.session_id,
        audience=plan.audience,
        turn=plan.through_turn,
        scope=effect.scope,
    )
    return io.submit_and_tell(
        _time_boxed(saving, plan.budget_s),
        actor,
        lambda saved: MemoriesSaved(op_id, plan.through_turn, len(saved)),
        lambda error: OpFailed(op_id, error),
    )


async def _spanned(work: Awaitable[T], span: Span) -> T:
    """``work`` under ``span`` (current for it, so its model calls nest under it), then ended."""
    try:
        with span.current():
            return await work
    except BaseException as exc:
        span.fail(exc)
        raise
    finally:
        span.end()


async def _time_boxed(work: Awaitable[T], seconds: float) -> T:
    async with asyncio.timeout(seconds):
        return await work


# -- compaction's LLM tiers and memory extraction, on the loop ------------------------------


async def run_compaction(
    plan: CompactionPlan, provider: Provider, memory: MemoryStore | None
) -> CompactionOutcome:
    """The LLM tiers; the outcome carries the tokens their calls spent (however it ended)."""
    metered = _Metered(provider)
    outcome = await _run_compaction(plan, metered, memory)
    return replace(outcome, usage=metered.total())


class _Metered:
    """A provider that sums the usage of the calls made through it."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self._used: list[Usage] = []

    async def complete(self, request: ProviderRequest) -> Completion:
        completion = await self._provider.complete(request)
        if completion.usage is not None:
            self._used.append(completion.usage)
        return completion

    def total(self) -> Usage | None:
        if not self._used:
            return None
        return Usage(
            sum(u.input_tokens for u in self._used),
            sum(u.output_tokens for u in self._used),
            sum(u.cache_read_tokens for u in self._used),
            sum(u.cache_write_tokens for u in self._used),
        )


async def _run_compaction(
    plan: CompactionPlan, provider: _Metered, memory: MemoryStore | None
) -> CompactionOutcome:
    saved, flushed = 0, False
    try:
        async with asyncio.timeout(plan.budget_s):
            if plan.audience != "public":  # public sessions neither read nor plant memories
                try:
                    saved = await _flush(plan, provider, memory)
                    flushed = True
                except NetclawError as exc:
                    # Nothing lossy may happen before the flush: without it, no summary either.
                    return CompactionOutcome(
                        None, saved, False, f"memory flush failed ({exc}); summary skipped"
                    )
            try:
                return await _summarise(plan, provider, saved, flushed)
            except NetclawError as exc:
                return CompactionOutcome(
                    None, saved, flushed, f"summary failed ({exc}); history kept as it was"
                )
    except TimeoutError:
        return CompactionOutcome(
            None, saved, flushed, f"compaction took longer than {plan.budget_s:g}s and was abandoned"
        )


async def _flush(plan: CompactionPlan, provider: _Metered, memory: MemoryStore | None) -> int:
    known = await related_memories(memory, plan.to_summarise, plan.audience, plan.scope)
    completion = await provider.complete(_request(plan, flush_request(plan.to_summarise, known)))
    items = parse_flush(completion.text, {number for number, _ in known})
    if memory is None or not items:
        return 0
    stored = await memory.add(
        [NewMemory(*item) for item in items],
        session_id=plan.session_id,
        audience=plan.audience,
        turn=plan.turn,
        scope=plan.scope,
    )
    return len(stored)


async def _summarise(
    plan: CompactionPlan, provider: _Metered, saved: int, flushed: bool
) -> CompactionOutcome:
    missing: Sequence[str] = ()
    for _attempt in range(2):  # the quality guard: one retry naming what was missing
        messages = summary_request(plan.to_summarise, plan.prior_summary, plan.max_chars, missing)
        completion = await provider.complete(_request(plan, messages))
        text = completion.text.strip()
        missing = missing_sections(text)
        if not missing:
            return CompactionOutcome(bound_summary(text, plan.max_chars), saved, flushed)
        log.warning("%s: summary lacks sections %s", plan.session_id, list(missing))
    return CompactionOutcome(
        None,
        saved,
        flushed,
        f"summary cancelled: still missing {', '.join(missing)} after a retry; history kept as it was",
    )


def _request(plan: CompactionPlan, messages: list[ChatMessage]) -> ProviderRequest:
    return ProviderRequest(
        model=plan.model.model, messages=messages, tools=(), max_output_tokens=plan.model.max_output_tokens
    )


async def run_extraction(
    plan: ExtractionPlan, provider: Provider, memory: MemoryStore | None = None
) -> list[Flushed]:
    """``(text, kind)`` observations (with the number of the memory one replaces, when the
    model said so of one it was shown); TimeoutError past the plan's budget."""
    async with asyncio.timeout(plan.budget_s):
        known = await related_memories(memory, plan.messages, plan.audience, plan.scope)
        request = ProviderRequest(
            model=plan.model.model,
            messages=flush_request(plan.messages, known),
            tools=(),
            max_output_tokens=plan.model.max_output_tokens,
        )
        completion = await provider.complete(request)
    return parse_flush(completion.text, {number for number, _ in known})


RELATED_PER_MESSAGE = 3
RELATED_MAX = 10


async def related_memories(
    memory: MemoryStore | None, messages: Sequence[ChatMessage], audience: str, scope: str | None
) -> list[tuple[int, str]]:
    """The saved memories an extraction should see (number, text): recalled for each of the
    newest user messages, where the session's own memories live (its scope or
    audience-wide: never another channel's). None when the store fails: extraction goes
    on as before, adding only."""
    if memory is None or audience == "public":
        return []
    asked = [m.content for m in messages if m.is_real_user and m.content.strip()][-RELATED_MAX:]
    found: dict[int, str] = {}
    try:
        async with asyncio.timeout(RECALL_TIMEOUT_S):
            for text in reversed(asked):
                for m in await memory.search(text, audience=audience, scope=scope, limit=RELATED_PER_MESSAGE):
                    found.setdefault(m.id, m.text)
                if len(found) >= RELATED_MAX:
                    break
    except Exception as exc:  # noqa: BLE001 - a slow or broken store: extract without them
        log.warning("related memories for extraction skipped: %s", exc)
    return sorted(found.items())[:RELATED_MAX]
