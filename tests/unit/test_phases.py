"""The phases' transitions: the legal ones pass, everything else raises, naming both."""

from __future__ import annotations

import itertools

import pytest

from netclaw.errors import IllegalTransition, SessionError
from netclaw.sessions._core.activities.compacting import Compacting
from netclaw.sessions._core.activities.idle import Idle
from netclaw.sessions._core.activities.passivating import Passivating
from netclaw.sessions._core.activities.turning import Turn
from netclaw.sessions._core.phases import LEGAL_TRANSITIONS, Phase, check_transition
from netclaw.sessions._core.session import Recovering
from tests.doc_blocks import table_after

# The transitions docs/architecture.md ("Phases") gives, read from its table: the code's
# table is checked against the page, not against a copy of it.
SPEC_LEGAL = {
    (Phase(source.strip("`")), Phase(target.strip().strip("`")))
    for source, targets in table_after("docs/architecture.md", "phases table")
    for target in targets.split(",")
}

LEGAL = sorted((a, b) for a, targets in LEGAL_TRANSITIONS.items() for b in targets)
ALL_PAIRS = list(itertools.product(Phase, Phase))
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in set(LEGAL)]


def test_table_matches_the_spec() -> None:
    assert set(LEGAL) == SPEC_LEGAL
    assert set(LEGAL_TRANSITIONS) == set(Phase)


def test_pair_counts() -> None:
    assert len(ALL_PAIRS) == 25
    assert len(LEGAL) == 9
    assert len(ILLEGAL) == 16


@pytest.mark.parametrize(("old", "new"), LEGAL, ids=[f"{a}->{b}" for a, b in LEGAL])
def test_legal_transition_passes(old: Phase, new: Phase) -> None:
    check_transition(old, new)


@pytest.mark.parametrize(("old", "new"), ILLEGAL, ids=[f"{a}->{b}" for a, b in ILLEGAL])
def test_illegal_transition_raises(old: Phase, new: Phase) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(old, new)
    message = str(info.value)
    assert old.value in message
    assert new.value in message
    # the old phase is named before the new one ("from -> to")
    assert message.index(old.value) <= message.rindex(new.value)
    assert isinstance(info.value, SessionError)
    assert info.value.code == "illegal_transition"


def test_self_transitions_are_illegal() -> None:
    for phase in Phase:
        with pytest.raises(IllegalTransition):
            check_transition(phase, phase)


def test_a_full_lifecycle_walk() -> None:
    path = [
        Phase.RECOVERING,
        Phase.READY,
        Phase.PROCESSING,
        Phase.COMPACTING,
        Phase.PROCESSING,
        Phase.READY,
        Phase.PASSIVATING,
        Phase.READY,
        Phase.COMPACTING,
        Phase.READY,
        Phase.PASSIVATING,
    ]
    for old, new in itertools.pairwise(path):
        check_transition(old, new)
    # passivation cannot go on to processing directly: a message must bring it back to ready
    with pytest.raises(IllegalTransition):
        check_transition(Phase.PASSIVATING, Phase.PROCESSING)


def test_each_phase_is_the_name_of_one_activity() -> None:
    """The activities declare their phase, once each: one name per state."""
    activities = (Recovering, Idle, Turn, Compacting, Passivating)
    assert sorted(a.phase for a in activities) == sorted(Phase)
