"""A session's spans (``telemetry.traces``): the shell's view of a turn, from the effects it
carries out. The pure session decides nothing here and knows nothing of it.

- A turn's root span (``invoke_agent netclaw``) opens when the message that starts it
  arrived (``SendUserMessage.ts``) and ends when ``TurnRecorded`` is durable; a W3C context
  the message came with (an API request's ``traceparent``) is its parent, a sub-agent's
  task links to the parent's span that spawned it. Otherwise its trace id is derived from
  its message's id (:func:`~netclaw.process.traces.turn_trace_id`): a turn resumed after a
  restart opens its span at its first call, in the same trace, marked ``netclaw.turn.resumed``.
- Under it: the wait in the session's queue (``queue``), each journal write (``journal
  persist``), the voice notes heard before the first call (``transcribe``), each approval
  wait (``approval {tool}``), each model call (``chat {model}``,
  made here and handed to the call on the loop) and the tools (the registry makes one
  ``execute_tool {name}`` span per call, under the turn's span the tool round runs in).
- A compaction outside a turn is a root of its own.

All of it is a no-op when traces are off (:data:`netclaw.process.traces.OFF`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from netclaw.config import LiveSettings, Price
from netclaw.llm import Completion
from netclaw.messages import ChatMessage
from netclaw.process.metrics import Metrics
from netclaw.process.traces import NO_SPAN, AttributeValue, Carrier, Span, Tracing, turn_trace_id
from netclaw.security.policy import channel_of
from netclaw.security.redact import redact
from netclaw.sessions._core.commands import SendUserMessage
from netclaw.sessions._core.effects import CallModel, RunCompaction, Transcribe
from netclaw.sessions._core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    InputAdmitted,
    ModelSwitched,
    SessionCompacted,
    SessionEvent,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import SessionState
from netclaw.spend import cost_of

MAX_WAITING = 256  # arrivals remembered until their turn starts (a longer queue: spans start late)


class _Arrival:
    __slots__ = ("carrier", "link", "start_ns")

    def __init__(self, start_ns: int, carrier: Carrier, link: bool) -> None:
        self.start_ns = start_ns
        self.carrier = carrier
        self.link = link


class TurnTracer:
    """One session's open spans; called on the actor's thread only (model spans end on the
    loop, which only ends them)."""

    def __init__(
        self, session_id: str, tracing: Tracing, live: LiveSettings, metrics: Metrics | None = None
    ) -> None:
        self._id = session_id
        self._tracing = tracing
        self._live = live
        self._metrics = metrics  # the queue wait is measured whether traces are on or not
        self.enabled = tracing.enabled
        self._arriving: _Arrival | None = None  # the SendUserMessage being handled
        self._waiting: dict[str, _Arrival] = {}  # admitted message id -> its arrival
        self._turn: Span = NO_SPAN
        self._turn_number = 0
        self._approvals: dict[str, Span] = {}

    @property
    def turn(self) -> Span:
        """The running turn's span (what its work on the loop runs under)."""
        return self._turn

    # -- what the actor receives and writes

    def received(self, command: object) -> None:
        if isinstance(command, SendUserMessage):
            start_ns = int(command.ts * 1e9)
            self._arriving = _Arrival(start_ns, command.trace, link=command.subagent is not None)

    def handled(self) -> None:
        self._arriving = None

    def persisted(self, events: Sequence[SessionEvent]) -> None:
        """``events`` are durable: open and close what they start and end."""
        for event in events:
            match event:
                case InputAdmitted(message=message) if self._arriving is not None:
                    if len(self._waiting) >= MAX_WAITING:
                        self._waiting.pop(next(iter(self._waiting)))
                    self._waiting[message.id] = self._arriving
                case TurnStarted(turn=turn, message_id=message_id):
                    arrival = self._waiting.pop(message_id, None)
                    if arrival is not None and self._metrics is not None:
                        self._metrics.queue_seconds.observe(_since(arrival.start_ns))
                    if self.enabled:
                        self._start_turn(turn, message_id, arrival)
                case _ if not self.enabled:
                    pass
                case ApprovalRequested(requests=requests):
                    for request in requests:
                        self._approvals[request.id] = self._turn.child(
                            f"approval {request.tool}",
                            {"gen_ai.tool.name": request.tool, "gen_ai.tool.call.id": request.call_id},
                        )
                case ApprovalDecided(approval_id=approval_id, decision=decision, by=by):
                    waited = self._approvals.pop(approval_id, None)
                    if waited is not None:
                        waited.update({"netclaw.approval.decision": decision, "netclaw.approval.by": by})
                        waited.end()
                case ModelSwitched(from_model=old, to_model=new, reason=reason):
                    self._turn.event("model_switched", {"from": old, "to": new, "reason": reason})
                case SessionCompacted(tiers=tiers, tokens_before=before, tokens_after=after):
                    self._turn.event(
                        "compacted", {"tiers": list(tiers), "tokens_before": before, "tokens_after": after}
                    )
                case TurnRecorded():
                    self._end_turn(event)
                case _:
                    pass

    def journal(self, events: Sequence[SessionEvent]) -> Span:
        """The span of one journal write (the actor's one blocking wait)."""
        if not self._turn.recording:
            return NO_SPAN
        return self._turn.child("journal persist", {"netclaw.journal.events": len(events)})

    # -- work started on the loop

    def model_call(self, effect: CallModel, state: SessionState | None) -> Span:
        """``chat {model}``: ended by the call on the loop (:func:`ended_call`)."""
        if not self.enabled:
            return NO_SPAN
        if not self._turn.recording and state is not None and state.active is not None:
            self._start_turn(state.active.turn, state.active.message_id, None, resumed=True)
        request = effect.request
        provider = self._live.current.providers.get(effect.provider)
        span = self._turn.child(
            f"chat {request.model}",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider.type if provider is not None else effect.provider,
                "gen_ai.request.model": request.model,
                "gen_ai.request.max_tokens": request.max_output_tokens,
                "gen_ai.conversation.id": self._id,
                "netclaw.provider": effect.provider,
            },
            client=True,
        )
        if span.captures:
            span.set("gen_ai.input.messages", _messages(request.messages))
        return span

    def ended_call(self, span: Span, effect: CallModel, completion: Completion) -> None:
        """What a model call answered, on its span (called on the loop before it ends)."""
        if not span.recording:
            return
        usage = completion.usage
        span.update(
            {
                "gen_ai.response.model": effect.request.model,
                "gen_ai.response.finish_reasons": [completion.finish_reason or "stop"],
                "gen_ai.usage.input_tokens": usage.input_tokens if usage else None,
                "gen_ai.usage.output_tokens": usage.output_tokens if usage else None,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens if usage else None,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens if usage else None,
                "netclaw.tool_calls": len(completion.tool_calls),
            }
        )
        if span.captures:
            span.set("gen_ai.output.messages", _output(completion))
        if usage is not None:
            price = self._price(effect)
            if price is not None:
                span.set("netclaw.cost", cost_of(usage, price))

    def transcription(self, effect: Transcribe) -> Span:
        """``transcribe``: the turn's voice notes heard (ended on the loop, with what came back)."""
        if not self._turn.recording:
            return NO_SPAN
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "transcribe",
            "netclaw.speech.files": len(effect.files),
        }
        return self._turn.child("transcribe", attributes, client=True)

    def compaction(self, effect: RunCompaction) -> Span:
        plan = effect.plan
        attributes: dict[str, AttributeValue] = {
            "netclaw.session.id": self._id,
            "netclaw.compaction.messages": len(plan.to_summarise),
            "gen_ai.request.model": plan.model.model,
        }
        if self._turn.recording:
            return self._turn.child("compaction", attributes)
        return self._tracing.root("compaction", attributes)

    def close(self) -> None:
        """The actor stops or broke: what is open ends, marked so."""
        for waited in self._approvals.values():
            waited.fail("interrupted")
            waited.end()
        self._approvals.clear()
        if self._turn.recording:
            self._turn.fail("interrupted")
            self._turn.end()
        self._turn = NO_SPAN

    # -- the turn's root

    def _start_turn(
        self, turn: int, message_id: str, arrival: _Arrival | None, *, resumed: bool = False
    ) -> None:
        if self._turn.recording:  # a turn that never recorded its end (cannot happen): close it
            self._turn.fail("superseded")
            self._turn.end()
        self._turn_number = turn
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "netclaw",
            "gen_ai.conversation.id": self._id,
            "netclaw.session.id": self._id,
            "netclaw.channel": channel_of(self._id),
            "netclaw.turn": turn,
        }
        if resumed:
            attributes["netclaw.turn.resumed"] = True
        # Unless a caller's trace goes on here, the turn's own trace: the same after a restart.
        trace_id = turn_trace_id(self._id, message_id)
        if arrival is None:
            self._turn = self._tracing.root("invoke_agent netclaw", attributes, trace_id=trace_id)
            return
        parent, link = ((), arrival.carrier) if arrival.link else (arrival.carrier, ())
        self._turn = self._tracing.root(
            "invoke_agent netclaw",
            attributes,
            parent=parent,
            link=link,
            start_ns=arrival.start_ns,
            trace_id=trace_id,
        )
        queued = self._turn.child(
            "queue", {"netclaw.queue.waited_s": _since(arrival.start_ns)}, start_ns=arrival.start_ns
        )
        queued.end()

    def _end_turn(self, recorded: TurnRecorded) -> None:
        span = self._turn
        if not span.recording:
            return
        spent = recorded.spent or {}
        span.update(
            {
                "netclaw.turn.status": recorded.status,
                "gen_ai.response.model": recorded.model,
                "gen_ai.usage.input_tokens": spent.get("input_tokens"),
                "gen_ai.usage.output_tokens": spent.get("output_tokens"),
                "gen_ai.usage.cache_read.input_tokens": spent.get("cache_read_tokens"),
                "netclaw.cost": recorded.cost,
            }
        )
        if recorded.status != "completed":
            error = recorded.error or {}
            span.fail(error.get("code") or recorded.status)
        for waited in self._approvals.values():
            waited.end()
        self._approvals.clear()
        span.end()
        self._turn = NO_SPAN

    def _price(self, effect: CallModel) -> Price | None:
        for model in self._live.current.models.named().values():
            if model.provider == effect.provider and model.model == effect.request.model:
                return model.price
        return None


def _since(start_ns: int) -> float:
    return max(0.0, (time.time_ns() - start_ns) / 1e9)


def _messages(messages: Sequence[ChatMessage]) -> str:
    """The request's messages as the GenAI conventions' ``gen_ai.input.messages`` (JSON),
    redacted once more (telemetry.capture_content)."""
    shown = []
    for message in messages:
        parts: list[dict[str, str]] = [{"type": "text", "content": redact(message.content).text}]
        parts += [
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": redact(call.arguments).text}
            for call in message.tool_calls
        ]
        shown.append({"role": message.role, "parts": parts})
    return json.dumps(shown, ensure_ascii=False)


def _output(completion: Completion) -> str:
    parts: list[dict[str, str]] = [{"type": "text", "content": redact(completion.text).text}]
    parts += [
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": redact(call.arguments).text}
        for call in completion.tool_calls
    ]
    finish = completion.finish_reason or "stop"
    return json.dumps([{"role": "assistant", "parts": parts, "finish_reason": finish}], ensure_ascii=False)
