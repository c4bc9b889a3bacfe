"""Questions a running tool asks people: the registry's checks, the deadlines that stand
still while a person is asked, and how a chat shows a question."""

from __future__ import annotations

import asyncio
import time

import pytest

from adapters.chat._text import note_for
from netclaw import outputs as out
from netclaw.errors import InvalidInput, NotAnApprover, QuestionAnswered, QuestionNotFound
from netclaw.tools import Answer, PendingQuestion, Question, Questions, deadline, waiting_for_a_person

SCHEMA = {
    "type": "object",
    "properties": {"email": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["email"],
}


def pending(loop: asyncio.AbstractEventLoop, kind: str = "form", audience: str = "team") -> PendingQuestion:
    question = Question(kind, "MCP server docs", "Your email?", schema=SCHEMA if kind == "form" else None)  # type: ignore[arg-type]
    return PendingQuestion(
        "q-1", "s1", audience, 1, "c1", "docs__signup", question, 0.0, 9.0, loop.create_future()
    )


def test_answers_are_checked_and_resolve_the_wait() -> None:
    async def run() -> None:
        questions = Questions()
        asked = pending(asyncio.get_running_loop())
        questions.add(asked)
        everyone = lambda audience: []  # noqa: E731
        with pytest.raises(QuestionNotFound):
            questions.answer("s2", "q-1", "accept", {}, by="x", approver=None, approvers=everyone)
        with pytest.raises(NotAnApprover):
            questions.answer("s1", "q-1", "accept", {}, by="Bo", approver="U2", approvers=lambda a: ["U1"])
        with pytest.raises(InvalidInput, match="accept, decline or cancel"):
            questions.answer("s1", "q-1", "maybe", None, by="x", approver=None, approvers=everyone)
        with pytest.raises(InvalidInput, match="'email' is a required property"):
            questions.answer("s1", "q-1", "accept", {"age": "3"}, by="x", approver=None, approvers=everyone)
        with pytest.raises(InvalidInput, match="age"):
            questions.answer(
                "s1",
                "q-1",
                "accept",
                {"email": "a@b", "age": "old"},
                by="x",
                approver=None,
                approvers=everyone,
            )
        assert questions.of("s1") == [asked]
        questions.answer(
            "s1",
            "q-1",
            "accept",
            {"email": "a@b", "age": "3", "ok": "yes"},
            by="Ann",
            approver="U1",
            approvers=lambda a: ["U1"],
        )
        assert await asked.answer == Answer("accept", {"email": "a@b", "age": 3, "ok": True}, "Ann")
        assert questions.of() == []
        with pytest.raises(QuestionNotFound):
            questions.answer("s1", "q-1", "decline", None, by="x", approver=None, approvers=everyone)
        again = pending(asyncio.get_running_loop(), "confirm")
        questions.add(again)
        again.answer.cancel()
        with pytest.raises(QuestionAnswered):
            questions.answer("s1", "q-1", "accept", None, by="x", approver=None, approvers=everyone)

    asyncio.run(run())


def test_deadlines_stand_still_while_a_person_is_asked() -> None:
    async def run() -> float:
        started = time.monotonic()
        async with asyncio.timeout(0.3) as until:
            with deadline(until):
                with waiting_for_a_person():
                    await asyncio.sleep(0.5)  # time passing is the behaviour: longer than the deadline
                await asyncio.sleep(0.1)  # the time it had left still applies
        return time.monotonic() - started

    assert asyncio.run(run()) >= 0.6

    async def expires() -> None:
        async with asyncio.timeout(0.2) as until:
            with deadline(until):
                with waiting_for_a_person():
                    pass
                await asyncio.sleep(1)

    with pytest.raises(TimeoutError):
        asyncio.run(expires())


def test_a_chat_shows_a_question_with_how_to_answer_it() -> None:
    form = out.InputRequested(
        session_id="s",
        turn=1,
        question_id="q-9",
        tool="docs__signup",
        kind="form",
        source="MCP server docs",
        message="Your email?",
        expires_at=0.0,
        schema=SCHEMA,
    )
    assert note_for(form) == (
        ":question: MCP server docs asks: Your email?\n"
        "Answer: `netclaw questions answer q-9 email=… age=… ok=…`"
    )
    link = out.InputRequested(
        session_id="s",
        turn=1,
        question_id="q-8",
        tool="t",
        kind="url",
        source="S",
        message="Pay",
        expires_at=0.0,
        url="https://x",
    )
    assert "Open https://x, then: `netclaw questions accept q-8`" in (note_for(link) or "")
    answered = out.InputAnswered(session_id="s", question_id="q-9", action="expired", by="timeout")
    assert note_for(answered) == "_(Question answered: expired by timeout.)_"
