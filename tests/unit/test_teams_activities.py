"""How the Teams channel reads activities and the Bot Connector's failures (pure: the SDK's
activity model, no network)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from microsoft_agents.activity import Activity
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from adapters.teams._client import normalise, parse_activity, reference_of, translate_error
from adapters.teams._port import conversation_key

SERVICE = "https://smba.trafficmanager.net/emea/"
BOT = "28:bot-app-id"
CHANNEL = "19:general@thread.tacv2"


def activity(**fields: Any) -> Activity:
    data: dict[str, Any] = {
        "type": "message",
        "id": "1700000000002",
        "serviceUrl": SERVICE,
        "channelId": "msteams",
        "from": {"id": "29:alice", "name": "Alice", "aadObjectId": "aad-alice"},
        "recipient": {"id": BOT, "name": "Netclaw"},
        "conversation": {
            "id": f"{CHANNEL};messageid=1700000000001",
            "conversationType": "channel",
            "tenantId": "t",
        },
        "text": "hello",
        **fields,
    }
    return Activity.model_validate(data)


def read(a: Activity) -> Any:
    message = normalise(a, reference_of(a))
    assert message is not None
    return message


def test_a_reply_chain_is_its_channel_and_root_and_a_new_post_roots_its_own() -> None:
    reply = read(activity())
    assert reply.reference.conversation_id == CHANNEL and reply.reference.kind == "channel"
    assert reply.thread == "1700000000001" and reply.conversation.channel == conversation_key(CHANNEL)
    post = read(activity(conversation={"id": CHANNEL, "conversationType": "channel"}, id="1700000000009"))
    assert post.thread == "1700000000009"
    chat = read(activity(conversation={"id": "a:1personal", "conversationType": "personal"}))
    assert chat.thread is None and chat.reference.conversation_id == "a:1personal"


def test_the_bots_mention_is_taken_out_and_anothers_is_left() -> None:
    mention = [{"type": "mention", "mentioned": {"id": BOT, "name": "Netclaw"}, "text": "<at>Netclaw</at>"}]
    ours = read(activity(text="<at>Netclaw</at> what time is it &amp; where", entities=mention))
    assert ours.mentioned and ours.text == "what time is it & where"
    bob = [{"type": "mention", "mentioned": {"id": "29:bob", "name": "Bob"}, "text": "<at>Bob</at>"}]
    theirs = read(activity(text="<at>Bob</at> look", entities=bob))
    assert not theirs.mentioned and theirs.text == "Bob look"
    both = read(activity(text="<at>Netclaw</at> ask <at>Bob</at><br>then me", entities=mention + bob))
    assert both.mentioned and both.text == "ask Bob\nthen me"  # Teams' HTML line ends kept as lines


def test_a_cards_button_is_an_action_and_the_author_is_known_by_entra_id() -> None:
    pressed = read(
        activity(text="", value={"netclaw": "approve", "value": "ap-1"}, replyToId="1700000000005")
    )
    assert pressed.action == ("approve", "ap-1") and pressed.reply_to == "1700000000005"
    assert pressed.user_id == "aad-alice" and pressed.account_id == "29:alice"
    assert read(activity(value={"other": 1})).action is None
    assert read(activity(**{"from": {"id": "28:another-bot", "name": "Other"}})).from_bot


def test_the_bots_token_goes_only_to_the_service_the_activity_came_from() -> None:
    files = read(
        activity(
            attachments=[
                {
                    "contentType": "application/vnd.microsoft.teams.file.download.info",
                    "name": "notes.txt",
                    "content": {"downloadUrl": "https://tenant.sharepoint.com/download?x=1"},
                },
                {"contentType": "image/png", "contentUrl": f"{SERVICE}v3/attachments/1/views/original"},
                {"contentType": "image/png", "contentUrl": "https://elsewhere.example/a.png"},
                {"contentType": "text/html", "content": "<p>hello</p>"},
            ]
        )
    ).files
    assert [(f.name, f.mime_type, f.authorized) for f in files] == [
        ("notes.txt", "text/plain", False),
        ("file-2", "image/png", True),
        ("file-3", "image/png", False),
    ]


def test_an_activity_must_come_from_the_service_its_token_vouches_for() -> None:
    data = activity().model_dump(by_alias=True, exclude_none=True, mode="json")
    assert parse_activity(data, {"serviceurl": SERVICE}).id == "1700000000002"
    with pytest.raises(PermissionError, match=r"vouches for https://evil\.example/"):
        parse_activity(data, {"serviceurl": "https://evil.example/"})
    with pytest.raises(ValueError, match="conversation"):
        parse_activity({**data, "conversation": {"id": ""}}, {})
    with pytest.raises(ValueError, match="not an activity"):
        parse_activity(["a", "list"], {})


def failure(status: int, headers: dict[str, str] | None = None) -> aiohttp.ClientResponseError:
    info = aiohttp.RequestInfo(URL(SERVICE), "POST", CIMultiDictProxy(CIMultiDict()), URL(SERVICE))
    return aiohttp.ClientResponseError(
        info, (), status=status, message="said", headers=CIMultiDictProxy(CIMultiDict(headers or {}))
    )


def test_the_connectors_failures_say_whether_a_retry_helps() -> None:
    limited = translate_error(failure(429, {"Retry-After": "7"}), "send a message")
    assert limited.transient and limited.retry_after == 7.0 and limited.status == 429
    assert translate_error(failure(503), "send a message").transient
    gone = translate_error(failure(404), "edit a message")
    assert gone.status == 404 and not gone.transient
    refused = translate_error(failure(403), "send a message")
    assert "removed from the team or chat" in str(refused) and not refused.transient
    assert translate_error(aiohttp.ClientConnectionError("refused"), "send a message").transient
