"""Traces across a SIGKILL (``netclaw run`` as a subprocess, a real OTLP/HTTP receiver in
the test): what ended before the kill reached the collector; the turn that resumes after
the restart goes on in the trace it started in (its id derived from the turn's message,
which the journal holds), marked resumed, and its model call sends its traceparent to the
provider. A turn that continued a caller's trace resumes in its own (the caller's context
is not journaled)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Daemons, Setup, subprocess_env, wait_until
from tests.fakes.otlp_receiver import OtlpReceiverThread
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread

pytestmark = pytest.mark.slow

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
ROOT = "invoke_agent netclaw"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiverThread]:
    with OtlpReceiverThread() as server:
        yield server


@pytest.mark.parametrize("caller", [False, True], ids=["own-trace", "callers-trace"])
def test_a_turn_killed_mid_call_resumes_in_its_trace(
    tmp_path: Path,
    scripted: ScriptedOpenAIThread,
    receiver: OtlpReceiverThread,
    daemons: Daemons,
    caller: bool,
) -> None:
    setup = Setup(
        tmp_path / "site", scripted.base_url, telemetry={"traces": True, "endpoint": receiver.base_url}
    )
    env = subprocess_env(OTEL_BSP_SCHEDULE_DELAY="50")
    daemon = daemons.start(setup.config, setup.data_dir, setup.port, env=env)
    scripted.enqueue(Reply(hang=True))  # the call never answers: killed meanwhile
    token = (setup.data_dir / "control.token").read_text(encoding="utf-8").strip()
    accepted = httpx.post(
        f"{daemon.base_url}/api/sessions/cli:crash/messages",
        json={"text": "hello"},
        headers={"Authorization": f"Bearer {token}"}
        | ({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"} if caller else {}),
        timeout=30,
    )
    assert accepted.status_code == 202, accepted.text
    wait_until(lambda: scripted.requests, 30, "the model call in flight")
    # What ended before the kill is at the collector (in the caller's trace, if one came).
    (queued,) = wait_until(lambda: receiver.named("queue"), 10, "the queue span")
    assert (queued.trace_id == TRACE_ID) is caller
    daemon.sigkill()
    assert not [s for s in receiver.spans if s.name == ROOT]  # the turn never ended there

    daemons.start(setup.config, setup.data_dir, setup.port, env=env)
    (resumed,) = wait_until(
        lambda: [s for s in receiver.spans if s.name == ROOT], 30, "the resumed turn's span"
    )
    assert resumed.attributes["netclaw.turn.resumed"] is True
    assert resumed.attributes["netclaw.turn"] == 1
    assert resumed.attributes["netclaw.session.id"] == "cli:crash"
    assert resumed.attributes["netclaw.turn.status"] == "completed"
    assert resumed.parent_id == "" and queued.parent_id != resumed.span_id
    # Its own trace: the one the turn started in. A caller's: the resumed part is apart.
    assert (resumed.trace_id == queued.trace_id) is not caller
    (call,) = [s for s in receiver.spans if s.parent_id == resumed.span_id and s.name == "chat scripted"]
    # (its flags: sampled, and the SDK's random trace id: 03)
    assert scripted.headers[-1]["traceparent"].startswith(f"00-{resumed.trace_id}-{call.span_id}-")
