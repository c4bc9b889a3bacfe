"""Fuzzing the API and the webhook routes of a real daemon over HTTP: whatever arrives —
methods, paths, queries, headers, encodings, bodies — the answer is never a 500, and every
error is in the JSON error shape ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DaemonHandle

EXAMPLES = 300
SECRET = "a-webhook-secret-of-at-least-32-bytes!!"

segments = st.one_of(
    st.sampled_from(["cli:fuzz", "webhook:x:1", "slack:C1:1.2", "nope", "", "..", "%00", "a" * 300]),
    st.text(min_size=0, max_size=40),
)
paths = st.one_of(
    st.builds(lambda s: f"/api/sessions/{s}", segments),
    st.builds(lambda s: f"/api/sessions/{s}/messages", segments),
    st.builds(lambda s: f"/api/sessions/{s}/cancel", segments),
    st.builds(lambda s: f"/api/sessions/{s}/reset", segments),
    st.builds(lambda s: f"/api/sessions/{s}/reminders", segments),
    st.builds(lambda s, a: f"/api/sessions/{s}/approvals/{a}", segments, segments),
    st.builds(lambda s: f"/api/reminders/{s}", segments),
    st.builds(lambda s: f"/api/memories/{s}", segments),
    st.builds(lambda s: f"/webhooks/{s}", st.one_of(st.just("alerts"), st.just("ci"), segments)),
    st.sampled_from(
        ["/api/sessions", "/api/usage", "/api/approvals", "/api/reminders", "/api/memories", "/healthz"]
    ),
    st.text(min_size=0, max_size=60).map(lambda t: "/" + t),
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(allow_nan=False),
        st.text(max_size=50),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
objects = st.fixed_dictionaries(
    {},
    optional={
        "text": json_values,
        "user": json_values,
        "user_name": json_values,
        "decision": st.one_of(st.sampled_from(["approve", "deny", "always"]), json_values),
        "at": json_values,
        "in_s": json_values,
        "cron": st.one_of(st.sampled_from(["0 9 * * *", "61 * * * *", "* * *"]), json_values),
        "timezone": st.one_of(st.sampled_from(["UTC", "Mars/Base"]), json_values),
        "files": json_values,
        "message": json_values,
        "thread": json_values,
    },
)
bodies = st.one_of(
    st.none(),
    st.binary(max_size=300),
    objects.map(lambda o: json.dumps(o).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(min_value=4200, max_value=5000).map(lambda n: b'{"text": ' + b"9" * n + b"}"),
    st.integers(min_value=900, max_value=3000).map(lambda n: b"[" * n + b"]" * n),
)
queries = st.dictionaries(
    st.sampled_from(["wait", "filter", "view", "since", "by", "memories", "q", "audience", "session", "x"]),
    st.text(max_size=20),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(bodies)
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        headers["Authorization"] = draw(
            st.sampled_from(["TOKEN", "Bearer wrong", "Bearer ", "Basic x", "Bearer " + SECRET])
        )
    encoding = draw(st.sampled_from([None, "gzip", "deflate", "br", "gzip-broken", "x-junk"]))
    if body is not None and encoding == "gzip":
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    elif body is not None and encoding == "deflate":
        body, headers["Content-Encoding"] = zlib.compress(body), "deflate"
    elif encoding == "gzip-broken":
        headers["Content-Encoding"] = "gzip"
    elif encoding is not None:
        headers["Content-Encoding"] = encoding
    if draw(st.booleans()):
        headers["Idempotency-Key"] = draw(
            st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=250)
        )
    if draw(st.booleans()):
        headers["X-Netclaw-Timestamp"] = draw(
            st.sampled_from(["", "0", "99999999999999999999", "now", "1700000000"])
        )
        headers["X-Netclaw-Signature"] = draw(st.sampled_from(["", "sha256=", "sha256=" + "0" * 64, "md5=x"]))
    if draw(st.booleans()):
        headers["Content-Type"] = draw(
            st.sampled_from(["application/json", "text/plain", "multipart/form-data", "x/y; charset=nope"])
        )
    return {
        "method": draw(st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"])),
        "path": draw(paths),
        "params": draw(queries),
        "headers": headers,
        "content": body,
    }


@pytest.fixture
def target(start_daemon: Any, monkeypatch: pytest.MonkeyPatch) -> DaemonHandle:
    monkeypatch.setenv("FUZZ_ALERTS", SECRET)
    monkeypatch.setenv("FUZZ_CI", SECRET)
    return start_daemon(
        webhooks={
            "routes": {
                "alerts": {
                    "auth": {"type": "hmac", "secret_env": "FUZZ_ALERTS"},
                    "session_key": "$.thread",
                    "text": "$.text",
                },
                "ci": {"auth": {"type": "bearer", "secret_env": "FUZZ_CI"}, "text": "$.message"},
            }
        }
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
def test_never_a_500_and_always_the_error_shape(
    target: DaemonHandle, caplog: pytest.LogCaptureFixture, request: dict[str, Any]
) -> None:
    headers = dict(request["headers"])
    if headers.get("Authorization") == "TOKEN":
        headers["Authorization"] = f"Bearer {target.token}"
    path = request["path"]
    with httpx.Client(base_url=target.base_url, timeout=httpx.Timeout(10.0, read=10.0)) as client:
        try:
            built = client.build_request(
                request["method"], path, params=request["params"], headers=headers, content=request["content"]
            )
        except (httpx.InvalidURL, UnicodeEncodeError, ValueError):
            return  # not a request a client can send
        try:
            response = client.send(built, stream=True)
        except httpx.LocalProtocolError:
            return  # httpx refuses to send it (a header value h11 rejects)
        try:
            status = response.status_code
            if status >= 400 and request["method"] != "HEAD":
                response.read()
                body = response.json()
                assert set(body["error"]) >= {"code", "message"}, body
        finally:
            response.close()
    assert status != 500, (request, status)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors  # bad input is the client's fault: no tracebacks in our log
