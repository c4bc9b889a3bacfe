"""The control API's routes for questions running tools ask people (an MCP server's
elicitation, sampling's go-ahead), behind the bearer token like all of ``/api/…``:

- ``GET /api/questions`` — every open question on this node; ``GET
  /api/sessions/{id}/questions`` — one session's.
- ``POST /api/sessions/{id}/questions/{question_id}`` ``{"action": "accept" | "decline" |
  "cancel", "content": {...}, "user": "..."}`` — the answer (``content``: a form's
  values, checked against its schema).
"""

from __future__ import annotations

from aiohttp import web

from netclaw.errors import ApiError
from netclaw.gateway import Auditing, ToolQuestions, check_session_id
from netclaw.http.access import actor
from netclaw.http.web import read_body, read_json_object
from netclaw.identifiers import check_label

MAX_BODY_BYTES = 65_536


def question_routes(questions: ToolQuestions, audit: Auditing) -> list[web.RouteDef]:
    """The routes over the open questions (an answer is recorded in the audit trail)."""

    async def all_questions(request: web.Request) -> web.Response:
        return web.json_response(questions.questions())

    async def session_questions(request: web.Request) -> web.Response:
        return web.json_response(questions.questions(check_session_id(request.match_info["id"])))

    async def answer(request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        action = body.get("action")
        if not isinstance(action, str):
            raise ApiError(400, "invalid_action", "'action' is required: accept, decline or cancel")
        content = body.get("content")
        if content is not None and not isinstance(content, dict):
            raise ApiError(400, "invalid_content", "'content' must be an object of the form's values")
        # Who answered, for the record: the caller's token unless the body names a person.
        user = check_label("user", body.get("user", actor(request)), max_chars=200)
        question_id = request.match_info["question_id"]
        tool = next((q["tool"] for q in questions.questions(session_id) if q["id"] == question_id), None)
        answered = questions.answer_question(session_id, question_id, action, content, by=user)
        await audit.audit(
            "question_answered", user, session_id, question=question_id, tool=tool, action=action
        )
        return web.json_response(answered)

    return [
        web.get("/api/questions", all_questions),
        web.get("/api/sessions/{id}/questions", session_questions),
        web.post("/api/sessions/{id}/questions/{question_id}", answer),
    ]
