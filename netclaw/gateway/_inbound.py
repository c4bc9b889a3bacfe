"""A message from outside as the gateway takes it: :class:`Inbound` (and its form when
forwarded to another node), the checks it must pass, the redaction that runs before it is
kept, and the chat policy's :class:`ChatPermit`.

Shared by the services that admit messages (``_intake``) and the chat role (``_chat``);
pure, no I/O.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netclaw.attachments import IncomingFile, check_files
from netclaw.commands import PromptCommand, PromptSyntaxError, parse_prompt
from netclaw.config import ChannelAccess, ChatSection, Settings, channel_section
from netclaw.errors import InvalidInput
from netclaw.identifiers import check_session_id
from netclaw.lineage import ChildReport, ChildTask
from netclaw.messages import PriorMessage
from netclaw.security.policy import ChatEvent, Place
from netclaw.security.redact import Redacted, merge, redact, redact_identity, redact_prior

MAX_TEXT_CHARS = 200_000
MAX_NAME_CHARS = 80


@dataclass(frozen=True, slots=True)
class Inbound:
    session_id: str
    text: str  # may be empty when files come without a comment
    user: str | None = None  # a stable id of the sender
    identity: str | None = None  # inbound event id or idempotency key, if the channel has one
    user_name: str | None = None  # how people call the sender; the model sees it
    prior: Sequence[PriorMessage] = ()  # the conversation before the bot was addressed
    files: Sequence[IncomingFile] = ()
    place: Place | None = None  # where the session lives, when the channel knows better than its id
    # Who sent it when the channel authenticated them (the API: "token:NAME", "control") and
    # the role that comes with that (a token's own); chat platforms name their users instead.
    speaker: str | None = None
    speaker_role: str | None = None
    # A sub-agent's task (its first input, from its parent) or report (to its parent); never
    # from outside: only netclaw.workers.subagents makes these.
    subagent: ChildTask | ChildReport | None = None

    def to_json(self) -> dict[str, Any]:
        """As it is forwarded to the node that owns the session (:mod:`netclaw.cluster`)."""
        return {
            "session_id": self.session_id,
            "text": self.text,
            "user": self.user,
            "identity": self.identity,
            "user_name": self.user_name,
            "prior": [{"user": p.user, "user_name": p.user_name, "text": p.text} for p in self.prior],
            "files": [
                {"name": f.name, "mime_type": f.mime_type, "data_base64": base64.b64encode(f.data).decode()}
                for f in self.files
            ],
            "place": self.place.to_dict() if self.place is not None else None,
            "speaker": self.speaker,
            "speaker_role": self.speaker_role,
            "subagent": _subagent_json(self.subagent),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Inbound:
        """From :meth:`to_json`; InvalidInput naming what is missing or malformed."""
        try:
            place = data.get("place")
            return cls(
                session_id=str(data["session_id"]),
                text=str(data["text"]),
                user=_optional(data.get("user")),
                identity=_optional(data.get("identity")),
                user_name=_optional(data.get("user_name")),
                prior=tuple(
                    PriorMessage(str(p["user"]), str(p["user_name"]), str(p["text"]))
                    for p in data.get("prior") or ()
                ),
                files=tuple(
                    IncomingFile(
                        str(f["name"]),
                        str(f["mime_type"]),
                        base64.b64decode(str(f["data_base64"]), validate=True),
                    )
                    for f in data.get("files") or ()
                ),
                place=Place.from_dict(dict(place)) if place is not None else None,
                speaker=_optional(data.get("speaker")),
                speaker_role=_optional(data.get("speaker_role")),
                subagent=_subagent_of(data.get("subagent")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                "inbound", f"a forwarded message is malformed: {type(exc).__name__}: {exc}"
            ) from exc


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def _subagent_json(value: ChildTask | ChildReport | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"task" if isinstance(value, ChildTask) else "report": value.to_dict()}


def _subagent_of(data: Mapping[str, Any] | None) -> ChildTask | ChildReport | None:
    if not data:
        return None
    if "task" in data:
        return ChildTask.from_dict(data["task"])
    return ChildReport.from_dict(data["report"])


@dataclass(frozen=True, slots=True)
class ChatPermit:
    """A chat-platform message that passed the access policy (``ChatInput.permit``)."""

    event: ChatEvent


def channel_access(settings: Settings, platform: str) -> ChannelAccess:
    """The chat access policy of ``platform`` (who may talk, where, how much of a thread
    the model sees), from ``settings``."""
    section = channel_section(settings, platform)
    if isinstance(section, ChatSection):
        return section
    raise ValueError(f"no chat access policy for platform {platform!r}")


def parse_prompt_or_fail(text: str) -> PromptCommand | None:
    """The ``/prompt`` command ``text`` is (None: not one); InvalidInput when unreadable."""
    try:
        return parse_prompt(text)
    except PromptSyntaxError as exc:
        raise InvalidInput("text", str(exc)) from exc


def _check_encodable(field: str, value: str) -> None:
    # JSON can carry lone surrogates ("\\ud800") that no UTF-8 store accepts; refuse them
    # here rather than fail the journal write after the message was routed.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field, f"{field} contains characters that are not valid Unicode ({exc.reason})"
        ) from exc


def redact_inbound(inbound: Inbound) -> tuple[Inbound, tuple[str, ...]]:
    """The message as it may be kept: secrets out of its text, its sender's names and ids,
    its replay identity and the conversation it comes with (its files are cleaned where
    they are stored: :func:`netclaw.attachments.save`); what was found."""
    text = redact(inbound.text)
    prior, found = redact_prior(inbound.prior)
    found = merge(text.kinds, found)

    def cleaned(value: str | None, clean: Callable[[str], Redacted] = redact) -> str | None:
        nonlocal found
        if value is None:
            return None
        done = clean(value)
        found = merge(found, done.kinds)
        return done.text

    user, user_name, speaker = cleaned(inbound.user), cleaned(inbound.user_name), cleaned(inbound.speaker)
    identity = cleaned(inbound.identity, redact_identity)
    if not found:
        return inbound, ()
    return dataclasses.replace(
        inbound,
        text=text.text,
        prior=prior,
        user=user,
        user_name=user_name,
        speaker=speaker,
        identity=identity,
    ), found


def check_inbound(inbound: Inbound) -> None:
    check_session_id(inbound.session_id)
    if not inbound.text.strip() and not inbound.files:
        raise InvalidInput("text", "text is empty")
    if len(inbound.text) > MAX_TEXT_CHARS:
        raise InvalidInput("text", f"text is longer than {MAX_TEXT_CHARS} characters")
    _check_encodable("text", inbound.text)
    if inbound.user is not None:
        _check_encodable("user", inbound.user)
    if inbound.user_name is not None:
        if not inbound.user_name.strip() or len(inbound.user_name) > MAX_NAME_CHARS:
            raise InvalidInput("user_name", f"user_name must be 1 to {MAX_NAME_CHARS} characters")
        _check_encodable("user_name", inbound.user_name)
    for prior in inbound.prior:
        _check_encodable("prior", prior.text)
    check_files(inbound.files)
    if inbound.identity is not None:
        _check_encodable("identity", inbound.identity)
