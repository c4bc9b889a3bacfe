"""Skills in a session's static system prompt: the index of the skills its audience sees,
the same bytes on every call, picked up at a turn's start after a reload (never in the
middle of one), read from the loaded value — a session never touches the disk."""

from __future__ import annotations

from pathlib import Path

from netclaw.security.policy import Place
from netclaw.security.trust import system_prompt as trusted
from netclaw.sessions._core.commands import SendUserMessage
from netclaw.sessions._core.effects import CallModel
from netclaw.skills import LiveSkills, Skills, parse_skill
from tests.unit.sessions.harness import Driver, tool_call


def skills(*names: str) -> Skills:
    return Skills(
        tuple(
            parse_skill(
                f"---\nname: {n}\ndescription: How to {n}.\n---\nSteps for {n}.", Path("/nowhere") / n
            )
            for n in names
        )
    )


def system_of(d: Driver) -> str:
    first = d.pending(CallModel).request.messages[0]
    assert first.role == "system"
    return first.content


def test_the_index_is_in_every_call_byte_for_byte() -> None:
    live = LiveSkills(skills("zeta-run", "alpha-plan"))
    d = Driver(skills=live, agent={"system_prompt": "You are Ada."})
    d.send("one")
    first = system_of(d)
    assert first == trusted("You are Ada.") + (
        "\n\nSkills: procedures written down for you. When a request matches one, call load_skill "
        "with its name and follow what it says.\n- alpha-plan: How to alpha-plan.\n- zeta-run: How to zeta-run."
    )
    d.answer(calls=[tool_call("current_time", d.call_id())])
    d.tools_done()
    assert system_of(d) == first  # the tool round's call
    d.answer("done")
    d.send("two")
    assert system_of(d) == first


def test_a_reload_applies_at_the_next_turn_not_within_one() -> None:
    live = LiveSkills(skills("alpha-plan"))
    d = Driver(skills=live)
    d.send("one")
    assert "alpha-plan" in system_of(d)
    d.answer(calls=[tool_call("current_time", d.call_id())])
    live.swap(skills("alpha-plan", "beta-run"))  # SIGHUP while the turn runs
    d.tools_done()
    assert "beta-run" not in system_of(d)  # the prompt of a turn does not move under it
    d.answer("done")
    d.send("two")
    assert "- beta-run: How to beta-run." in system_of(d)
    live.swap(Skills())
    d.answer("done")
    d.send("three")
    assert "Skills:" not in system_of(d)


def test_the_audience_decides_what_the_index_holds() -> None:
    live = LiveSkills(skills("deploy-app", "team-lunch"))
    team = Driver("slack:C1:1.0", skills=live, audiences={"team": {"skills": ["team-*"]}})
    team.send("hi")
    assert "- team-lunch" in system_of(team) and "deploy-app" not in system_of(team)
    public = Driver("webhook:hook:1", skills=live)
    public.send("hi")
    assert "Skills:" not in system_of(public)  # the public audience sees none by default


def test_a_dm_whose_sender_no_allowlist_vetted_gets_the_public_index() -> None:
    live = LiveSkills(skills("deploy-app"))
    vetted = Driver("slack:D1:1.0", skills=live)
    vetted.send("hi")
    assert "deploy-app" in system_of(vetted)  # a team conversation's
    d = Driver("slack:D2:1.0", skills=live)
    ack = d.reply()
    d.handle(SendUserMessage("hi", d.now, ack, place=Place(scope="slack:D2", audience="public")))
    assert "Skills:" not in system_of(d)
