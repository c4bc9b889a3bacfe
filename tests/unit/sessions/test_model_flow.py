"""Models, driven through the pure session: a call that stays unavailable goes on with the
next fallback within the same turn (journaled, shown, the prompt fitted to the fallback's
window); a person pins the session's model (journaled, from the next turn on, kept across
a recovery); an unknown model is refused naming the known ones."""

from __future__ import annotations

from typing import Any

import pytest

from netclaw import outputs as out
from netclaw.errors import InvalidInput, ProviderAuthError, ProviderUnavailable, RateLimited
from netclaw.sessions._core.commands import PinModel, ReportStatus
from netclaw.sessions._core.effects import CallModel, Refuse
from netclaw.sessions._core.journal.events import ModelPinned, ModelSwitched, TurnRecorded
from netclaw.sessions._core.status import ModelChoice
from tests.unit.sessions.harness import Driver

PROVIDERS = {
    "local": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"},
    "backup": {"type": "anthropic", "base_url": "http://127.0.0.1:8"},
}


def models(**extra: Any) -> dict[str, Any]:
    return {
        "main": {"provider": "local", "model": "scripted", "context_window": 32768, "fallbacks": ["spare"]},
        "spare": {
            "provider": "backup",
            "model": "claude-scripted",
            "context_window": 8192,
            "max_output_tokens": 1024,
        },
        "big": {"provider": "local", "model": "big-model", "context_window": 131072},
        **extra,
    }


def driver(**sections: Any) -> Driver:
    return Driver(providers=PROVIDERS, models=models(), **sections)


def test_an_unavailable_model_hands_the_turn_to_its_fallback() -> None:
    d = driver()
    d.send("hello")
    first = d.pending(CallModel)
    assert (first.provider, first.request.model) == ("local", "scripted")
    effects = d.fail_call(ProviderUnavailable("provider 'local' is overloaded: try again later"))
    (switched,) = [e for e in d.events(effects) if isinstance(e, ModelSwitched)]
    assert switched == ModelSwitched(1, "main", "spare", "provider_unavailable")
    second = d.pending(CallModel)
    assert second.op_id != first.op_id
    assert (second.provider, second.request.model) == ("backup", "claude-scripted")
    assert second.request.max_output_tokens == 1024
    assert second.request.messages == first.request.messages  # the same prompt, moved
    shown = [o for o in d.outputs(effects) if isinstance(o, out.ModelSwitched)]
    assert shown == [
        out.ModelSwitched(
            session_id="cli:t", from_model="main", to_model="spare", reason="provider_unavailable", turn=1
        )
    ]
    assert any(isinstance(o, out.Notice) and o.kind == "model_switched" for o in d.outputs(effects))
    effects = d.answer("hi from the spare")
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "completed" and recorded.model == "claude-scripted"
    # Between turns the session's model is its own again, as /model, the API and the CLI say.
    reply = d.reply()
    (report,) = d.answers(reply, d.handle(ReportStatus(reply)))
    assert (report.model_name, report.model, report.context_window) == ("main", "scripted", 32768)
    # The next turn starts on the session's own model again.
    d.send("again")
    assert d.pending(CallModel).request.model == "scripted"
    d.close()


def test_the_fallback_gets_a_prompt_fitted_to_its_window() -> None:
    d = driver(history={"low_water": 0.6})
    for n in range(12):
        d.send(f"message {n} " + "words " * 600)
        d.answer("ok " * 50, input_tokens=1000)
    d.send("and now?")
    d.fail_call(RateLimited("rate limited", retry_after=None))
    request = d.pending(CallModel).request
    budget = d.session.context.budget()
    assert budget.context_window == 8192 and budget.model == "spare"
    assert d.session.context.prompts.estimate(d.state, request.tools) < 8192
    assert request.messages[-1].content == "and now?"
    d.close()


def test_no_fallback_for_a_terminal_error_or_when_the_list_is_used_up() -> None:
    d = driver()
    d.send("hello")
    effects = d.fail_call(ProviderAuthError("bad key"))
    assert not [e for e in d.events(effects) if isinstance(e, ModelSwitched)]
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "failed" and recorded.error is not None
    assert recorded.error["code"] == "provider_auth"
    d.send("again")
    d.fail_call(ProviderUnavailable("down"))
    effects = d.fail_call(ProviderUnavailable("down too"))  # the spare fails as well: nothing left
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "failed" and recorded.error is not None
    assert recorded.error["code"] == "provider_unavailable"
    d.close()


def test_a_pin_is_journaled_shown_and_used_from_the_next_turn() -> None:
    d = driver()
    d.send("first")
    reply = d.reply()
    effects = d.handle(PinModel("big", "U1", reply))  # mid-turn: this turn keeps its model
    assert ModelPinned("big", "U1") in d.events(effects)
    (choice,) = d.answers(reply, effects)
    assert isinstance(choice, ModelChoice)
    assert (choice.model, choice.model_id, choice.pinned) == ("big", "big-model", True)
    assert "spare" in choice.available
    assert any(isinstance(o, out.ModelSwitched) and o.reason == "pinned" for o in d.outputs(effects))
    d.answer("on main still")
    assert [e.request.model for e in d.effects if isinstance(e, CallModel)] == ["scripted"]
    d.send("second")
    assert d.pending(CallModel).request.model == "big-model"
    assert d.session.context.budget().context_window == 131072
    # Recovered from its state (a restart), it keeps the pin.
    again = Driver(state=d.state, providers=PROVIDERS, models=models())
    again.send("third")
    assert again.pending(CallModel).request.model == "big-model"
    # And back to main.
    reply = again.reply()
    effects = again.handle(PinModel(None, "api", reply))
    assert ModelPinned(None, "api") in again.events(effects)
    again.answer("done")
    again.send("fourth")
    assert again.pending(CallModel).request.model == "scripted"
    d.close()
    again.close()


def test_an_unknown_model_is_refused_naming_the_known_ones() -> None:
    d = driver()
    reply = d.reply()
    effects = d.handle(PinModel("nope", "U1", reply))
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert isinstance(refused.error, InvalidInput)
    assert "main" in str(refused.error) and "spare" in str(refused.error)
    assert not d.events(effects)
    d.close()


@pytest.mark.parametrize("pin", ["spare", None])
def test_a_pinned_model_that_left_the_config_falls_back_to_main(pin: str | None) -> None:
    d = driver()
    d.handle(PinModel(pin, "U1", d.reply()))
    plain = Driver(state=d.state)  # a config without the extra models
    plain.send("hi")
    assert plain.pending(CallModel).request.model == "scripted"
    d.close()
    plain.close()
