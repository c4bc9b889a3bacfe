"""Policy (netclaw/security/policy.py): the audience of a session id, what each audience may use
(defaults and ``audiences`` overrides), and why a chat-platform message gets no turn."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from netclaw.config import DEFAULT_AUDIENCES, ChannelAccess, Settings
from netclaw.security.policy import (
    ChatEvent,
    allowed_tools,
    audience_of,
    channel_of,
    denial_reason,
    recall_allowed,
)


@pytest.fixture(autouse=True)
def _no_netclaw_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read NETCLAW_* variables; none may leak into these cases."""
    for name in list(os.environ):
        if name.upper().startswith("NETCLAW_"):
            monkeypatch.delenv(name)


def route(audience: str | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"auth": {"type": "hmac", "secret_env": "HOOK_SECRET"}, **extra}
    if audience is not None:
        data["audience"] = audience
    return data


def settings(**sections: Any) -> Settings:
    return Settings(**sections)


@pytest.fixture
def with_routes() -> Settings:
    return settings(
        webhooks={
            "routes": {
                "alerts": route(),  # public by default
                "ops": route("personal"),
                "team-feed": route("team"),
                "open": route("public"),
            }
        }
    )


# -- audience_of ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "channel"),
    [
        ("cli:x", "cli"),
        ("slack:C1:123.4", "slack"),
        ("discord:999", "discord"),
        ("webhook:alerts:t", "webhook"),
        ("plain", "api"),
        ("", "api"),
    ],
)
def test_channel_of(session_id: str, channel: str) -> None:
    assert channel_of(session_id) == channel


@pytest.mark.parametrize(
    ("session_id", "audience"),
    [
        ("cli:x", "personal"),
        ("cli:", "personal"),
        ("slack:C123:1700000000.0001", "team"),
        ("slack:D1:2", "team"),
        ("discord:1234567890", "team"),
        ("webhook:alerts:t-1", "public"),  # configured, no audience given: public
        ("webhook:open:t", "public"),
        ("webhook:ops:t", "personal"),
        ("webhook:team-feed:9", "team"),
        ("webhook:ops", "personal"),  # no key: still the route's audience
        ("webhook:unknown:t", "public"),  # not a configured route: public
        ("webhook:", "public"),
        ("webhook:OPS:t", "public"),  # route names are exact
        ("my-session", "personal"),  # a bare id is an api session
        ("webhook", "personal"),  # no ':' at all: a bare id, not a webhook
        ("telegram:-1001:7", "team"),  # an installed chat channel (a forum topic)
        ("irc:5", "personal"),  # an unknown prefix is not a chat platform
    ],
)
def test_audience_of(with_routes: Settings, session_id: str, audience: str) -> None:
    assert audience_of(session_id, with_routes) == audience


def test_a_webhook_session_is_public_when_no_routes_are_configured() -> None:
    assert audience_of("webhook:ops:t", settings()) == "public"


def test_slack_and_discord_are_team_whatever_the_webhook_routes_say() -> None:
    # A route called "slack" does not make slack sessions follow its audience.
    s = settings(webhooks={"routes": {"slack": route("public"), "discord": route("public")}})
    assert audience_of("slack:C1:1", s) == "team"
    assert audience_of("discord:1", s) == "team"
    assert audience_of("webhook:slack:1", s) == "public"


def test_a_route_name_with_a_colon_cannot_borrow_another_routes_audience() -> None:
    try:
        s = settings(webhooks={"routes": {"ops": route("personal"), "ops:public": route("public")}})
    except ValidationError:
        return  # refusing such a route name is a fix too
    assert audience_of("webhook:ops:public:k1", s) == "public"


# -- allowed_tools and recall_allowed ------------------------------------------------------------


def test_default_audiences() -> None:
    s = settings()
    assert allowed_tools("personal", s) is None
    assert allowed_tools("team", s) is None
    assert allowed_tools("public", s) == ["current_time"]
    assert recall_allowed("personal", s) is True
    assert recall_allowed("team", s) is True
    assert recall_allowed("public", s) is False


def test_defaults_match_the_documented_table() -> None:
    assert DEFAULT_AUDIENCES["public"].tools == ["current_time"]
    assert DEFAULT_AUDIENCES["public"].memory_recall is False
    assert DEFAULT_AUDIENCES["personal"].tools is None and DEFAULT_AUDIENCES["personal"].memory_recall
    assert DEFAULT_AUDIENCES["team"].tools is None and DEFAULT_AUDIENCES["team"].memory_recall


