"""The answer to a submitted message (netclaw/http/web.py): 202 once durable; with ``wait``, the
reply, or the turn's error — a spend guard's as 429, with ``Retry-After`` only when the
cap resets."""

from __future__ import annotations

import datetime as dt
import json

from netclaw.http.web import submission_response
from netclaw.sessions import Admission, TurnOutcome

ADMITTED = Admission("cli:x", "m1", duplicate=False)


def test_durable_then_answered() -> None:
    assert submission_response(ADMITTED, None).status == 202
    answered = submission_response(ADMITTED, TurnOutcome(1, "completed", "hi"))
    assert answered.status == 200 and json.loads(answered.text or "")["reply"] == "hi"


def test_a_daily_cap_says_when_to_come_back_and_a_budget_that_never_resets_does_not() -> None:
    resets = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).isoformat()
    daily = {
        "code": "spend_limit",
        "message": "used",
        "cap": "session.max_tokens_per_day",
        "resets_at": resets,
    }
    capped = submission_response(ADMITTED, TurnOutcome(1, "failed", None, daily))
    assert capped.status == 429 and 7000 <= int(capped.headers["Retry-After"]) <= 7200
    budget = {"code": "spend_limit", "message": "used its budget", "cap": "budget_tokens"}
    spent = submission_response(ADMITTED, TurnOutcome(1, "failed", None, budget))
    assert spent.status == 429 and "Retry-After" not in spent.headers
    assert json.loads(spent.text or "")["cap"] == "budget_tokens"
