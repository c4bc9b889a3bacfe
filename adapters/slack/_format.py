"""Slack's message text format: its three control characters."""

from __future__ import annotations


def slack_escape(text: str) -> str:
    """Model text as Slack must receive it: ``&``, ``<`` and ``>`` escaped (so the model
    cannot ping ``@channel`` or forge links)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
