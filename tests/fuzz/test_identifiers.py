"""No identifier with a control character is ever accepted, by any route: session ids,
approval, reminder and memory ids, webhook route names (path segments and query values,
percent-encoded as a client would send them) and the identifiers in bodies (``user``,
``user_name``, a reminder's ``name``). Always a 4xx — a trailing newline included, which
``re.match`` with ``$`` used to let through."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DaemonHandle
from tests.fuzz.corpus import Case
from tests.fuzz.routes import ROUTES, WEBHOOK_SECRET, Route, webhook_config
from tests.fuzz.wire import Target, send

WITH_IDS = [r for r in ROUTES if r.ids]
WITH_ID_FIELDS = [r for r in ROUTES if r.id_fields]
controls = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x1F),
    st.sampled_from(["\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\r\n", "\n"]),
)


@st.composite
def spoiled(draw: st.DrawFn, valid: str) -> str:
    """``valid`` with control characters put anywhere (often a single trailing newline)."""
    if draw(st.booleans()):
        return valid + "\n"
    text = valid
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(controls) + text[at:]
    return text


@pytest.fixture
def target(start_daemon: Callable[..., DaemonHandle], monkeypatch: pytest.MonkeyPatch) -> Target:
    monkeypatch.setenv("FUZZ_ALERTS_SECRET", WEBHOOK_SECRET)
    monkeypatch.setenv("FUZZ_CI_SECRET", WEBHOOK_SECRET)
    handle = start_daemon(
        gateway={"host": "127.0.0.1", "port": 0, "webhook_host": "127.0.0.1", "webhook_port": 0},
        webhooks=webhook_config(),
    )
    port = int(handle.base_url.rsplit(":", 1)[1])
    webhook_port = handle.daemon.webhook_port
    assert webhook_port is not None
    return Target("127.0.0.1", port, webhook_port, handle.token, WEBHOOK_SECRET)


def answer_to(
    target: Target, route: Route, path_or_query: dict[str, str], body: dict[str, Any] | None
) -> int:
    segments = {k: quote(v, safe="") for k, v in path_or_query.items() if k in route.segments}
    query = {**route.query, **{k: quote(v, safe="") for k, v in path_or_query.items() if k in route.query}}
    path = route.path(segments) + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    chosen = body if body is not None else (route.bodies[0] if route.bodies else None)
    raw = json.dumps(chosen).encode() if chosen is not None else b""
    headers = (
        *tuple((k, v.encode()) for k, v in route.headers.items()),
        ("Content-Type", b"application/json"),
    )
    answer = send(Case(route.name, route, route.method, path, headers, raw), target)
    assert answer.status is not None, route.name
    assert answer.status < 500, (route.name, answer.status, answer.body)
    return answer.status


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(data=st.data())
def test_no_route_accepts_an_id_with_a_control_character(target: Target, data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(WITH_IDS), label="route")
    key = data.draw(st.sampled_from(sorted(route.ids)), label="parameter")
    valid = route.segments.get(key) or route.query[key]
    hostile = data.draw(spoiled(valid), label="id")
    status = answer_to(target, route, {key: hostile}, None)
    assert 400 <= status < 500, (route.name, key, hostile, status)


@SETTINGS
@given(data=st.data())
def test_no_body_identifier_with_a_control_character_is_accepted(target: Target, data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(WITH_ID_FIELDS), label="route")
    body = copy.deepcopy(route.bodies[0])
    node = data.draw(st.sampled_from(_holders(body, route.id_fields)), label="object")
    field = data.draw(st.sampled_from(sorted(route.id_fields & set(node))), label="field")
    node[field] = data.draw(spoiled(str(node[field])), label="value")
    status = answer_to(target, route, {}, body)
    assert 400 <= status < 500, (route.name, field, node[field], status)


def _holders(body: dict[str, Any], fields: frozenset[str]) -> list[dict[str, Any]]:
    """The objects in ``body`` (itself or nested) that hold one of ``fields``."""
    found = [body] if fields & set(body) else []
    for value in body.values():
        if isinstance(value, dict):
            found += _holders(value, fields)
    return found


def test_a_trailing_newline_is_refused_on_every_route(target: Target) -> None:
    for route in WITH_IDS:
        for key in sorted(route.ids):
            valid = route.segments.get(key) or route.query[key]
            status = answer_to(target, route, {key: valid + "\n"}, None)
            assert 400 <= status < 500, (route.name, key, status)
