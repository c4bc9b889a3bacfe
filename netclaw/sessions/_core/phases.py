"""Session phases — how the outside (subscribers, the manager, ``/status``) names what a
session is doing — and the only legal changes between them (pure).

Each activity (:mod:`netclaw.sessions._core.activity`) declares its phase once, as a class attribute; the session's
phase is its current activity's. The names are an API contract: ``recovering``, ``ready``,
``processing``, ``compacting``, ``passivating``.
"""

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


def check_transition(old: Phase, new: Phase) -> None:
    """Raise :class:`IllegalTransition` unless a session may go from ``old`` to ``new``."""
    if new not in LEGAL_TRANSITIONS[old]:
        raise IllegalTransition(f"illegal phase transition {old.value} -> {new.value}")
