"""Turns leave no reference cycles behind: what lets the serving process collect its young
generation rarely (``YOUNG_COLLECTION_EVERY`` in netclaw/process/heap.py). A turn that made
cycles would not leak — a collection still comes — but every collection walks what
survived, so this is what keeps a turn from paying for the collector."""

from __future__ import annotations

import collections
import gc
import http.client
import json
from urllib.parse import urlsplit

from tests.conftest import DaemonHandle
from tests.fakes.scripted_openai import ScriptedOpenAIThread

SESSIONS, TURNS = 3, 20


def test_turns_over_http_leave_no_reference_cycles(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    # The standard library's client: httpx's makes cycles of its own on the test's side.
    url = urlsplit(daemon.base_url)
    assert url.hostname is not None and url.port is not None
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    headers = {"Authorization": f"Bearer {daemon.token}", "Content-Type": "application/json"}

    def turn(session_id: str, text: str) -> None:
        body = json.dumps({"text": text})
        conn.request("POST", f"/api/sessions/{session_id}/messages?wait=1", body, headers)
        response = conn.getresponse()
        answer = response.read()
        assert response.status == 200, answer

    try:
        for s in range(SESSIONS):  # the sessions started, their first turn taken
            turn(f"cli:cycles-{s}", "hello")
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable stays to be named
        try:
            for i in range(TURNS):
                for s in range(SESSIONS):
                    turn(f"cli:cycles-{s}", f"message {i}")
            found = gc.collect()
            kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    finally:
        conn.close()
    # A stray cycle elsewhere in the process (a background check's exception) is tolerated;
    # one a turn would be SESSIONS * TURNS at least.
    assert found < SESSIONS * TURNS, (
        f"{found} objects in reference cycles after {SESSIONS * TURNS} turns: {kinds.most_common(15)}"
    )