def test_an_audiences_override_replaces_that_audiences_defaults_only() -> None:
    s = settings(
        audiences={
            "team": {"tools": ["current_time", "search_memory"], "memory_recall": False},
            "public": {"tools": ["current_time", "search_memory"]},
        }
    )
    assert allowed_tools("team", s) == ["current_time", "search_memory"]
    assert recall_allowed("team", s) is False
    assert allowed_tools("public", s) == ["current_time", "search_memory"]
    # Untouched audiences keep their defaults.
    assert allowed_tools("personal", s) is None
    assert recall_allowed("personal", s) is True


def test_an_override_of_personal_leaves_public_restricted() -> None:
    s = settings(audiences={"personal": {"tools": ["current_time"], "memory_recall": False}})
    assert allowed_tools("personal", s) == ["current_time"]
    assert recall_allowed("personal", s) is False
    assert allowed_tools("public", s) == ["current_time"]
    assert recall_allowed("public", s) is False
    assert allowed_tools("team", s) is None


def test_an_empty_tool_list_grants_no_tools() -> None:
    s = settings(audiences={"team": {"tools": []}})
    assert allowed_tools("team", s) == []


def test_public_never_recalls_memories_even_when_configured_to() -> None:
    s = settings(audiences={"public": {"memory_recall": True}})
    assert recall_allowed("public", s) is False


def test_the_audience_of_a_webhook_route_decides_its_tools(with_routes: Settings) -> None:
    assert allowed_tools(audience_of("webhook:alerts:1", with_routes), with_routes) == ["current_time"]
    assert allowed_tools(audience_of("webhook:ops:1", with_routes), with_routes) is None
    assert not recall_allowed(audience_of("webhook:alerts:1", with_routes), with_routes)
    assert recall_allowed(audience_of("webhook:ops:1", with_routes), with_routes)


# -- denial_reason ----------------------------------------------------------------------------------

ALLOWED = ChatEvent(platform="slack", channel_id="C1", user_id="U1", mentioned=True)


def access(**overrides: Any) -> ChannelAccess:
    return ChannelAccess(**{"channels": ["C1", "C2"], **overrides})


def denied(acc: ChannelAccess, event: ChatEvent, *words: str) -> None:
    reason = denial_reason(acc, event)
    assert isinstance(reason, str) and reason.strip(), (acc, event, reason)
    for word in words:
        assert word in reason, (word, reason)


def test_a_mention_in_an_allowed_channel_is_allowed() -> None:
    assert denial_reason(access(), ALLOWED) is None
    assert denial_reason(access(), replace(ALLOWED, channel_id="C2")) is None


def test_a_bot_message_is_never_a_turn() -> None:
    denied(access(), replace(ALLOWED, from_bot=True), "bot")
    denied(access(), replace(ALLOWED, from_bot=True, thread_known=True), "bot")
    denied(access(allow_dms=True), replace(ALLOWED, from_bot=True, is_dm=True, channel_id="D1"), "bot")
    denied(access(require_mention=False), replace(ALLOWED, from_bot=True), "bot")


def test_direct_messages_need_allow_dms() -> None:
    dm = ChatEvent(platform="slack", channel_id="D9", user_id="U1", is_dm=True)
    denied(access(), dm, "allow_dms")
    denied(access(allow_dms=False), replace(dm, mentioned=True), "allow_dms")
    # With allow_dms: no channel allowlist and no mention needed.
    assert denial_reason(access(allow_dms=True), dm) is None
    assert denial_reason(access(allow_dms=True, channels=[]), dm) is None


def test_a_direct_message_still_needs_an_allowed_user() -> None:
    dm = ChatEvent(platform="discord", channel_id="D9", user_id="U2", is_dm=True)
    denied(access(allow_dms=True, users=["U1"]), dm, "U2")
    assert denial_reason(access(allow_dms=True, users=["U1", "U2"]), dm) is None


def test_a_channel_not_in_the_allowlist_is_denied() -> None:
    denied(access(), replace(ALLOWED, channel_id="C3"), "C3")
    # ... even in a thread the bot already knows, and with require_mention off.
    denied(access(), replace(ALLOWED, channel_id="C3", thread_known=True), "C3")
    denied(access(require_mention=False), replace(ALLOWED, channel_id="C3"), "C3")


