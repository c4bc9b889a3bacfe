"""The static system prompt: a function of the settings alone.

It heads every request right after the tools, so it must be the same bytes on every call
of a session — no clock, no counters, nothing about the turn — or the provider's prompt
cache is lost for the whole conversation below it. What changes per turn (the time,
recalled memories, restart notices) goes into the volatile tail of the newest turn
instead (``netclaw.sessions`` records it there).

Sections come in a fixed order; a new one (an index of skills, sorted by name) is one
more entry in :func:`system_prompt`.
"""

from __future__ import annotations

from netclaw.config import Settings


def system_prompt(settings: Settings) -> str:
    sections = [
        settings.agent.system_prompt,
    ]
    return "\n\n".join(section for section in sections if section)
