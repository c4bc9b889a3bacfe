"""Approval buttons and their presses (pure): the interactive message attachment a prompt
carries, and the check of a press the server forwards.

Mattermost keeps a button's ``integration`` (the URL and a ``context`` we choose) on the
server and strips it from every post a client sees; a press makes the server POST the
context, with who pressed, to the URL. Anyone who can reach that URL could post the same
shape, so the context carries a signature: an HMAC over the channel, the approval and the
action, keyed by a key derived from the bot's token (every node of a cluster has it; a new
token makes older prompts' buttons refuse, and those are decided in the control room). A
press whose context is missing or does not verify is refused, and decides nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.chat import Button

CONTEXT_VERSION = "netclaw-1"
_STYLES = {"primary": "primary", "danger": "danger", "default": "default"}


def action_key(token: str) -> bytes:
    """The signing key of our buttons' contexts, derived from the bot token."""
    return hmac.new(token.encode(), b"netclaw mattermost actions", hashlib.sha256).digest()


def signature(key: bytes, channel_id: str, approval_id: str, action: str) -> str:
    return hmac.new(key, f"{channel_id}|{approval_id}|{action}".encode(), hashlib.sha256).hexdigest()


def attachment(key: bytes, url: str, channel_id: str, buttons: Sequence[Button]) -> dict[str, Any]:
    """The message attachment holding the buttons, each posting to ``url`` with a signed context."""
    actions = []
    for button in buttons:
        context = {
            "netclaw": CONTEXT_VERSION,
            "action": button.action_id,
            "value": button.value,
            "sig": signature(key, channel_id, button.value, button.action_id),
        }
        actions.append(
            {
                "id": button.action_id,  # the server wants ids of letters and digits
                "type": "button",
                "name": button.label,
                "style": _STYLES.get(button.style, "default"),
                "integration": {"url": url, "context": context},
            }
        )
    return {"actions": actions}


@dataclass(frozen=True, slots=True)
class Press:
    """A verified press: who, on which post, which action of which approval."""

    user_id: str
    user_name: str
    channel_id: str
    post_id: str
    action: str
    value: str


class BadPress(ValueError):
    """A forwarded press that is not one of our buttons (or was tampered with)."""


def verify(key: bytes, body: object) -> Press:
    """The press in ``body`` (the server's PostActionIntegrationRequest); BadPress naming
    what is wrong."""
    if not isinstance(body, dict):
        raise BadPress("the request body is not a JSON object")
    context = body.get("context")
    if not isinstance(context, dict) or context.get("netclaw") != CONTEXT_VERSION:
        raise BadPress("the press carries no netclaw context: not one of netclaw's buttons")
    fields = {name: body.get(name) for name in ("user_id", "channel_id", "post_id")}
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise BadPress(f"the press has no {name}")
    action, value, sig = context.get("action"), context.get("value"), context.get("sig")
    if not all(isinstance(v, str) and v for v in (action, value, sig)):
        raise BadPress("the press's context lacks its action, approval or signature")
    assert isinstance(action, str) and isinstance(value, str) and isinstance(sig, str)
    channel = str(fields["channel_id"])
    if not hmac.compare_digest(sig, signature(key, channel, value, action)):
        raise BadPress("the press's signature does not verify (forged, or signed with another token)")
    user_name = body.get("user_name")
    return Press(
        user_id=str(fields["user_id"]),
        user_name=user_name if isinstance(user_name, str) and user_name else str(fields["user_id"]),
        channel_id=channel,
        post_id=str(fields["post_id"]),
        action=action,
        value=value,
    )
