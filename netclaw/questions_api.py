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
from netclaw.gateway import Gateway, check_session_id
from netclaw.web import read_body, read_json_object

MAX_BODY_BYTES = 65_536


def question_routes(gateway: Gateway) -> list[web.RouteDef]:
    async def all_questions(request: web.Request) -> web.Response:
        return web.json_response(gateway.questions())

    async def session_questions(request: web.Request) -> web.Response:
        return web.json_response(gateway.questions(check_session_id(request.match_info["id"])))

    async def answer(request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        action = body.get("action")
        if not isinstance(action, str):
            raise ApiError(400, "invalid_action", "'action' is required: accept, decline or cancel")
        content = body.get("content")
        if content is not None and not isinstance(content, dict):
            raise ApiError(400, "invalid_content", "'content' must be an object of the form's values")
        user = body.get("user", "api")
        if not isinstance(user, str) or not user.strip() or len(user) > 200:
            raise ApiError(400, "invalid_user", "'user' must be a non-empty string (at most 200 characters)")
        answered = gateway.answer_question(
            session_id, request.match_info["question_id"], action, content, by=user.strip()
        )
        return web.json_response(answered)

    return [
        web.get("/api/questions", all_questions),
        web.get("/api/sessions/{id}/questions", session_questions),
        web.post("/api/sessions/{id}/questions/{question_id}", answer),
    ]
