"""The HTTP API (docs/http-api.md): health, auth, every control-API path and error path."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.security.trust import system_prompt as trusted
from tests.conftest import DaemonHandle, settings_data
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread

StartDaemon = Callable[..., DaemonHandle]


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """A JSON error answer: ``{"error": {"code", "message"}}`` with the given status."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    error = body["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"].strip()
    if code is not None:
        assert error["code"] == code, error
    return body


@pytest.fixture(scope="module")
def _shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonHandle]:
    with ScriptedOpenAIThread() as server:
        data_dir = tmp_path_factory.mktemp("shared") / "data"
        daemon = Daemon(Settings(**settings_data(data_dir, server.base_url)))
        daemon.start()
        handle = DaemonHandle(daemon)
        try:
            yield handle
        finally:
            handle.stop()


@pytest.fixture
def shared(_shared_daemon: DaemonHandle) -> Iterator[DaemonHandle]:
    """One daemon for the many cases that are refused before reaching a session (a daemon per
    case would cost more than the cases). They must leave no session resident: the per-test
    daemons' teardown insists that no actor is alive."""
    yield _shared_daemon
    health = _shared_daemon.http.get("/healthz").json()
    assert health["sessions"]["resident"] == 0, "a refused request started a session"


def user_rows(handle: DaemonHandle, session_id: str) -> list[dict[str, Any]]:
    return [m for m in handle.transcript(session_id) if m["role"] == "user"]


