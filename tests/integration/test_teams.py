"""The Teams channel beyond the conformance kit, through the real Agents SDK against
:class:`~tests.fakes.teams_api.FakeTeams`, the daemon in this process:

- the messaging endpoint refuses (401) an activity whose token is missing, malformed,
  unsigned, signed by another key, for another bot, expired, or vouching for another
  service URL — and nothing starts: no session, no model call, no stored reference;
- a reminder reaches its conversation proactively after a restart (the conversation
  reference was kept), and a personal chat is one session without mentions;
- the bot's token: a refused password stops the channel with a message naming the setting.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from adapters.teams import TeamsAdapter, TeamsApiError
from adapters.teams._port import conversation_key
from netclaw.config import settings_model
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput
from tests.conformance.drivers.teams import CHANNEL, TeamsDriver
from tests.conformance.model import KitModel, marker
from tests.conformance.rig import InProcess, wait_for
from tests.conftest import settings_data
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.teams_api import APP_ID, APP_PASSWORD, FakeTeams

PERSONAL = "a:1personal-chat-of-alice"
GROUP = "19:group-chat-of-three@thread.v2"
HOOK_TOKEN = "kit-hook-token"
ALICE = {"name": "alice", "aad": "aad-alice"}


class PersonalDriver(TeamsDriver):
    """The kit's driver, with personal chats and a group chat allowed, and a webhook route
    delivering to the channel."""

    def sections(self) -> dict[str, Any]:
        sections = super().sections()
        sections["teams"] = {**sections["teams"], "allow_dms": True, "channels": [CHANNEL, GROUP]}
        route = {
            "auth": {"type": "bearer", "secret_env": "KIT_HOOK_TOKEN"},
            "text": "$.text",
            "deliver": {"channel": "teams", "to": CHANNEL},
        }
        sections["webhooks"] = {"routes": {"alerts": route}}
        return sections

    def env(self) -> dict[str, str]:
        return {**super().env(), "KIT_HOOK_TOKEN": HOOK_TOKEN}


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PersonalDriver, KitModel, ScriptedOpenAIThread]]:
    driver, model = PersonalDriver(), KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        try:
            yield driver, model, provider
        finally:
            driver.stop()


@pytest.fixture(scope="module")
def rig(
    world: tuple[PersonalDriver, KitModel, ScriptedOpenAIThread], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcess]:
    driver, model, provider = world
    with InProcess(driver, model).running(tmp_path_factory.mktemp("teams"), provider) as running:
        yield running


def personal(driver: TeamsDriver, text: str, *, chat: str = PERSONAL) -> dict[str, Any]:
    """A message of alice's in a personal chat, not yet delivered."""
    return driver.fake.read(lambda s: s.message(chat, "personal", ALICE, text))


