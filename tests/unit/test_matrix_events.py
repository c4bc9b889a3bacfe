"""The Matrix channel's pure parts: Matrix ids in session ids (reversible, within the
session id alphabet, ``<channel>:<place>[:<conversation>]`` intact), speakers and roles
with Matrix user ids, and the client-server API's events normalised."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import adapters
from adapters.matrix import CHANNEL
from adapters.matrix._events import approval_of, invite_of, message_of, reaction_of, room_events
from adapters.matrix._ids import conversation_ids, decode, encode, place_of, session_id_for
from adapters.matrix._port import EDIT_INTERVAL_S, MESSAGE_LIMIT
from netclaw.config import settings_model
from netclaw.identifiers import check_session_id
from netclaw.security.policy import channel_of, default_scope
from netclaw.security.roles import role_for, speaker_of

ME = "@netclaw:example.org"
ROOM_V12 = "!WFF9xkLy9JKSm8WSm1rjACB8T-rJHvftiTy_QggI3D8"
ROOM_OLD = "!abcDEF:matrix.example.org:8448"
EVENT = "$ugoooeEyCcQVecx0gzDKe51Ehu_AckYVZ1qHd86JiC40"


def test_room_and_thread_ids_make_valid_reversible_session_ids() -> None:
    assert encode(ROOM_OLD, "!") == "abcDEF_3Amatrix.example.org_3A8448"
    assert encode(ROOM_V12, "!") == "WFF9xkLy9JKSm8WSm1rjACB8T-rJHvftiTy_5FQggI3D8"
    for room in (ROOM_OLD, ROOM_V12):
        thread = session_id_for(room, EVENT)
        assert check_session_id(thread) == thread
        assert thread.count(":") == 2 and channel_of(thread) == "matrix"
        assert conversation_ids(thread) == (room, EVENT)
        assert conversation_ids(session_id_for(room)) == (room, None)
        # The memory scope is the room, for its threads and its direct chat alike.
        assert default_scope(thread) == default_scope(session_id_for(room)) == place_of(room)


@given(st.text(min_size=1, max_size=60))
def test_any_id_reads_back_exactly(local: str) -> None:
    room = f"!{local}"
    component = encode(room, "!")
    assert ":" not in component and decode(component, "!") == room


def test_what_is_no_matrix_session_reads_as_none() -> None:
    for session in ("slack:C1:1.2", "matrix", "matrix:a_ZZ", "matrix:a:b:c", "matrix:_3"):
        assert conversation_ids(session) is None, session
    with pytest.raises(ValueError, match="starting with '!'"):
        session_id_for("#alias:example.org")
    with pytest.raises(ValueError, match="too long"):
        session_id_for("!" + "x" * 150, "$" + "y" * 60)


def test_speakers_keep_the_matrix_user_id_and_roles_match_it() -> None:
    session = session_id_for(ROOM_OLD, EVENT)
    speaker = speaker_of(session, "@alice:example.org")
    assert speaker == "matrix:@alice:example.org"
    settings = settings_model()(
        roles={
            "ops": {"members": ["matrix:@alice:example.org"]},
            "guests": {"members": ["matrix:@*:elsewhere.org"]},
        }
    )
    assert role_for(settings, speaker) == "ops"
    assert role_for(settings, "matrix:@bob:elsewhere.org") == "guests"
    assert role_for(settings, "matrix:@bob:example.org") is None


def test_the_channel_declares_what_the_port_does() -> None:
    assert CHANNEL.capabilities.message_limit == MESSAGE_LIMIT
    assert CHANNEL.capabilities.edit_interval_s == EDIT_INTERVAL_S
    assert CHANNEL.capabilities.approvals == "reactions"
    assert any(i.name == "matrix" and i.channel is CHANNEL for i in adapters.installed_channels())


# -- events ------------------------------------------------------------------------------------------


def text_event(body: str, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": "$e1",
        "sender": "@alice:example.org",
        "origin_server_ts": 1000,
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def test_mentions_by_m_mentions_id_or_leading_display_name() -> None:
    pill = message_of(
        text_event("netclaw: hi there", **{"m.mentions": {"user_ids": [ME]}}), "!r", ME, ["netclaw"]
    )
    assert pill is not None and pill.mentioned and pill.text == "hi there"
    # An explicit m.mentions without the bot: quoting its name is no mention.
    quoted = message_of(text_event("netclaw: hi", **{"m.mentions": {}}), "!r", ME, ["netclaw"])
    assert quoted is not None and not quoted.mentioned
    legacy = message_of(text_event(f"hey {ME} look"), "!r", ME, ["netclaw"])
    assert legacy is not None and legacy.mentioned and legacy.text == "hey  look"
    named = message_of(text_event("NetClaw, status?"), "!r", ME, ["netclaw"])
    assert named is not None and named.mentioned and named.text == "status?"
    assert not message_of(text_event("netclawed it"), "!r", ME, ["netclaw"]).mentioned  # type: ignore[union-attr]


def test_threads_replies_edits_notices_and_files() -> None:
    thread = {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$root"},
    }
    in_thread = message_of(text_event("more", **{"m.relates_to": thread}), "!r", ME)
    assert in_thread is not None and in_thread.thread_root == "$root" and in_thread.reply_to is None
    reply = message_of(
        text_event(
            "> <@netclaw:example.org> May I run x?\n\napprove",
            **{"m.relates_to": {"m.in_reply_to": {"event_id": "$p"}}},
        ),
        "!r",
        ME,
    )
    assert reply is not None and reply.reply_to == "$p" and reply.text == "approve"
    edit = text_event("* fixed", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}})
    assert message_of(edit, "!r", ME) is None
    notice = message_of({**text_event("beep"), "content": {"msgtype": "m.notice", "body": "beep"}}, "!r", ME)
    assert notice is not None and notice.from_bot
    file = message_of(
        {
            **text_event(""),
            "content": {
                "msgtype": "m.file",
                "body": "a.txt",
                "url": "mxc://s/m",
                "info": {"mimetype": "text/plain", "size": 3},
            },
        },
        "!r",
        ME,
    )
    assert (
        file is not None
        and file.text == ""
        and [(f.name, f.url, f.size) for f in file.files] == [("a.txt", "mxc://s/m", 3)]
    )
    encrypted_file = {
        **text_event(""),
        "content": {"msgtype": "m.file", "body": "a.txt", "file": {"url": "mxc://s/m"}},
    }
    assert message_of(encrypted_file, "!r", ME).files == ()  # type: ignore[union-attr]


def test_history_a_join_brings_along_is_not_for_answering() -> None:
    join = {
        "type": "m.room.member",
        "state_key": ME,
        "sender": ME,
        "event_id": "$j",
        "content": {"membership": "join"},
        "unsigned": {"prev_content": {"membership": "invite"}},
    }
    rename = {
        **join,
        "event_id": "$j2",
        "content": {"membership": "join", "displayname": "x"},
        "unsigned": {"prev_content": {"membership": "join"}},
    }
    old, new, later = ({**text_event(t), "event_id": f"${t}"} for t in ("old", "new", "later"))
    found = room_events([old, join, new, rename, later], "!r", ME, [], is_dm=False, name_of=str)
    assert [e.event_id for e in found] == ["$new", "$later"]


def test_invites_reactions_and_approval_prompts() -> None:
    state = [
        {
            "type": "m.room.encryption",
            "state_key": "",
            "sender": "@a:x",
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        },
        {
            "type": "m.room.member",
            "state_key": ME,
            "sender": "@a:x",
            "content": {"membership": "invite", "is_direct": True},
        },
    ]
    invite = invite_of("!r", state, ME)
    assert invite is not None and invite.inviter == "@a:x" and invite.is_direct and invite.encrypted
    assert invite_of("!r", state[:1], ME) is None
    reaction = reaction_of(
        {
            "type": "m.reaction",
            "event_id": "$x",
            "sender": "@a:x",
            "content": {
                "m.relates_to": {
                    "rel_type": "m.annotation",
                    "event_id": "$p",
                    "key": "\N{THUMBS UP SIGN}\ufe0f",
                }
            },
        },
        "!r",
        ME,
    )
    assert reaction is not None and reaction.key == "\N{THUMBS UP SIGN}" and reaction.target == "$p"
    prompt = {"org.netclaw.approval": {"id": "ap_1", "choices": {"\N{THUMBS UP SIGN}\ufe0f": "approve"}}}
    assert approval_of(prompt) == ("ap_1", {"\N{THUMBS UP SIGN}": "approve"})
    assert approval_of({"body": "hello"}) is None
