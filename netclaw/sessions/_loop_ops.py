"""Work a session actor hands to the I/O loop, and how its outcome comes back.

Each ``start_*`` submits one operation and returns at once; its result (or failure)
is told to the actor as a message carrying the ``op_id`` (``ProviderDone``,
``ToolsDone``, ``CompactionDone``, ``OpFailed``). A provider call relays its streamed
deltas back coalesced, with relevant memories recalled into its prompt first. The
coroutines run on the loop and talk to the actor only by ``tell``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pykka

from netclaw.messages import ToolCall, system
from netclaw.persistence import MemoryStore, format_recall
from netclaw.providers import Delta, Provider, ProviderRequest
from netclaw.runtime import Cancellable, IoLoop, Tellable
from netclaw.sessions._commands import (
    CompactionDone,
    ExtractionDone,
    OpFailed,
    ProviderDeltas,
    ProviderDone,
    ToolsDone,
)
from netclaw.sessions._compaction import CompactionPlan, run_compaction
from netclaw.sessions._extraction import ExtractionPlan, run_extraction
from netclaw.tools import ToolContext, ToolRegistry, ToolResult

log = logging.getLogger(__name__)

RECALL_TIMEOUT_S = 0.5


@dataclass(frozen=True, slots=True)
class Recall:
    """Relevant memories, put in a volatile block after the system prompt (never journaled)."""

    memory: MemoryStore
    query: str
    audience: str
    scope: str | None = None  # only memories made there (or audience-wide ones)

    async def into(self, request: ProviderRequest) -> ProviderRequest:
        try:
            async with asyncio.timeout(RECALL_TIMEOUT_S):  # no task of its own, unlike wait_for
                found = await self.memory.search(self.query, audience=self.audience, scope=self.scope)
        except Exception as exc:  # noqa: BLE001 - slow or broken recall: no recall, never a failed turn
            log.warning("memory recall skipped: %s", exc)
            return request
        block = format_recall(found)
        if block is None:
            return request
        messages = list(request.messages)
        messages.insert(1, system(block, id="recall"))
        return replace(request, messages=messages)


class DeltaRelay:
    """Runs a provider call on the loop and forwards its deltas to the actor, coalesced:
    every delta that arrives in one loop iteration travels in one ``tell``; the ones still
    waiting when the answer is complete travel with it (one message, not two)."""

    __slots__ = ("_op_id", "_pending", "_recall", "_ref", "_scheduled")

    def __init__(self, ref: Tellable, op_id: int, recall: Recall | None = None) -> None:
        self._ref = ref
        self._op_id = op_id
        self._recall = recall
        self._pending: list[Delta] = []
        self._scheduled = False

    async def stream(self, provider: Provider, request: ProviderRequest) -> ProviderDone:
        if self._recall is not None:
            request = await self._recall.into(request)
        try:
            completion = await provider.complete(request, self._on_delta)
        except BaseException:
            self._flush()  # what was shown before the failure still reaches the actor first
            raise
        tail, self._pending = tuple(self._pending), []
        return ProviderDone(self._op_id, completion, tail)

    def _on_delta(self, delta: Delta) -> None:
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


def start_provider_call(
    io: IoLoop,
    actor: Tellable,
    op_id: int,
    provider: Provider,
    request: ProviderRequest,
    recall: Recall | None,
) -> Cancellable:
    relay = DeltaRelay(actor, op_id, recall)
    return io.submit_and_tell(
        relay.stream(provider, request),
        actor,
        lambda done: done,
        lambda error: OpFailed(op_id, error),
    )


def start_tool_batch(
    io: IoLoop,
    actor: Tellable,
    op_id: int,
    tools: ToolRegistry,
    calls: tuple[ToolCall, ...],
    *,
    timeout_s: float,
    allowed: list[str] | None,
    context: ToolContext,
    refusals: Mapping[str, str] | None = None,
) -> Cancellable:
    """Run a tool round; a call in ``refusals`` (call id → why) does not run, and its result
    is the reason (denied, expired) so the model sees every call answered."""
    return io.submit_and_tell(
        _round(tools, calls, timeout_s, allowed, context, refusals or {}),
        actor,
        lambda results: ToolsDone(op_id, results),
        lambda error: OpFailed(op_id, error),
    )


async def _round(
    tools: ToolRegistry,
    calls: tuple[ToolCall, ...],
    timeout_s: float,
    allowed: list[str] | None,
    context: ToolContext,
    refusals: Mapping[str, str],
) -> list[ToolResult]:
    running = [c for c in calls if c.id not in refusals]
    ran = iter(await tools.run_batch(running, timeout_s, allowed=allowed, context=context))
    return [ToolResult(c, refusals[c.id], True) if c.id in refusals else next(ran) for c in calls]


def start_compaction(
    io: IoLoop,
    actor: Tellable,
    op_id: int,
    plan: CompactionPlan,
    provider: Provider,
    memory: MemoryStore | None,
) -> Cancellable:
    return io.submit_and_tell(
        run_compaction(plan, provider, memory),
        actor,
        lambda outcome: CompactionDone(op_id, outcome),
        lambda error: OpFailed(op_id, error),
    )


def start_extraction(
    io: IoLoop, actor: Tellable, op_id: int, plan: ExtractionPlan, provider: Provider
) -> Cancellable:
    return io.submit_and_tell(
        run_extraction(plan, provider),
        actor,
        lambda observations: ExtractionDone(op_id, observations),
        lambda error: OpFailed(op_id, error),
    )
