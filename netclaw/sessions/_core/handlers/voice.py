"""Spoken replies (pure): a person turns them on or off for a conversation (``/voice``,
journaled as ``VoiceRepliesSet``; else the audience's ``voice_replies``); a completed
turn's reply is then also spoken (``Speak``), and what comes back (``Spoken``) is the
audio file, recorded and sent beside the text — or, when text-to-speech failed, a notice
that the reply stays text."""

from __future__ import annotations

import logging

from netclaw import outputs as out
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.commands import SetVoice
from netclaw.sessions._core.effects import Charge, Speak
from netclaw.sessions._core.journal.events import ReplySpoken, VoiceRepliesSet
from netclaw.sessions._core.results import Spoken
from netclaw.sessions._core.status import VoiceChoice
from netclaw.spend import spoken_cost, utc_day

log = logging.getLogger(__name__)


def choice(core: Core) -> VoiceChoice:
    chosen = core.state.voice_replies
    default = core.settings.audience(core.context.audience).voice_replies
    available = core.settings.speech.synthesis is not None
    return VoiceChoice(core.session_id, default if chosen is None else chosen, chosen is not None, available)


def choose(core: Core, command: SetVoice) -> None:
    """``/voice on|off`` (``on`` None: only say which is in force)."""
    if command.on is not None and command.on != core.state.voice_replies:
        core.persist(VoiceRepliesSet(command.on, command.by))
        log.info("%s: spoken replies %s by %s", core.session_id, "on" if command.on else "off", command.by)
    core.answer(command.reply, choice(core))


def speak_reply(core: Core, turn: int, text: str) -> None:
    """A completed turn's reply, spoken too where the conversation wants it."""
    wanted = choice(core)
    if text.strip() and wanted.on and wanted.available:
        core.emit(Speak(turn, text))


def spoken(core: Core, result: Spoken) -> None:
    """The audio is recorded (its cost counts like a model call's) and sent beside the
    text; a failure leaves the reply as text, and people are told."""
    if result.file is None:
        text = f"I could not speak this reply, so it is text only: {result.error or 'no audio came back'}"
        core.publish(out.Notice(session_id=core.session_id, text=text, kind="speech_failed"))
        return
    synthesis = core.settings.speech.synthesis
    price = None
    if synthesis is not None:
        price = next(
            (e.price_per_million_chars for e in (synthesis, *synthesis.fallbacks) if e.model == result.model),
            None,
        )
    cost = spoken_cost(result.chars, price)
    core.persist(
        ReplySpoken(
            result.turn,
            result.file,
            {"speech_chars": result.chars},
            round(cost, 9) if cost else None,
            result.model,
        )
    )
    if cost:
        core.emit(Charge(utc_day(core.now()), result.model or "speech", 0, cost))
    file = result.file
    core.publish(
        out.File(
            session_id=core.session_id,
            turn=result.turn,
            name=file.name,
            mime_type=file.mime_type,
            path=file.path,
            size=file.size,
        )
    )
