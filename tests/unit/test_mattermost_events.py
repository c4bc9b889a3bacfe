"""Mattermost's pure parts: posts normalised from the server's JSON, session ids, and the
approval buttons' signed contexts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.chat import Button
from adapters.mattermost._actions import BadPress, action_key, attachment, verify
from adapters.mattermost._events import ids_of, mentions_of, post_of, posted_of, session_id_for

BOT = "b" * 26
ALICE = "a" * 26
CHANNEL = "c" * 26
ROOT = "r" * 26
KEY = action_key("the-bot-token")


def post(**fields: Any) -> dict[str, Any]:
    return {
        "id": "p" * 26,
        "channel_id": CHANNEL,
        "user_id": ALICE,
        "root_id": "",
        "message": "hello",
        "type": "",
        "props": {},
        "create_at": 1700000000000,
        "delete_at": 0,
        **fields,
    }


def test_a_posted_event_carries_its_post_as_a_json_string() -> None:
    event = {
        "event": "posted",
        "data": {"post": json.dumps(post()), "channel_type": "O", "mentions": json.dumps([BOT])},
        "seq": 3,
    }
    found = posted_of(event)
    assert found is not None and found[0]["id"] == "p" * 26
    assert mentions_of(found[1]) == {BOT}
    assert posted_of({"event": "typing", "data": {}}) is None
    assert posted_of({"event": "posted", "data": {"post": "{not json"}}) is None


def test_a_post_is_normalised_its_mention_taken_out() -> None:
    found = post_of(post(message="@NetClaw  what now?", root_id=ROOT), bot_id=BOT, username="netclaw")
    assert found is not None
    assert found.text == "what now?" and found.mentioned and found.root_id == ROOT
    assert not found.from_self and not found.from_bot
    # A longer username that starts with the bot's is someone else.
    other = post_of(post(message="@netclaw2 hi"), bot_id=BOT, username="netclaw")
    assert other is not None and not other.mentioned and other.text == "@netclaw2 hi"
    # The event's mentions say so even where the text does not (a display-name mention).
    assert post_of(post(), bot_id=BOT, username="netclaw", mentions={BOT}).mentioned  # type: ignore[union-attr]


def test_system_messages_deleted_posts_and_bots_are_not_people_talking() -> None:
    assert post_of(post(type="system_join_channel"), bot_id=BOT, username="netclaw") is None
    assert post_of(post(delete_at=1), bot_id=BOT, username="netclaw") is None
    bot = post_of(post(props={"from_bot": "true"}), bot_id=BOT, username="netclaw")
    hook = post_of(post(props={"from_webhook": "true"}), bot_id=BOT, username="netclaw")
    assert bot is not None and bot.from_bot and hook is not None and hook.from_bot
    mine = post_of(post(user_id=BOT), bot_id=BOT, username="netclaw")
    assert mine is not None and mine.from_self


def test_files_come_with_their_infos() -> None:
    info = {"id": "f" * 26, "name": "notes.txt", "mime_type": "text/plain", "size": 12}
    found = post_of(post(file_ids=["f" * 26], metadata={"files": [info]}), bot_id=BOT, username="netclaw")
    assert found is not None
    (file,) = found.files
    assert (file.name, file.mime_type, file.size) == ("notes.txt", "text/plain", 12)


def test_session_ids_name_the_channel_and_the_thread() -> None:
    assert session_id_for(CHANNEL, ROOT) == f"mattermost:{CHANNEL}:{ROOT}"
    assert ids_of(session_id_for(CHANNEL, ROOT)) == (CHANNEL, ROOT)
    assert ids_of(session_id_for(CHANNEL)) == (CHANNEL, None)
    assert ids_of("mattermost:short") is None and ids_of(f"slack:{CHANNEL}") is None
    with pytest.raises(ValueError, match="is not a Mattermost id"):
        session_id_for("../etc", ROOT)


def _press(action: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "user_id": ALICE,
        "user_name": "alice",
        "channel_id": CHANNEL,
        "post_id": "p" * 26,
        "context": action["integration"]["context"],
        **fields,
    }


def test_a_press_on_our_button_verifies_and_says_who_and_what() -> None:
    buttons = [Button("approve", "Approve", "ap-1", "primary"), Button("deny", "Deny", "ap-1", "danger")]
    made = attachment(KEY, "https://netclaw.example/mattermost/actions", CHANNEL, buttons)
    approve, deny = made["actions"]
    assert approve["id"] == "approve" and approve["style"] == "primary" and approve["type"] == "button"
    press = verify(KEY, _press(approve))
    assert (press.user_id, press.user_name, press.action, press.value) == (ALICE, "alice", "approve", "ap-1")
    assert verify(KEY, _press(deny)).action == "deny"


def test_a_forged_press_is_refused_naming_why() -> None:
    (approve,) = attachment(KEY, "u", CHANNEL, [Button("approve", "Approve", "ap-1")])["actions"]
    with pytest.raises(BadPress, match="no netclaw context"):
        verify(KEY, {**_press(approve), "context": {}})
    with pytest.raises(BadPress, match="not a JSON object"):
        verify(KEY, ["a list"])
    with pytest.raises(BadPress, match="has no user_id"):
        verify(KEY, {**_press(approve), "user_id": ""})
    with pytest.raises(BadPress, match="does not verify"):  # another token's key
        verify(action_key("another-token"), _press(approve))
    with pytest.raises(BadPress, match="does not verify"):  # replayed into another channel
        verify(KEY, _press(approve, channel_id="d" * 26))
    tampered = {**approve["integration"]["context"], "value": "ap-2"}
    with pytest.raises(BadPress, match="does not verify"):
        verify(KEY, {**_press(approve), "context": tampered})


@given(action=st.sampled_from(["approve", "deny", "always"]), value=st.text(min_size=1, max_size=40))
def test_only_the_signed_action_and_approval_verify(action: str, value: str) -> None:
    (signed,) = attachment(KEY, "u", CHANNEL, [Button(action, action, value)])["actions"]
    assert verify(KEY, _press(signed)).value == value
    for other in {"approve", "deny", "always"} - {action}:
        context = {**signed["integration"]["context"], "action": other}
        with pytest.raises(BadPress):
            verify(KEY, {**_press(signed), "context": context})
