"""Around each call of a turn (pure pieces the turn activity, :mod:`netclaw.sessions._core.activities.turning`, puts in
order): the memories to recall and the turn's volatile tail before its first model call,
the spend guards, a trim of the prompt, the request itself, the switch to a fallback
model when the model in use stays unavailable, and the run of a round's tools.

Each records what it decides before anything acts on it — the tail before the request
that carries it, the switch before the call that goes to the fallback — so a retry, an
overflow re-send or a turn resumed after a crash sends the same request again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping

from netclaw import outputs as out
from netclaw.errors import ProviderError
from netclaw.history import TrimResult
from netclaw.llm import ProviderRequest, ToolSchema
from netclaw.messages import ToolCall
from netclaw.security.policy import channel_of, recall_allowed, recall_scope
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.context.prompt import Prompt
from netclaw.sessions._core.context.tail import has_tail, time_is_news, volatile_tail
from netclaw.sessions._core.effects import CallModel, Measure, RecallQuery, RunTools
from netclaw.sessions._core.journal.events import ContextAttached, ModelSwitched
from netclaw.sessions._core.turn import TurnRun, trim_step
from netclaw.spend import SpendStop, Spent, spend_stop, utc_day

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
    state, audience, settings = core.state, core.context.audience, core.settings
    # Never for a payload from outside (webhooks) or an audience without recall.
    if (
        run.iteration > 0
        or not recall_allowed(audience, settings)
        or channel_of(state.session_id) == "webhook"
    ):
        return None
    message = state.find_message(run.message_id)
    if message is None:
        return None
    # What was said aloud is asked about too (a voice note's transcript, recorded by now).
    heard = [f.transcript.text for f in message.files if f.transcript is not None and f.transcript.text]
    query = "\n".join([message.content, *heard]).strip() if heard else message.content
    return RecallQuery(query, audience, recall_scope(state.session_id, audience, settings, state.place))


def attach_tail(core: Core, run: TurnRun, memories: str | None) -> None:
    """Record the turn's volatile tail, when there is something to tell: on its first call
    the time (when it is news) and the memories recalled; after a restart, that one
    interrupted the session (once)."""
    now = core.now()
    fresh = not has_tail(core.state, run.message_id)
    stopped_at = core.take_continuity()
    tell_time = (fresh and time_is_news(core.state, now)) or stopped_at is not None
    tail = volatile_tail(
        now,
        tell_time=tell_time,
        memories=memories if fresh else None,
        stopped_at=stopped_at,
        new_id=core.new_id,
    )
    if tail is not None:
        core.persist(ContextAttached(run.turn, tail, told_time=tell_time))


def spend_stopped(core: Core, run: TurnRun) -> SpendStop | None:
    """The spend guards before another model call (netclaw.spend): a sub-agent's token
    budget; this session's day — its recorded turns and this turn's calls so far, its
    sub-agents' included — and the daemon's."""
    state, now = core.state, core.now()
    task = state.task
    if task is not None and task.budget_tokens is not None:
        used = state.tokens_total + run.input_tokens + run.output_tokens
        if used >= task.budget_tokens:
            message = (
                f"This sub-agent used its token budget ({used:,} of {task.budget_tokens:,} tokens), "
                "so it stops here; its parent may give the rest to another."
            )
            return SpendStop("budget_tokens", message, None)
    day = utc_day(now)
    session = Spent(
        state.tokens_spent_on(day) + run.input_tokens + run.output_tokens,
        state.cost_spent_on(day) + run.cost,
    )
    return spend_stop(core.settings, session, core.spend.on(day), now)


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


def tools_call(
    core: Core, run: TurnRun, op_id: int, calls: tuple[ToolCall, ...], refused: Mapping[str, str]
) -> RunTools:
    """The run of a round's ``calls`` (``refused``: the ones that get why instead)."""
    settings = core.settings
    return RunTools(
        op_id,
        calls,
        timeout_s=min(settings.tools.call_timeout_s, settings.session.turn_timeout_s),
        allowed=core.context.allowed_tools,
        context=core.context.tool_context(run.turn, core.state.place),
        refusals=refused,
        model=core.context.model_name,
    )


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
