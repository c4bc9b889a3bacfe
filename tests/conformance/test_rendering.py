"""Conformance: how replies look — streamed by edits within the platform's pace and ending
as one message with the final text; a long reply split at the platform's message limit,
a code block cut in two fenced in both parts (what ``adapters/chat/_text.py`` promises)."""

from __future__ import annotations

import itertools

import pytest

from tests.conformance.model import marker
from tests.conformance.rig import InProcess, wait_for
from tests.fakes.scripted_openai import Reply

FENCE = "```"


def test_a_reply_streams_by_edits_at_the_platforms_pace_and_ends_as_one_message(rig: InProcess) -> None:
    driver, caps = rig.driver, rig.driver.capabilities
    if not caps.edits:
        pytest.skip(f"{driver.name} cannot edit a message: a reply arrives whole")
    interval = caps.edit_interval_s
    mark = marker()
    text = f"{mark} " + " ".join(f"word{i:03d}" for i in range(90))
    chunk = 20
    # Deltas for about 2.5 intervals: the first shows at once, at least two edits follow.
    delay = 2.5 * interval / (len(text) / chunk)
    rig.model.script(mark, Reply(text=text, chunk_size=chunk, chunk_delay_s=delay))
    said = driver.say(f"stream please {mark}")
    conversation = driver.conversation_of(said)
    rig.replied(conversation, text)

    assert driver.bot_messages(conversation) == [text]  # one message, the final text
    by_message = {
        k: list(g) for k, g in itertools.groupby(driver.edits(conversation), key=lambda e: e.message_id)
    }
    assert len(by_message) == 1, by_message
    (shown,) = by_message.values()
    assert shown[0].first and shown[-1].text == text
    assert len(shown) >= 3, [e.text for e in shown]  # posted, then edited as it grew
    assert len(shown[0].text) < len(text) and text.startswith(shown[0].text)  # grew in place
    # While it streams, one message is edited at most once per interval; the final text
    # (the turn's recorded reply) is shown at once (adapters/chat/_streaming.py).
    streaming = shown[:-1]
    gaps = [b.at - a.at for a, b in itertools.pairwise(streaming)]
    assert all(gap >= interval * 0.95 for gap in gaps), (interval, gaps)


def fenced(piece: str) -> list[tuple[str, bool]]:
    """Each line of ``piece`` that is not a fence, and whether it is inside a code block."""
    inside, found = False, []
    for line in piece.split("\n"):
        if line.strip().startswith(FENCE):
            inside = not inside
            continue
        found.append((line, inside))
    assert not inside, f"a code block is left open in {piece[-200:]!r}"
    return found


def test_a_long_reply_is_split_at_the_limit_and_its_code_block_stays_fenced(rig: InProcess) -> None:
    driver, limit = rig.driver, rig.driver.capabilities.message_limit
    if not limit:
        pytest.skip(f"{driver.name} has no message length limit: a reply is never split")
    mark = marker()
    code = [f"print('line {i:04d} of the kit script')" for i in range(int(limit * 1.6 / 36))]
    intro, outro = f"{mark} Here is the script:", "That is all for now."
    text = "\n\n".join([intro, f"{FENCE}python\n" + "\n".join(code) + f"\n{FENCE}", outro])
    rig.model.script(mark, Reply(text=text, chunk_size=max(limit // 3, 200), chunk_delay_s=0.01))
    said = driver.say(f"a long one {mark}")
    conversation = driver.conversation_of(said)
    session = driver.session_of(conversation)
    wait_for(
        lambda: [m["content"] for m in rig.transcript(session) if m["role"] == "assistant"][-1:] == [text],
        "the reply recorded",
    )

    def in_full() -> list[str]:
        shown = driver.bot_messages(conversation)
        return shown if shown and shown[-1].endswith(outro) else []

    pieces = wait_for(in_full, "the reply shown in full")

    assert len(pieces) >= 2, pieces
    assert all(len(p) <= limit for p in pieces), [len(p) for p in pieces]
    lines = [line for piece in pieces for line in fenced(piece)]  # every piece closes its block
    assert [line for line, inside in lines if inside] == code  # each code line once, in order, as code
    assert [line for line, inside in lines if not inside and line.strip()] == [intro, outro]
