"""A person chooses a session's model (``/model NAME``, ``PUT /api/sessions/{id}/model``,
``netclaw sessions model``), whatever the session is doing: checked against the config,
journaled (``ModelPinned``, so the choice survives restarts), shown, and in force from the
next turn — a turn in progress finishes on the model it started with. The prompt is fitted
to the new model's window when that turn starts (:class:`netclaw.sessions._core.context.build.ModelContext`)."""

from __future__ import annotations

import logging

from netclaw import outputs as out
from netclaw.errors import InvalidInput
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.commands import PinModel
from netclaw.sessions._core.effects import Refuse
from netclaw.sessions._core.journal.events import ModelPinned
from netclaw.sessions._core.status import model_choice

log = logging.getLogger(__name__)


def pin(core: Core, command: PinModel) -> None:
    name, state, context = command.model, core.state, core.context
    if name is not None and not context.known(name):
        known = ", ".join(core.settings.models.named())
        core.emit(
            Refuse(command.reply, InvalidInput("model", f"there is no model {name!r} (models: {known})"))
        )
        return
    before = context.chosen(state)
    if name != state.model_pin:
        core.persist(ModelPinned(name, command.by))
    choice = model_choice(core.state, context)
    if core.state.active is None:  # no turn on the old one: /status shows the new one at once
        context.use_model(choice.model)
    if choice.model != before or name != state.model_pin:
        log.info("%s: model %s chosen by %s", core.session_id, choice.model, command.by)
        core.publish(
            out.ModelSwitched(
                session_id=core.session_id,
                from_model=before,
                to_model=choice.model,
                reason="pinned" if name is not None else "default",
            )
        )
        if command.announce:
            when = "from the next turn" if core.state.active is not None else "from now on"
            text = f"This conversation uses model {choice.model} ({choice.model_id}) {when}."
            core.publish(out.Notice(session_id=core.session_id, text=text, kind="model_switched"))
    core.answer(command.reply, choice)
