"""Session phases and the only legal transitions between them (pure)."""

from __future__ import annotations

from enum import StrEnum

from netclaw.errors import IllegalTransition


class Phase(StrEnum):
    RECOVERING = "recovering"
    READY = "ready"
    PROCESSING = "processing"
    COMPACTING = "compacting"
    PASSIVATING = "passivating"


LEGAL_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.RECOVERING: frozenset({Phase.READY}),
    Phase.READY: frozenset({Phase.PROCESSING, Phase.COMPACTING, Phase.PASSIVATING}),
    Phase.PROCESSING: frozenset({Phase.READY, Phase.COMPACTING}),
    Phase.COMPACTING: frozenset({Phase.READY, Phase.PROCESSING}),
    Phase.PASSIVATING: frozenset({Phase.READY}),  # a new message aborts passivation
}


class PhaseMachine:
    """Holds the current phase; ``transition_to`` is the one way to change it."""

    __slots__ = ("_phase",)

    def __init__(self, phase: Phase = Phase.RECOVERING) -> None:
        self._phase = phase

    @property
    def phase(self) -> Phase:
        return self._phase

    def can(self, new: Phase) -> bool:
        return new in LEGAL_TRANSITIONS[self._phase]

    def transition_to(self, new: Phase) -> Phase:
        """Move to ``new``; returns the phase left. Illegal moves raise and change nothing."""
        old = self._phase
        if new not in LEGAL_TRANSITIONS[old]:
            raise IllegalTransition(f"illegal phase transition {old.value} -> {new.value}")
        self._phase = new
        return old
