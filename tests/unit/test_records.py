"""netclaw.records: a builder makes the object __init__ makes, and refuses a class it cannot."""

from __future__ import annotations

import dataclasses
from dataclasses import FrozenInstanceError, dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netclaw.messages import Attachment, ChatMessage, MessageKind, ToolCall, Transcript
from netclaw.persistence import StoredEvent
from netclaw.records import builder
from netclaw.sessions._core.journal.events import TurnRecorded
from netclaw.sessions._core.journal.values import ActiveTurn, TurnOutcome

EVERY_FIELD = ChatMessage(
    id="m1",
    role="user",
    content="hello ✓",
    ts=1.5,
    tool_calls=(ToolCall("c1", "current_time", "{}"),),
    tool_call_id="c0",
    name="n",
    is_error=True,
    thinking="hm",
    identity="slack:1",
    user="U1",
    kind=MessageKind.CONTEXT,
    extra={"k": [1, 2]},
    user_name="Alice",
    prior="earlier",
    files=(Attachment("a.ogg", "audio/ogg", "files/a.ogg", 3, "audio", transcript=Transcript(text="hi")),),
    speaker="slack:U1",
    speaker_role="owner",
)


def _values(record: object) -> tuple[object, ...]:
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "record",
    [
        EVERY_FIELD,
        ChatMessage("m2", "assistant", "", 2.0),
        TurnRecorded(
            3, "u1", "failed", (), {"code": "x", "message": "y"}, {"input_tokens": 1}, None, "m", 0.5
        ),
        ActiveTurn(1, "u1", 2, "fallback"),
        TurnOutcome(1, "completed", "ok", None, "a1"),
        StoredEvent(4, "TurnStarted", "{}", 9.5),
    ],
    ids=lambda r: type(r).__name__,
)
def test_a_built_record_is_the_one_init_makes(record: object) -> None:
    built = builder(type(record))(*_values(record))
    assert type(built) is type(record)
    assert built == record
    assert _values(built) == _values(record)
    with pytest.raises(FrozenInstanceError):
        setattr(built, dataclasses.fields(built)[0].name, "other")  # type: ignore[arg-type]


def test_every_field_of_a_message_survives_its_dict() -> None:
    assert ChatMessage.from_dict(EVERY_FIELD.to_dict()) == EVERY_FIELD


@given(
    content=st.text(max_size=40),
    ts=st.floats(allow_nan=False, allow_infinity=False),
    identity=st.none() | st.text(max_size=8),
    is_error=st.booleans(),
    kind=st.sampled_from(list(MessageKind)),
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
)
def test_a_message_read_back_from_its_dict_is_the_same(
    content: str, ts: float, identity: str | None, is_error: bool, kind: MessageKind, role: str
) -> None:
    message = ChatMessage("m", role, content, ts, is_error=is_error, identity=identity, kind=kind)  # type: ignore[arg-type]
    assert ChatMessage.from_dict(message.to_dict()) == message


def test_a_class_a_builder_cannot_build_the_same_way_is_refused() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a > 0

    @dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    class Plain:
        __slots__ = ("a",)

    with pytest.raises(TypeError, match="not a frozen dataclass"):
        builder(Mutable)
    with pytest.raises(TypeError, match="needs slots"):
        builder(NoSlots)
    with pytest.raises(TypeError, match="__post_init__"):
        builder(Checked)
    with pytest.raises(TypeError, match="needs slots"):
        builder(Derived)
    with pytest.raises(TypeError, match="not a frozen dataclass"):
        builder(Plain)
