"""What a running tool call may ask of the session that called it (issue 28): report
progress, ask the person a question and wait for the answer (an MCP server's
elicitation, or a person's go-ahead for sampling), and have the session's model answer
a prompt (an MCP server's sampling, counted toward the session's spend).

The tool side sees only :class:`ToolSession` (on :class:`~netclaw.tools.ToolContext`,
``None`` when nobody can be asked: no session, no turn). A session implements it; the
questions it asks wait in a :class:`Questions` registry on the I/O loop, where the
gateway finds them to answer (``POST /api/sessions/{id}/questions/{qid}``, ``netclaw
questions``). The value types here are plain data: the outputs that tell subscribers
(``tool_progress``, ``input_requested``, ``input_answered``) are in
:mod:`netclaw.outputs`.

This first wiring keeps a waiting question in memory: a daemon restart ends the call that
asked it (the MCP request dies with the connection), so there is nothing to resume; what
a durable, journaled wait needs from the session core is written up in
docs/architecture.md ("Questions from tools").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netclaw.errors import InvalidInput, NotAnApprover, QuestionAnswered, QuestionNotFound
from netclaw.toolspec import (
    Answer,
    AnswerAction,
    Question,
    QuestionKind,
    SampleRefused,
    SampleReply,
    SampleRequest,
    ToolSession,
)

__all__ = [
    "Answer",
    "AnswerAction",
    "PendingQuestion",
    "Question",
    "QuestionKind",
    "Questions",
    "SampleRefused",
    "SampleReply",
    "SampleRequest",
    "ToolSession",
    "deadline",
    "expiry",
    "new_question_id",
    "waiting_for_a_person",
]

# -- deadlines that stop while a person is asked -----------------------------------------------

_DEADLINES: contextvars.ContextVar[tuple[asyncio.Timeout, ...]] = contextvars.ContextVar(
    "tool_deadlines", default=()
)


@contextlib.contextmanager
def deadline(timeout: asyncio.Timeout) -> Iterator[None]:
    """Register a running call's ``asyncio.timeout`` (the registry's, an MCP server's), so
    :func:`waiting_for_a_person` can stop it."""
    token = _DEADLINES.set((*_DEADLINES.get(), timeout))
    try:
        yield
    finally:
        _DEADLINES.reset(token)


@contextlib.contextmanager
def waiting_for_a_person() -> Iterator[None]:
    """While a person is asked, the call's deadlines stand still: each gets back the time
    it had left once the answer came (the question's own expiry bounds the wait)."""
    loop = asyncio.get_running_loop()
    paused = [(t, when) for t in _DEADLINES.get() if (when := t.when()) is not None and not t.expired()]
    asked = loop.time()
    for timeout, _ in paused:
        timeout.reschedule(None)
    try:
        yield
    finally:
        answered = loop.time()
        for timeout, when in paused:
            if not timeout.expired():
                timeout.reschedule(answered + max(0.0, when - asked))


# -- the questions waiting for people (on the I/O loop) ------------------------------------------


@dataclass(slots=True)
class PendingQuestion:
    id: str
    session_id: str
    audience: str
    turn: int
    call_id: str
    tool: str
    question: Question
    asked_at: float
    expires_at: float
    answer: asyncio.Future[Answer] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        q = self.question
        body: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "turn": self.turn,
            "tool": self.tool,
            "kind": q.kind,
            "source": q.source,
            "message": q.message,
            "asked_at": self.asked_at,
            "expires_at": self.expires_at,
        }
        if q.schema is not None:
            body["schema"] = dict(q.schema)
        if q.url is not None:
            body["url"] = q.url
        return body


class Questions:
    """Every question a tool asked and nobody has answered yet, by id."""

    def __init__(self) -> None:
        self._open: dict[str, PendingQuestion] = {}

    def add(self, pending: PendingQuestion) -> None:
        self._open[pending.id] = pending

    def remove(self, question_id: str) -> None:
        self._open.pop(question_id, None)

    def of(self, session_id: str | None = None) -> list[PendingQuestion]:
        return [q for q in self._open.values() if session_id is None or q.session_id == session_id]

    def answer(
        self,
        session_id: str,
        question_id: str,
        action: str,
        content: Mapping[str, Any] | None,
        *,
        by: str,
        approver: str | None,
        approvers: Callable[[str], Sequence[str]],
    ) -> PendingQuestion:
        """Resolve one question (checked: it is open in that session, ``approver`` may
        answer, the action is known, a form's content fits its schema)."""
        pending = self._open.get(question_id)
        if pending is None or pending.session_id != session_id:
            raise QuestionNotFound(f"no open question {question_id!r} in session {session_id}")
        if pending.answer.done():
            raise QuestionAnswered(f"question {question_id} was already answered")
        allowed = approvers(pending.audience)
        if approver is not None and allowed and approver not in allowed:
            raise NotAnApprover(f"{by} may not answer questions in this session")
        if action not in ("accept", "decline", "cancel"):
            raise InvalidInput("action", "action must be accept, decline or cancel")
        if action == "accept" and pending.question.kind == "form":
            content = _checked(pending.question.schema or {}, content or {})
        pending.answer.set_result(Answer(action, content if action == "accept" else None, by))  # type: ignore[arg-type]
        self._open.pop(question_id, None)
        return pending


def _checked(schema: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    """The form's values, with numbers and booleans given as text (a chat, a CLI) turned
    into what the schema says; InvalidInput naming the first field that does not fit."""
    import jsonschema

    properties: Mapping[str, Any] = schema.get("properties") or {}
    values: dict[str, Any] = {}
    for key, raw in content.items():
        kind = (properties.get(key) or {}).get("type")
        values[key] = _coerce(raw, kind) if isinstance(raw, str) else raw
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(values))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise InvalidInput("content", f"{where}: {error.message}" if where else error.message)
    return values


def _coerce(raw: str, kind: object) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
    except ValueError:
        return raw
    if kind == "boolean" and raw.lower() in ("true", "yes", "1", "false", "no", "0"):
        return raw.lower() in ("true", "yes", "1")
    return raw


def new_question_id() -> str:
    import secrets

    return f"q-{secrets.token_hex(6)}"


def expiry(timeout_s: float) -> tuple[float, float]:
    now = time.time()
    return now, now + timeout_s