def test_an_empty_channel_list_lets_nobody_in() -> None:
    denied(ChannelAccess(), ALLOWED, "C1")
    denied(access(channels=[]), replace(ALLOWED, thread_known=True), "C1")


def test_the_users_allowlist() -> None:
    assert denial_reason(access(users=None), ALLOWED) is None  # None: anyone in the channel
    assert denial_reason(access(users=["U1"]), ALLOWED) is None
    denied(access(users=["U2"]), ALLOWED, "U1")
    denied(access(users=[]), ALLOWED, "U1")  # an empty allowlist means nobody
    denied(access(users=["U2"]), replace(ALLOWED, thread_known=True), "U1")


def test_a_new_thread_needs_a_mention_but_a_known_thread_does_not() -> None:
    new_thread = replace(ALLOWED, mentioned=False)
    denied(access(), new_thread, "mention")
    assert denial_reason(access(require_mention=True), new_thread) is not None
    assert denial_reason(access(), replace(new_thread, thread_known=True)) is None
    assert denial_reason(access(), replace(new_thread, mentioned=True)) is None


def test_require_mention_false_allows_a_new_thread_without_a_mention() -> None:
    assert denial_reason(access(require_mention=False), replace(ALLOWED, mentioned=False)) is None


def test_the_first_failing_rule_gives_the_reason() -> None:
    # A bot in a disallowed channel: the bot rule comes first.
    denied(access(users=[]), replace(ALLOWED, from_bot=True, channel_id="C9", mentioned=False), "bot")
    # A disallowed channel and user: the channel is named.
    denied(access(users=[]), replace(ALLOWED, channel_id="C9"), "C9")
    # An allowed channel, a disallowed user and no mention: the user is named.
    denied(access(users=["U2"]), replace(ALLOWED, mentioned=False), "U1")


# -- tool grants and approvals -----------------------------------------------------------------


def test_tool_grants_take_globs() -> None:
    from netclaw.security.policy import tool_matches

    assert tool_matches("issues__search", ["issues__*"])
    assert tool_matches("current_time", ["current_time"])
    assert not tool_matches("issues__search", ["docs__*", "current_time"])
    assert not tool_matches("Current_time", ["current_time"])  # names are case-sensitive


def test_shell_always_asks_unless_granted_by_name_and_not_in_approve() -> None:
    from netclaw.config import Settings
    from netclaw.security.policy import needs_approval

    default = Settings()
    assert needs_approval("shell", "personal", default)
    assert not needs_approval("write_file", "personal", default)
    explicit = Settings(audiences={"personal": {"tools": ["shell", "read_file"]}})
    assert not needs_approval("shell", "personal", explicit)
    still = Settings(audiences={"personal": {"tools": ["shell"], "approve": ["shell"]}})
    assert needs_approval("shell", "personal", still)
    globbed = Settings(audiences={"team": {"tools": ["*"], "approve": ["write_file", "issues__*"]}})
    assert needs_approval("shell", "team", globbed)  # a glob is not a grant by name
    assert needs_approval("issues__close", "team", globbed) and needs_approval("write_file", "team", globbed)
    assert not needs_approval("read_file", "team", globbed)


def test_tool_annotations_decide_approval_unless_the_audience_says_otherwise() -> None:
    from netclaw.config import Settings
    from netclaw.security.policy import ToolHints, needs_approval

    destructive, read_only = ToolHints(destructive=True), ToolHints(read_only=True)
    default = Settings()
    assert needs_approval("files__delete", "personal", default, destructive)  # asks by default
    assert not needs_approval("files__read", "personal", default, read_only)
    assert not needs_approval("files__write", "personal", default)  # says nothing: as before
    granted = Settings(audiences={"personal": {"tools": ["files__delete", "files__*"]}})
    assert not needs_approval("files__delete", "personal", granted, destructive)  # granted by name
    globbed = Settings(audiences={"team": {"tools": ["files__*"], "approve": ["files__*"]}})
    assert needs_approval("files__delete", "team", globbed, destructive)
    assert needs_approval("files__write", "team", globbed)
    assert not needs_approval("files__read", "team", globbed, read_only)  # a glob does not catch it
    named = Settings(audiences={"team": {"approve": ["files__read"]}})
    assert needs_approval("files__read", "team", named, read_only)  # an exact name always does