def post(rig: InProcess, activity: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    assert rig.daemon is not None
    return httpx.post(f"{rig.daemon.base_url}/teams/messages", json=activity, headers=headers, timeout=10)


def unsigned(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def bad_tokens(fake: FakeTeams) -> dict[str, str | None]:
    """Authorization headers an attacker (or a broken proxy) might send; None: none at all."""
    good_claims = json.loads(base64.urlsafe_b64decode(fake.token_for().split(".")[1] + "=="))
    other_service = FakeTeams()
    other_service.port = 1  # the token vouches for http://127.0.0.1:1/, the activity names the fake
    return {
        "missing": None,
        "not bearer": f"Basic {base64.b64encode(b'bot:pw').decode()}",
        "empty bearer": "Bearer",
        "garbage": "Bearer not-a-jwt",
        "unsigned": f"Bearer {unsigned(good_claims)}",
        "another key": f"Bearer {fake.token_for(key=fake.stranger_key())}",
        "another bot": f"Bearer {fake.token_for(audience='00000000-0000-4000-8000-000000000bad')}",
        "expired": f"Bearer {fake.token_for(expires_in=-3600)}",
        "another service": f"Bearer {other_service.token_for(key=None)}",
    }


def test_an_activity_without_a_valid_token_is_refused_and_starts_nothing(rig: InProcess) -> None:
    driver = rig.driver
    assert isinstance(driver, TeamsDriver)
    fake = driver.fake.server
    # A chat no valid activity ever came from: its reference must not be stored either.
    stranger = "a:1never-authenticated"
    session = f"teams:{conversation_key(stranger)}"
    for what, authorization in bad_tokens(fake).items():
        mark = marker()
        activity = personal(driver, f"let me in {mark}", chat=stranger)
        headers = {"Authorization": authorization} if authorization is not None else {}
        answer = post(rig, activity, headers)
        assert answer.status_code == 401, (what, answer.status_code, answer.text)
        assert answer.json()["error"] == "unauthorized", what
        assert rig.model.requests(mark) == [], what
    listed = {s["id"] for s in rig.control.get("/api/sessions").json()}
    assert session not in listed
    assert driver.bot_messages(stranger) == []
    assert rig.transcript(session) == []

    # The same activity with the Bot Framework's signature is taken: the refusals were the token's.
    mark = marker()
    activity = personal(driver, f"now with a token {mark}", chat=stranger)
    answer = post(rig, activity, {"Authorization": f"Bearer {fake.token_for()}"})
    assert answer.status_code == 200, answer.text
    rig.replied(stranger, f"echo: now with a token {mark}")


def test_a_personal_chat_is_one_session_without_mentions(rig: InProcess) -> None:
    driver = rig.driver
    assert isinstance(driver, TeamsDriver)
    one, two = marker(), marker()
    for text in (f"hello {one}", f"again {two}"):
        driver.fake.run(driver.fake.server.deliver(personal(driver, text)))
        rig.replied(PERSONAL, f"echo: {text}")
    session = f"teams:{conversation_key(PERSONAL)}"
    assert rig.user_texts(session)[-2:] == [f"hello {one}", f"again {two}"]
    # The channel's health, as every channel's: /healthz and /metrics.
    assert rig.control.get("/healthz").json()["adapters"]["teams"]["state"] == "running"
    assert 'netclaw_adapter_up{adapter="teams"} 1.0' in rig.control.get("/metrics").text


def test_a_group_chat_is_one_session_answering_mentions(rig: InProcess) -> None:
    driver = rig.driver
    assert isinstance(driver, TeamsDriver)
    aside, asked = marker(), marker()

    def say(text: str, *, mention: bool) -> None:
        activity = driver.fake.read(lambda s: s.message(GROUP, "groupChat", ALICE, text, mention=mention))
        assert driver.fake.run(driver.fake.server.deliver(activity)) == 200

    say(f"lunch at noon? {aside}", mention=False)  # people talking among themselves
    say(f"what is on today {asked}", mention=True)
    rig.replied(GROUP, f"echo: what is on today {asked}")
    assert rig.model.requests(aside) == []
    assert rig.user_texts(f"teams:{conversation_key(GROUP)}") == [f"what is on today {asked}"]
    # Once the chat is a session, what people say among themselves goes with the next turn.
    meanwhile, then = marker(), marker()
    say(f"I will bring the slides {meanwhile}", mention=False)
    say(f"anything else {then}", mention=True)
    [reply] = wait_for(
        lambda: [t for t in driver.bot_messages(GROUP) if f"anything else {then}" in t], "the next reply"
    )
    assert "before you were addressed" in reply and f"[Alice] I will bring the slides {meanwhile}" in reply


def test_a_delivery_to_a_channel_opens_a_reply_chain_once_that_people_continue(rig: InProcess) -> None:
    driver = rig.driver
    assert isinstance(driver, TeamsDriver) and rig.daemon is not None
    rig.start_conversation(f"hello {marker()}")  # the bot has heard from the channel: it knows where it is
    mark = marker()
    url = f"{rig.daemon.base_url}/webhooks/alerts"
    headers = {"Authorization": f"Bearer {HOOK_TOKEN}", "Idempotency-Key": f"alert-{mark}"}
    first = httpx.post(f"{url}?wait=1", json={"text": f"disk 91% {mark}"}, headers=headers, timeout=20)
    assert first.status_code == 200, first.text
    again = httpx.post(url, json={"text": f"disk 91% {mark}"}, headers=headers, timeout=20)
    assert again.status_code in (200, 202) and again.json()["session_id"] == first.json()["session_id"]

    posts = driver.fake.read(lambda s: [m for m in s.bot_messages() if f"disk 91% {mark}" in m.text])
    [anchor] = [
        m for m in posts if m.conversation == f"{CHANNEL};messageid={m.id}"
    ]  # a new post, its own chain
    assert anchor.text.startswith("🔔 alerts:"), anchor.text
    chain = anchor.conversation
    assert first.json()["session_id"] == driver.session_of(chain)
    wait_for(lambda: len(driver.bot_messages(chain)) >= 2, "the reply in the alert's chain")
    then = marker()
    driver.say(f"is it still high {then}", chain, person="bob", mention=False)
    rig.replied(chain, f"echo: is it still high {then}")


def test_a_reminder_reaches_the_conversation_after_a_restart(
    world: tuple[PersonalDriver, KitModel, ScriptedOpenAIThread], tmp_path_factory: pytest.TempPathFactory
) -> None:
    driver, model, provider = world
    chat = "a:1personal-chat-for-reminders"
    root: Path = tmp_path_factory.mktemp("teams-restart")
    first = marker()
    with InProcess(driver, model).running(root, provider) as rig:
        driver.fake.run(driver.fake.server.deliver(personal(driver, f"hello {first}", chat=chat)))
        rig.replied(chat, f"echo: hello {first}")

    # A new daemon on the same data: nobody has said anything since, so only the stored
    # reference says where the chat is.
    with InProcess(driver, model).running(root, provider) as rig:
        session = f"teams:{conversation_key(chat)}"
        mark = marker()
        answer = rig.control.post(
            f"/api/sessions/{session}/reminders", json={"text": f"stand up {mark}", "in_s": 0.2}
        )
        assert answer.status_code == 201, answer.text
        shown = wait_for(
            lambda: [t for t in driver.bot_messages(chat) if f"stand up {mark}" in t],
            "the reminder's reply in the chat",
        )
        assert len(shown) == 1 and shown[0].startswith("echo:"), shown
        assert len(driver.bot_messages(chat)) == 2  # the first answer and the reminder's, nothing else


def test_a_refused_app_password_stops_the_channel_naming_the_setting(
    world: tuple[PersonalDriver, KitModel, ScriptedOpenAIThread],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver, model, provider = world

    class WrongPassword(PersonalDriver):
        def env(self) -> dict[str, str]:
            return {"TEAMS_APP_PASSWORD": "not-the-password"}

    wrong = WrongPassword()
    wrong.fake = driver.fake  # the same Bot Framework
    monkeypatch.setattr(WrongPassword, "attach", lambda self, daemon: None)
    with InProcess(wrong, model).running(tmp_path_factory.mktemp("teams-wrong"), provider) as rig:

        def failed() -> dict[str, Any]:
            state: dict[str, Any] = rig.control.get("/healthz").json().get("adapters", {}).get("teams", {})
            return state if state.get("state") in ("failed", "retrying") else {}

        state = wait_for(failed, "the teams channel refused")
        assert APP_ID in state["detail"] and "TEAMS_APP_PASSWORD" in state["detail"], state


def test_the_doctor_probe_gets_a_token_and_names_what_is_wrong(
    world: tuple[PersonalDriver, KitModel, ScriptedOpenAIThread],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = world[0]
    settings = settings_model()(**settings_data(tmp_path / "data", "http://127.0.0.1:1", **driver.sections()))
    adapter = TeamsAdapter(settings, cast("ChatInput", SimpleNamespace(settings=settings)))
    token_url = driver.fake.server.token_url
    monkeypatch.setenv("TEAMS_APP_PASSWORD", APP_PASSWORD)
    assert asyncio.run(adapter.probe()) == f"app {APP_ID} got a Bot Framework token from {token_url}"
    monkeypatch.setenv("TEAMS_APP_PASSWORD", "not-the-password")
    with pytest.raises(TeamsApiError, match=r"refused app .*Invalid client secret.* in TEAMS_APP_PASSWORD"):
        asyncio.run(adapter.probe())
    monkeypatch.delenv("TEAMS_APP_PASSWORD")
    with pytest.raises(AdapterError, match=r"TEAMS_APP_PASSWORD is not set \(teams.app_password_env\)"):
        asyncio.run(adapter.probe())
    monkeypatch.setenv("TEAMS_APP_PASSWORD", APP_PASSWORD)
    adapter.token_url = "http://127.0.0.1:1/tenant/oauth2/v2.0/token"  # nothing listens there
    with pytest.raises(TeamsApiError, match=re.escape("cannot reach the token endpoint http://127.0.0.1:1/")):
        asyncio.run(adapter.probe())


def test_calls_waiting_for_a_token_share_one_request(
    world: tuple[PersonalDriver, KitModel, ScriptedOpenAIThread],
) -> None:
    from adapters.teams._client import BotToken

    fake = world[0].fake
    before = fake.read(lambda s: len(s.token_requests))

    async def many() -> set[str]:
        token = BotToken(APP_ID, APP_PASSWORD, fake.server.token_url, "TEAMS_APP_PASSWORD")
        try:
            return set(await asyncio.gather(*(token.get() for _ in range(5))))
        finally:
            await token.close()

    assert len(asyncio.run(many())) == 1
    assert fake.read(lambda s: len(s.token_requests)) == before + 1
