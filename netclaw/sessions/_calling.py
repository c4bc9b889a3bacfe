"""Around each model call of a turn (pure pieces the turn activity, :mod:`._turning`, puts
in order): the turn's volatile tail before its first call, the spend guards, a trim of the
prompt, the request itself, and the switch to a fallback model when the model in use
stays unavailable.

Each records what it decides before anything acts on it — the tail before the request
that carries it, the switch before the call that goes to the fallback — so a retry, an
overflow re-send or a turn resumed after a crash sends the same request again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from netclaw import outputs as out
from netclaw.errors import ProviderError
from netclaw.history import TrimResult
from netclaw.llm import ProviderRequest, ToolSchema
from netclaw.sessions._core import Core
from netclaw.sessions._effects import CallModel, Measure, RecallQuery
from netclaw.sessions._events import ContextAttached, ModelSwitched
from netclaw.sessions._prompt import Prompt
from netclaw.sessions._tail import has_tail, time_is_news, volatile_tail
from netclaw.sessions._turn import TurnRun, recall_query, spend_check, trim_step
from netclaw.spend import SpendStop

log = logging.getLogger(__name__)


def recall_for(core: Core, run: TurnRun) -> RecallQuery | None:
    """The memories to look up before the turn's first call — only while its tail is not
    recorded yet (a turn resumed after a crash keeps the one it had)."""
    if (
        not core.has_memory
        or not core.may_recall(core.context.audience)
        or has_tail(core.state, run.message_id)
    ):
        return None
    return recall_query(core.state, run, core.context.audience, core.settings)


def attach_tail(core: Core, run: TurnRun, memories: str | None) -> None:
    """Record the turn's volatile tail, when there is something to tell: on its first call
    the time (when it is news) and the memories recalled; after a restart, that one
    interrupted the session (once)."""
    now = core.now()
    fresh = not has_tail(core.state, run.message_id)
    stopped_at = core.take_continuity()
    tell_time = (fresh and time_is_news(core.state, now)) or stopped_at is not None
    tail = volatile_tail(
        now, tell_time=tell_time, memories=memories if fresh else None, stopped_at=stopped_at
    )
    if tail is not None:
        core.persist(ContextAttached(run.turn, tail, told_time=tell_time))


def spend_stopped(core: Core, run: TurnRun) -> SpendStop | None:
    return spend_check(core.state, run, core.settings, core.spend, core.now())


def stop_detail(stop: SpendStop) -> dict[str, str]:
    """What a spend stop records with the turn's error (the API's 429 reads ``resets_at``)."""
    if stop.resets_at is None:
        return {"cap": stop.cap}
    resets = dt.datetime.fromtimestamp(stop.resets_at, dt.UTC).isoformat()
    return {"cap": stop.cap, "resets_at": resets}


def model_call(core: Core, run: TurnRun, op_id: int, prompt: Prompt, tools: list[ToolSchema]) -> CallModel:
    """The call of ``prompt`` to the model the turn is on now."""
    model = core.context.model
    run.model, run.model_name = model.model, core.context.model_name
    request = ProviderRequest(
        model=model.model,
        messages=prompt.messages,
        tools=tools,
        max_output_tokens=model.max_output_tokens,
        vision=model.vision,
        cache_key=core.context.cache_key,
    )
    return CallModel(op_id, request, model.provider)


def fall_back(core: Core, run: TurnRun, error: ProviderError) -> bool:
    """The model stayed unavailable after its retries: go on with the next of the fallbacks
    of the model the turn started on (recorded, and shown). False when none is left."""
    if not error.retryable or not run.tried:
        return False
    left = [name for name in core.context.fallbacks(run.tried[0]) if name not in run.tried]
    if not left:
        return False
    old, new = run.model_name, left[0]
    core.persist(ModelSwitched(run.turn, old, new, error.code))
    core.context.use_model(new)  # the next prompt is fitted to its window
    run.tried.append(new)
    run.model_name = new
    log.warning(
        "%s: turn %d goes on with model %s: %s failed: %s", core.session_id, run.turn, new, old, error
    )
    core.publish(
        out.ModelSwitched(
            session_id=core.session_id, from_model=old, to_model=new, reason=error.code, turn=run.turn
        ),
        out.Notice(
            session_id=core.session_id,
            text=f"Model {old} is not answering ({error.code}); this turn goes on with {new}.",
            kind="model_switched",
        ),
    )
    return True


def record_trim(core: Core, trim: TrimResult, reason: str) -> None:
    """Never silent: journal it, tell every subscriber, log one line."""
    event, output = trim_step(core.session_id, trim, reason)
    core.persist(event)
    core.emit(Measure("trims", 1))
    log.info("%s: history_trimmed %s", core.session_id, json.dumps(event.to_payload(), sort_keys=True))
    core.publish(output)