def post(
    handle: DaemonHandle,
    session_id: str,
    text: str,
    *,
    key: str | None = None,
    wait: bool = False,
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return handle.send(session_id, text, wait=wait, headers=headers)


# -- /healthz ---------------------------------------------------------------------------------


def test_healthz_needs_no_auth_and_counts_resident_sessions_by_phase(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    response = httpx.get(f"{daemon.base_url}/healthz", verify=False)  # no Authorization header
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["sessions"] == {"resident": 0, "by_phase": {}}
    # A wrong token does not matter here.
    wrong = httpx.get(f"{daemon.base_url}/healthz", headers={"Authorization": "Bearer nope"}, verify=False)
    assert wrong.status_code == 200

    assert daemon.send("cli:health", "hi", wait=True).status_code == 200

    def settled() -> dict[str, Any] | None:
        sessions: dict[str, Any] = daemon.http.get("/healthz").json()["sessions"]
        return sessions if sessions["by_phase"] == {"ready": 1} else None

    sessions = wait_until(settled)
    assert sessions["resident"] == 1

    scripted.enqueue(Reply(text="slow", delay_s=0.6))
    assert daemon.send("cli:health-busy", "hi").status_code == 202

    def phases() -> dict[str, int]:
        by_phase: dict[str, int] = daemon.http.get("/healthz").json()["sessions"]["by_phase"]
        return by_phase

    wait_until(lambda: phases() == {"ready": 1, "processing": 1})
    wait_until(lambda: phases() == {"ready": 2})
    assert daemon.http.get("/healthz").json()["sessions"]["resident"] == 2


# -- auth -------------------------------------------------------------------------------------

API_CALLS = [
    ("GET", "/api/sessions"),
    ("GET", "/api/sessions/cli:auth"),
    ("POST", "/api/sessions/cli:auth/messages"),
    ("GET", "/api/sessions/cli:auth/events"),
    ("GET", "/api/nowhere"),
]


@pytest.mark.parametrize(("method", "path"), API_CALLS)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", "Basic xyz", "Bearer", "Token {token}", "{token}", "Bearer {token}x"],
    ids=["missing", "wrong", "basic", "bearer-empty", "other-scheme", "bare-token", "token-prefix"],
)
def test_api_without_valid_bearer_token_is_401(
    shared: DaemonHandle, method: str, path: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization.format(token=shared.token)}
    with httpx.Client(base_url=shared.base_url, timeout=5, verify=False) as client:
        response = client.request(method, path, headers=headers, json={"text": "hi"})
    assert_error(response, 401, "unauthorized")
    # Nothing was created by the refused request.
    assert shared.http.get("/api/sessions").json() == []


def test_valid_token_is_accepted(shared: DaemonHandle) -> None:
    with httpx.Client(base_url=shared.base_url, timeout=5, verify=False) as client:
        response = client.get("/api/sessions", headers={"Authorization": f"Bearer {shared.token}"})
    assert response.status_code == 200
    assert response.json() == []


# -- POST messages ----------------------------------------------------------------------------


def test_post_is_202_once_durable_and_the_message_is_in_the_journal(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:durable"
    scripted.enqueue(Reply(text="slowly", delay_s=1.0))
    first = daemon.send(sid, "first")
    assert first.status_code == 202
    body = first.json()
    assert set(body) == {"session_id", "message_id"}
    assert body["session_id"] == sid
    messages = daemon.transcript(sid)  # read back from the journal, not the actor
    assert [(m["id"], m["role"], m["content"]) for m in messages] == [(body["message_id"], "user", "first")]
    assert not messages[0].get("pending")

    second = daemon.send(sid, "second")  # the first turn is still running: queued
    assert second.status_code == 202
    messages = daemon.transcript(sid)
    queued = [m for m in messages if m["id"] == second.json()["message_id"]]
    assert len(queued) == 1
    assert queued[0]["pending"] is True and queued[0]["content"] == "second"
    for m in messages:
        assert {"id", "role", "content", "ts"} <= set(m)


def test_post_with_wait_returns_the_reply(daemon: DaemonHandle) -> None:
    response = daemon.send("cli:waiter", "hello there", wait=True)
    assert response.status_code == 200
    body = response.json()
    assert body["session_id"] == "cli:waiter"
    assert body["turn"] == 1
    assert body["reply"] == "echo: hello there"
    assert isinstance(body["message_id"], str) and body["message_id"]
    second = daemon.send("cli:waiter", "again", wait=True).json()
    assert second["turn"] == 2 and second["message_id"] != body["message_id"]


def test_wait_zero_is_asynchronous(daemon: DaemonHandle) -> None:
    for flag in ("0", "false", "no"):
        response = daemon.http.post(
            "/api/sessions/cli:nowait/messages", json={"text": "hi"}, params={"wait": flag}
        )
        assert response.status_code == 202, flag
        assert "reply" not in response.json()


def test_user_field_is_recorded(daemon: DaemonHandle) -> None:
    response = daemon.http.post(
        "/api/sessions/cli:users/messages", json={"text": "hi", "user": "alice"}, params={"wait": "1"}
    )
    assert response.status_code == 200
    (user,) = user_rows(daemon, "cli:users")
    assert user["user"] == "alice"


MIB = 1024 * 1024
MSG = "/api/sessions/cli:x/messages"
HI = {"json": {"text": "hi"}}


def bad(
    case_id: str,
    method: str,
    path: str,
    status: int,
    code: str,
    names: str | None,
    request: dict[str, Any] | None = None,
    bug: str | None = None,
) -> Any:
    """One bad request: what to send, the status and code expected, a word the message names."""
    marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {bug}")] if bug else []
    return pytest.param(method, path, request or {}, status, code, names, id=case_id, marks=marks)


# Refused before reaching any session: they share one daemon.
BAD_REQUESTS = [
    bad("invalid-json", "POST", MSG, 400, "invalid_json", "JSON", {"content": b"{not json"}),
    bad("empty-body", "POST", MSG, 400, "invalid_json", "JSON", {"content": b""}),
    bad("not-utf8", "POST", MSG, 400, "invalid_json", "JSON", {"content": b"\xff\xfe{"}),
    bad("json-array", "POST", MSG, 400, "invalid_json", "object", {"json": [{"text": "hi"}]}),
    bad("json-string", "POST", MSG, 400, "invalid_json", "object", {"json": "hi"}),
    bad("missing-text", "POST", MSG, 400, "invalid_text", "text", {"json": {}}),
    bad("misspelt-text", "POST", MSG, 400, "invalid_text", "text", {"json": {"txt": "hi"}}),
    bad("text-int", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": 5}}),
    bad("text-null", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": None}}),
    bad("text-list", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": ["a"]}}),
    bad("text-empty", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": ""}}),
    bad("text-blank", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": " \n\t"}}),
    bad("text-too-long", "POST", MSG, 400, "invalid_text", "text", {"json": {"text": "x" * 200_001}}),
    bad("user-int", "POST", MSG, 400, "invalid_user", "user", {"json": {"text": "hi", "user": 7}}),
    bad("user-object", "POST", MSG, 400, "invalid_user", "user", {"json": {"text": "hi", "user": {}}}),
    bad(
        "over-1mib", "POST", MSG, 413, "body_too_large", None, {"content": b'{"text":"' + b"a" * MIB + b'"}'}
    ),
    bad("id-space", "POST", "/api/sessions/a%20b/messages", 400, "invalid_session_id", "session id", HI),
    bad("id-slash", "POST", "/api/sessions/a%2Fb/messages", 400, "invalid_session_id", "session id", HI),
    bad("id-300", "POST", f"/api/sessions/{'s' * 300}/messages", 400, "invalid_session_id", "session id", HI),
    bad("id-201", "POST", f"/api/sessions/{'s' * 201}/messages", 400, "invalid_session_id", "session id", HI),
    bad("id-dash", "POST", "/api/sessions/-lead/messages", 400, "invalid_session_id", "session id", HI),
    bad(
        "id-accent",
        "POST",
        "/api/sessions/%C3%A9t%C3%A9/messages",
        400,
        "invalid_session_id",
        "session id",
        HI,
    ),
    bad("wait-maybe", "POST", f"{MSG}?wait=maybe", 400, "invalid_wait", "wait", HI),
    bad(
        "key-too-long",
        "POST",
        MSG,
        400,
        "invalid_idempotency_key",
        "Idempotency-Key",
        {**HI, "headers": {"Idempotency-Key": "k" * 201}},
    ),
    bad(
        "key-empty",
        "POST",
        MSG,
        400,
        "invalid_idempotency_key",
        "Idempotency-Key",
        {**HI, "headers": {"Idempotency-Key": ""}},
    ),
    bad("get-messages", "GET", MSG, 405, "method_not_allowed", None),
    bad("put-sessions", "PUT", "/api/sessions", 405, "method_not_allowed", None, {"json": {}}),
    bad("delete-unknown-session", "DELETE", "/api/sessions/cli:x", 404, "session_not_found", None),
    bad("put-session", "PUT", "/api/sessions/cli:x", 405, "method_not_allowed", None),
    bad("unknown-api-route", "GET", "/api/nowhere", 404, "not_found", None),
    bad("unknown-session-route", "GET", "/api/sessions/cli:x/nothing", 404, "not_found", None),
    bad("unknown-route", "GET", "/nowhere", 404, "not_found", None),
    bad("unknown-session", "GET", "/api/sessions/cli:never", 404, "session_not_found", "cli:never"),
    bad("get-bad-id", "GET", "/api/sessions/bad%20id", 400, "invalid_session_id", "session id"),
    bad("view-bogus", "GET", "/api/sessions/cli:x?view=bogus", 400, "invalid_view", "view"),
    bad("filter-bogus", "GET", "/api/sessions/cli:x/events?filter=bogus", 400, "invalid_filter", "bogus"),
    bad(
        "json-nested-too-deep",
        "POST",
        MSG,
        400,
        "invalid_json",
        "JSON",
        {"content": b"[" * 100_000},
    ),
]

# Bad input that could reach a session (it must be refused at the gateway): a daemon each.
GATEWAY_REFUSED = [
    bad(
        "text-lone-surrogate",
        "POST",
        MSG,
        400,
        "invalid_text",
        "text",
        {"content": b'{"text": "broken \\ud800 surrogate"}'},
    ),
    bad(
        "user-lone-surrogate",
        "POST",
        MSG,
        400,
        "invalid_user",
        "user",
        {"content": b'{"text": "hi", "user": "\\udc00"}'},
    ),
]


def check_bad_request(
    handle: DaemonHandle,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
    names: str | None,
) -> None:
    response = handle.http.request(method, path, timeout=10, **kwargs)
    assert response.status_code < 500, response.text
    body = assert_error(response, status, code)
    if names is not None:
        assert names.lower() in body["error"]["message"].lower(), body
    assert handle.http.get("/healthz").json()["status"] == "ok"


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code", "names"), BAD_REQUESTS)
def test_bad_requests_get_a_json_4xx_never_a_500(
    shared: DaemonHandle,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
    names: str | None,
) -> None:
    check_bad_request(shared, method, path, kwargs, status, code, names)


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code", "names"), GATEWAY_REFUSED)
def test_bad_input_reaching_a_session_is_a_4xx_and_the_daemon_goes_on(
    daemon: DaemonHandle,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
    names: str | None,
) -> None:
    check_bad_request(daemon, method, path, kwargs, status, code, names)
    assert daemon.send("cli:after-bad-request", "ok?", wait=True).status_code == 200


def test_rejected_messages_are_not_recorded(shared: DaemonHandle) -> None:
    for body in ({}, {"text": ""}, {"text": 3}, {"text": "hi", "user": 1}):
        assert shared.http.post("/api/sessions/cli:rejected/messages", json=body).status_code == 400
    assert shared.http.get("/api/sessions/cli:rejected").status_code == 404
    assert [s["id"] for s in shared.http.get("/api/sessions").json()] == []


def test_a_failed_write_does_not_break_the_next_write_of_another_session(daemon: DaemonHandle) -> None:
    # A lone surrogate cannot be encoded for SQLite: it is refused (400), and in any case ...
    daemon.http.post("/api/sessions/cli:bad/messages", content=b'{"text": "\\ud800"}')
    # ... and must take nothing else down with it.
    good = daemon.send("cli:innocent", "hello", wait=True)
    assert good.status_code == 200, good.text
    assert good.json()["reply"] == "echo: hello"


# -- Idempotency-Key --------------------------------------------------------------------------


def test_same_idempotency_key_twice_records_one_message_and_one_turn(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:idem"
    first = post(daemon, sid, "pay the invoice", key="key-1")
    second = post(daemon, sid, "pay the invoice", key="key-1")
    assert first.status_code == second.status_code == 202
    assert first.json().get("duplicate") is None
    assert second.json() == {**first.json(), "duplicate": True}
    wait_until(lambda: any(m["role"] == "assistant" for m in daemon.transcript(sid)))
    # A session takes its input in order: once a later message is answered, a second turn
    # (had the repeat started one) has run.
    later = post(daemon, sid, "and then?", wait=True)
    assert later.status_code == 200, later.text
    assert [m["id"] for m in user_rows(daemon, sid)] == [
        first.json()["message_id"],
        later.json()["message_id"],
    ]
    assert len(scripted.requests) == 2
    assert len(daemon.transcript(sid)) == 4


def test_same_idempotency_key_with_wait_returns_the_same_reply(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:idem-wait"
    scripted.enqueue(Reply(text="the only answer"))
    first = post(daemon, sid, "question", key="k-wait", wait=True)
    second = post(daemon, sid, "question", key="k-wait", wait=True)
    assert first.status_code == second.status_code == 200
    assert first.json()["reply"] == second.json()["reply"] == "the only answer"
    assert second.json()["message_id"] == first.json()["message_id"]
    assert second.json()["turn"] == first.json()["turn"] == 1
    assert second.json()["duplicate"] is True
    assert len(scripted.requests) == 1
    assert len(daemon.transcript(sid)) == 2


def test_duplicate_key_while_the_first_is_still_queued_waits_for_its_turn(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:idem-queued"
    scripted.enqueue(Reply(text="slow first", delay_s=0.5), Reply(text="queued answer"))
    assert post(daemon, sid, "first").status_code == 202
    queued = post(daemon, sid, "second", key="k-q")
    assert queued.status_code == 202
    repeat = post(daemon, sid, "second", key="k-q", wait=True)
    assert repeat.status_code == 200
    assert repeat.json()["message_id"] == queued.json()["message_id"]
    assert repeat.json()["reply"] == "queued answer"
    assert len(user_rows(daemon, sid)) == 2
    assert len(scripted.requests) == 2


def test_different_keys_with_the_same_text_are_two_turns(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:idem-two"
    a = post(daemon, sid, "same words", key="key-a", wait=True)
    b = post(daemon, sid, "same words", key="key-b", wait=True)
    assert a.status_code == b.status_code == 200
    assert a.json()["message_id"] != b.json()["message_id"]
    assert "duplicate" not in b.json()
    assert b.json()["turn"] == 2
    assert [m["content"] for m in user_rows(daemon, sid)] == ["same words", "same words"]
    assert len(scripted.requests) == 2
    # Without a key, a repeat is a new message too.
    c = post(daemon, sid, "same words", wait=True)
    assert c.status_code == 200 and c.json()["turn"] == 3


def test_idempotency_keys_are_per_session(daemon: DaemonHandle) -> None:
    a = post(daemon, "cli:idem-s1", "hi", key="shared", wait=True)
    b = post(daemon, "cli:idem-s2", "hi", key="shared", wait=True)
    assert a.status_code == b.status_code == 200
    assert "duplicate" not in b.json()
    assert b.json()["session_id"] == "cli:idem-s2"


def test_idempotency_survives_a_restart(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    sid = "cli:idem-restart"
    first = start_daemon()
    scripted.enqueue(Reply(text="before the restart"))
    original = post(first, sid, "do it once", key="restart-key", wait=True)
    assert original.status_code == 200
    first.stop()

    second = start_daemon()  # the same data dir
    repeat = post(second, sid, "do it once", key="restart-key", wait=True)
    assert repeat.status_code == 200, repeat.text
    assert repeat.json()["duplicate"] is True
    assert repeat.json()["message_id"] == original.json()["message_id"]
    assert repeat.json()["reply"] == "before the restart"
    again = post(second, sid, "do it once", key="restart-key")
    assert again.status_code == 202 and again.json()["duplicate"] is True
    assert post(second, sid, "and then?", wait=True).status_code == 200  # input runs in order
    assert len(scripted.requests) == 2
    assert [m["content"] for m in second.transcript(sid)] == [
        "do it once",
        "before the restart",
        "and then?",
        "echo: and then?",
    ]


# -- GET sessions -----------------------------------------------------------------------------


def test_list_sessions(daemon: DaemonHandle) -> None:
    assert daemon.http.get("/api/sessions").json() == []
    before = time.time()
    assert daemon.send("cli:alice", "Book a table for two", wait=True).status_code == 200
    assert daemon.send("plain-id", "hello", wait=True).status_code == 200
    assert daemon.send("plain-id", "again", wait=True).status_code == 200
    response = daemon.http.get("/api/sessions")
    assert response.status_code == 200
    rows = {r["id"]: r for r in response.json()}
    assert set(rows) == {"cli:alice", "plain-id"}
    for row in rows.values():
        assert {"id", "channel", "title", "phase", "turns", "last_activity", "resident"} <= set(row)
        assert before - 1 <= row["last_activity"] <= time.time() + 1
        assert row["resident"] is True
        assert row["phase"] in ("ready", "processing")
    assert rows["cli:alice"]["channel"] == "cli"
    assert rows["cli:alice"]["title"] == "Book a table for two"
    assert rows["cli:alice"]["turns"] == 1
    assert rows["plain-id"]["turns"] == 2
    assert rows["plain-id"]["title"] == "hello"


def test_get_session_transcript_and_context_views(daemon: DaemonHandle) -> None:
    sid = "cli:views"
    assert daemon.send(sid, "first question", wait=True).status_code == 200
    assert daemon.send(sid, "second question", wait=True).status_code == 200

    plain = daemon.http.get(f"/api/sessions/{sid}")
    assert plain.status_code == 200
    body = plain.json()
    assert body["id"] == sid and body["channel"] == "cli" and body["turns"] == 2
    assert body["title"] == "first question"
    transcript = body["messages"]
    assert [(m["role"], m["content"]) for m in transcript] == [
        ("user", "first question"),
        ("assistant", "echo: first question"),
        ("user", "second question"),
        ("assistant", "echo: second question"),
    ]
    assert daemon.transcript(sid, "transcript") == transcript

    context = daemon.transcript(sid, "context")
    assert context[0]["role"] == "system"
    assert daemon.daemon.settings.agent.system_prompt
    assert context[0]["content"] == trusted(daemon.daemon.settings.agent.system_prompt)
    said = [m for m in context[1:] if m.get("kind") != "context"]
    assert [m["id"] for m in said] == [m["id"] for m in transcript]
    # The context view also shows what netclaw told the model with the newest turn: the time,
    # right after the session's first message (the transcript view leaves it out).
    (tail,) = [m for m in context if m.get("kind") == "context"]
    assert context.index(tail) == 2 and "The time now" in tail["content"]


def test_get_unknown_session_is_404_in_every_view(shared: DaemonHandle) -> None:
    for view in ("transcript", "context"):
        response = shared.http.get("/api/sessions/cli:ghost", params={"view": view})
        assert_error(response, 404, "session_not_found")


# -- provider failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "provider_bad_request"), (401, "provider_auth"), (403, "provider_auth")],
)
def test_provider_failure_with_wait_is_502_with_the_error_code(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, status: int, code: str
) -> None:
    sid = f"cli:provider-{status}"
    scripted.enqueue(ErrorReply(status=status, message="the provider says no"))
    response = daemon.send(sid, "hello", wait=True)
    body = assert_error(response, 502, code)
    assert "the provider says no" in body["error"]["message"]
    assert body["session_id"] == sid
    (user,) = user_rows(daemon, sid)
    assert body["message_id"] == user["id"]
    assert len(scripted.requests) == 1  # not retried
    # The session still works.
    assert daemon.send(sid, "again", wait=True).json()["reply"] == "echo: again"
