"""The fuzz corpus against a real daemon, route by route: no answer is a 5xx, every 4xx
is in the JSON error shape, an identifier with a control character is always refused,
the valid requests are answered as they should be (so the corpus reaches the handlers),
and the daemon's log stays clean — no traceback, no ERROR, and every line a record of its
own (nothing from outside split or forged a line)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from adapters.webhook import WebhookAdapter
from netclaw.config import Settings
from netclaw.gateway import ChatInput, Commands, Operator
from netclaw.http.api import Api
from tests.fuzz.conftest import FuzzDaemon
from tests.fuzz.corpus import Case, build_corpus, by_route
from tests.fuzz.routes import ROUTES
from tests.fuzz.wire import Answer, send

CORPUS = by_route()
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING) [\w.]+: \S")
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def check(case: Case, answer: Answer) -> str | None:
    """What is wrong with ``answer`` to ``case``, or None."""
    status = answer.status
    if status is None:
        # Only a case that hung up, or whose framing the daemon may refuse by closing, has none.
        return None if case.hangup or case.framing == "raw" or case.head_edit else "no answer"
    if status >= 500:
        return f"{status} {answer.body[:300]!r}"
    if (
        status >= 400
        and case.method != "HEAD"
        and case.framing != "hangup_answer"
        and not answer.error_shape()
    ):
        return f"{status} not in the JSON error shape: {answer.content_type} {answer.body[:200]!r}"
    if case.refuse and not 400 <= status < 500:
        return f"{status}: an identifier with a control character was accepted"
    if case.baseline and status not in case.route.answers:
        return f"the valid request got {status} {answer.body[:300]!r}, not {sorted(case.route.answers)}"
    return None


def log_problems(log: str) -> list[str]:
    problems = []
    for line in log.splitlines():
        if RAW_CONTROL.search(line):
            problems.append(f"a raw control character: {line[:200]!r}")
        elif not RECORD.match(line):
            problems.append(
                f"not a record of its own (a traceback, an ERROR or a forged line): {line[:200]!r}"
            )
    return problems


@pytest.mark.parametrize("route", sorted(CORPUS))
def test_the_corpus_route_by_route(fuzz_daemon: FuzzDaemon, route: str) -> None:
    failures = []
    for case in CORPUS[route]:
        problem = check(case, send(case, fuzz_daemon.target))
        if problem is not None:
            failures.append(f"{case.name}: {problem}")
    log = fuzz_daemon.new_log()
    assert fuzz_daemon.process.alive(), log[-3000:]
    assert not failures, f"{len(failures)} of {len(CORPUS[route])} cases failed:\n" + "\n".join(failures[:25])
    problems = log_problems(log)
    assert not problems, f"{len(problems)} bad log line(s):\n" + "\n".join(problems[:25])


def test_the_table_covers_every_route() -> None:
    """A route added to the daemon without a line in tests/fuzz/routes.py fails here."""
    api = Api(Operator(*[cast(Any, object())] * 4), cast(Commands, object()), "token").app()
    hooks = WebhookAdapter(cast(Settings, object()), cast(ChatInput, object())).routes()
    served = {(r.method, r.resource.canonical) for r in api.router.routes() if r.resource is not None}
    served |= {(r.method, r.path) for r in hooks}
    served -= {("HEAD", path) for _, path in served}  # aiohttp adds HEAD to every GET
    covered = {(r.method, r.template) for r in ROUTES}
    assert served - covered == set(), "routes without fuzz cases"
    assert covered - served == set(), "fuzz routes the daemon does not serve"


def test_every_route_has_every_shape() -> None:
    corpus = build_corpus()
    for route in ROUTES:
        cases = [c for c in corpus if c.route is route]
        assert len(cases) >= 50, (route.name, len(cases))
        assert any("%0A" in c.target for c in cases), route.name
        for shape in ("Authorization: b'a\\x01b'", "hangup_request", "hangup_expect", "chunked", "HEAD"):
            assert any(shape in c.name for c in cases), (route.name, shape)
    assert sum(1 for c in corpus if c.refuse) >= 250


def test_the_documented_count_command() -> None:
    """``python -m tests.fuzz.corpus``, as docs/guarantees.md gives it: one line per route, then the total."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.corpus"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    lines = result.stdout.splitlines()
    assert lines[-1].split() == [str(len(build_corpus())), "cases", "in", "all"]
    assert len(lines) == len(CORPUS) + 1
