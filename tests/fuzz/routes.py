"""Every route the daemon serves (control API and webhook listener), each with one valid
request: the corpus (:mod:`tests.fuzz.corpus`) spoils that request one part at a time.

``test_the_table_covers_every_route`` fails when a route is added to the daemon without
a line here, so the corpus always covers every route.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from netclaw.cluster import FORWARDED_BY, SUBMIT_PATH

Auth = Literal["token", "none", "webhook_bearer", "webhook_hmac"]
Listener = Literal["api", "webhooks"]

SESSION = "cli:fuzz"  # the session the valid requests talk to


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # as aiohttp's router spells it: /api/sessions/{id}/messages
    segments: dict[str, str] = field(default_factory=dict)  # a valid value per path parameter
    query: dict[str, str] = field(default_factory=dict)  # valid query parameters
    bodies: tuple[dict[str, Any], ...] = ()  # valid JSON bodies (each field is spoiled in each)
    headers: dict[str, str] = field(default_factory=dict)  # headers the route reads, valid values
    auth: Auth = "token"
    listener: Listener = "api"
    answers: frozenset[int] = frozenset({200})  # what the valid request may get
    ids: frozenset[str] = frozenset()  # path and query parameters that are identifiers
    id_fields: frozenset[str] = frozenset()  # body fields that are identifiers

    @property
    def name(self) -> str:
        return f"{self.method} {self.template}"

    def path(self, segments: dict[str, str] | None = None) -> str:
        path = self.template
        for key, value in {**self.segments, **(segments or {})}.items():
            path = path.replace("{" + key + "}", value)
        return path


IDEMPOTENCY = {"Idempotency-Key": "fuzz-{unique}"}  # the sender makes each one unique
INBOUND = {
    "session_id": "cli:fuzz-forwarded",
    "text": "forwarded hello",
    "user": "fuzz",
    "identity": "idem:fuzz-forwarded-1",
    "user_name": "Fuzz",
    "prior": [{"user": "u1", "user_name": "Someone", "text": "before"}],
    "files": [],
    "place": {"scope": "cli", "audience": "personal"},
}

ROUTES: tuple[Route, ...] = (
    Route("GET", "/healthz", auth="none"),
    Route("GET", "/metrics", auth="none"),
    Route("GET", "/api/sessions"),
    Route(
        "GET",
        "/api/sessions/{id}",
        {"id": SESSION},
        {"view": "transcript"},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "DELETE",
        "/api/sessions/{id}",
        {"id": "cli:fuzz-gone"},
        {"memories": "0"},
        answers=frozenset({204, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "POST",
        "/api/sessions/{id}/messages",
        {"id": SESSION},
        {"wait": "0"},
        (
            {"text": "hello", "user": "fuzz", "user_name": "Fuzz"},
            {
                "text": "a file",
                "files": [{"name": "a.txt", "mime_type": "text/plain", "data_base64": "aGk="}],
            },
        ),
        IDEMPOTENCY,
        answers=frozenset({202}),
        ids=frozenset({"id"}),
        id_fields=frozenset({"user", "user_name"}),
    ),
    Route(
        "GET",
        "/api/sessions/{id}/events",
        {"id": SESSION},
        {"filter": "text,usage"},
        headers={"Last-Event-ID": "1"},
        ids=frozenset({"id"}),
    ),
    Route(
        "POST",
        "/api/sessions/{id}/cancel",
        {"id": SESSION},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "POST",
        "/api/sessions/{id}/reset",
        {"id": SESSION},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "GET",
        "/api/sessions/{id}/model",
        {"id": SESSION},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "PUT",
        "/api/sessions/{id}/model",
        {"id": SESSION},
        bodies=({"model": "main"},),
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "GET",
        "/api/sessions/{id}/approvals",
        {"id": SESSION},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "POST",
        "/api/sessions/{id}/approvals/{approval_id}",
        {"id": SESSION, "approval_id": "appr-1"},
        bodies=({"decision": "approve", "user": "fuzz"},),
        answers=frozenset({200, 404}),
        ids=frozenset({"id", "approval_id"}),
        id_fields=frozenset({"user"}),
    ),
    Route(
        "GET",
        "/api/sessions/{id}/children",
        {"id": SESSION},
        answers=frozenset({200, 404}),
        ids=frozenset({"id"}),
    ),
    Route("GET", "/api/approvals"),
    Route("GET", "/api/reminders", query={"session": SESSION}, ids=frozenset({"session"})),
    Route(
        "POST",
        "/api/sessions/{id}/reminders",
        {"id": SESSION},
        bodies=(
            {"text": "stretch", "in_s": 3600, "catch_up": "latest", "name": "legs"},
            {"text": "at a time", "at": "2099-01-01T09:00", "timezone": "Europe/Berlin"},
            {"text": "hourly", "every_s": "1h", "catch_up": "skip"},
            {"text": "mornings", "cron": "0 9 * * 1-5", "timezone": "America/New_York", "catch_up": "all"},
            {"text": "unix seconds", "at": 4_000_000_000},
        ),
        answers=frozenset({201}),
        ids=frozenset({"id"}),
        id_fields=frozenset({"name"}),
    ),
    Route(
        "DELETE",
        "/api/reminders/{id}",
        {"id": "rem-0000000000"},
        answers=frozenset({404}),
        ids=frozenset({"id"}),
    ),
    Route(
        "GET",
        "/api/memories",
        query={"session": SESSION, "audience": "personal", "q": "fuzz"},
        ids=frozenset({"session"}),
    ),
    Route(
        "PATCH",
        "/api/memories/{id}",
        {"id": "123"},
        bodies=({"text": "the user's sister is called Anna"},),
        answers=frozenset({404}),
        ids=frozenset({"id"}),
    ),
    Route("DELETE", "/api/memories/{id}", {"id": "123"}, answers=frozenset({404}), ids=frozenset({"id"})),
    Route("GET", "/api/usage", query={"by": "day", "since": "2026-01-01"}),
    Route(
        "GET",
        "/api/audit",
        query={"since": "2026-01-01", "session": SESSION, "limit": "10"},
        ids=frozenset({"session"}),
    ),
    Route("GET", "/api/tokens"),
    Route(
        "POST",
        "/api/tokens",
        bodies=({"name": "fuzz-token", "role": "admin"},),
        answers=frozenset({201, 400}),  # 400 once the name exists: the corpus sends it again
        id_fields=frozenset({"name"}),
    ),
    Route(
        "DELETE",
        "/api/tokens/{name}",
        {"name": "fuzz-gone"},
        answers=frozenset({204, 404}),
        ids=frozenset({"name"}),
    ),
    # On one node the cluster's routes say cluster mode is off (409 cluster_off).
    Route("GET", "/api/cluster", answers=frozenset({409})),
    Route(
        "POST",
        "/api/cluster/nodes/{node}/drain",
        {"node": "a"},
        answers=frozenset({409}),
        ids=frozenset({"node"}),
    ),
    Route(
        "POST",
        "/api/cluster/nodes/{node}/resume",
        {"node": "a"},
        answers=frozenset({409}),
        ids=frozenset({"node"}),
    ),
    Route(
        "GET", "/api/sessions/{id}/owner", {"id": SESSION}, answers=frozenset({409}), ids=frozenset({"id"})
    ),
    Route(
        "POST",
        "/api/sessions/{id}/move",
        {"id": SESSION},
        {"to": "b"},
        answers=frozenset({409}),
        ids=frozenset({"id", "to"}),
    ),
    Route(
        "POST",
        SUBMIT_PATH,
        bodies=({"inbound": INBOUND, "wait": False, "turn_timeout": None},),
        headers={FORWARDED_BY: "node-fuzz"},
        id_fields=frozenset({"session_id"}),
    ),
    Route(
        "POST",
        "/webhooks/{route}",
        {"route": "alerts"},
        {"wait": "0"},
        ({"thread": "t-1", "text": "disk full"}, {"thread": 42, "text": "numeric key"}),
        IDEMPOTENCY,
        auth="webhook_hmac",
        listener="webhooks",
        answers=frozenset({202}),
        ids=frozenset({"route"}),
    ),
    Route(
        "POST",
        "/webhooks/{route}",
        {"route": "ci"},
        bodies=({"message": "build green"},),
        auth="webhook_bearer",
        listener="webhooks",
        answers=frozenset({202}),
        ids=frozenset({"route"}),
    ),
)

WEBHOOK_SECRET = "a-webhook-secret-of-at-least-32-bytes!!"


def webhook_config() -> dict[str, Any]:
    """The webhook routes the corpus talks to, on their own listener."""
    unlimited = {"rate_limit_per_minute": 1_000_000}
    return {
        "routes": {
            "alerts": {
                "auth": {"type": "hmac", "secret_env": "FUZZ_ALERTS_SECRET"},
                "session_key": "$.thread",
                "text": "$.text",
                **unlimited,
            },
            "ci": {
                "auth": {"type": "bearer", "secret_env": "FUZZ_CI_SECRET"},
                "text": "$.message",
                **unlimited,
            },
        }
    }
