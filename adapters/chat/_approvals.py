"""Approval prompts: a tool call waiting for a person's decision shows as a message with
buttons (approve, deny, always); once decided, the message is edited to say so and the
buttons go. A press comes back as a :class:`~adapters.chat.ButtonClick` and decides
through the gateway, which checks who may; a refusal is told to the person who pressed
only (:func:`decide`).

A pending request is shown once per conversation, whatever replays it: a session replays
its pending requests to every new subscriber (a second subscription, a restart), so a
prompt is posted with a key made from its approval id and, before posting, looked for by
that key (where the platform can tell; elsewhere the key makes a repeat the same message).
The prompt found is the one the decision edits: no second set of buttons is left behind.
Where the platform cannot tell (Telegram: no nonce, no history), a prompt a crash left
unrecorded is posted again; the copy people press is then edited with the decision too
(:meth:`ApprovalPrompts.pressed`, and :func:`decide` for a press no conversation here
shows), so no copy keeps live buttons.
"""

from __future__ import annotations

import hashlib
import logging
from functools import partial
from typing import Protocol

from adapters.chat._calls import PlatformCalls
from adapters.chat._port import Button, ButtonClick, Conversation
from netclaw import outputs as out
from netclaw.errors import ApprovalError, ApprovalNotFound, InvalidInput, NetclawError

log = logging.getLogger(__name__)

MAX_APPROVAL_ARGUMENTS = 1500
PROMPT_LOOKBACK_S = 86_400.0  # a prompt is looked for from this long before its request expires


def prompt_key(approval_id: str) -> str:
    """The idempotency key of an approval request's prompt (the same in every process)."""
    return hashlib.sha256(f"approval|{approval_id}".encode()).hexdigest()[:20]


class ApprovalPrompts:
    """The approval requests one conversation shows with buttons."""

    def __init__(self, calls: PlatformCalls, to: Conversation) -> None:
        self._calls = calls
        self._to = to
        self._shown: dict[str, tuple[str, str]] = {}  # approval id -> (its message, the tool)
        self._copies: dict[str, set[str]] = {}  # approval id -> other messages pressed for it

    def __contains__(self, approval_id: object) -> bool:
        return approval_id in self._shown

    async def ask(self, request: out.ApprovalRequested) -> None:
        if request.approval_id in self._shown:
            return  # replayed to a new subscription: shown already
        port = self._calls.port
        key = prompt_key(request.approval_id)
        found = await self._calls.retried(
            "look for an approval prompt",
            partial(port.find_posted, self._to, key, request.expires_at - PROMPT_LOOKBACK_S),
        )
        if found is not None:  # posted before a restart: that message is the prompt
            self._shown[request.approval_id] = (found, request.tool)
            return
        arguments = request.arguments[:MAX_APPROVAL_ARGUMENTS]
        text = port.escape(f"May I run {request.tool}?\n{arguments}")
        buttons = [
            Button("approve", "Approve", request.approval_id, "primary"),
            Button("deny", "Deny", request.approval_id, "danger"),
            Button("always", "Always", request.approval_id),
        ]
        message_id = await self._calls.retried(
            "ask for approval", partial(port.post_buttons, self._to, text, buttons, key=key)
        )
        self._shown[request.approval_id] = (message_id, request.tool)

    def pressed(self, approval_id: str, message_id: str) -> None:
        """A press on ``message_id`` for a request shown here: when it is not the prompt
        recorded (a copy a crash left unrecorded), the decision is shown on it too."""
        shown = self._shown.get(approval_id)
        if shown is not None and shown[0] != message_id:
            self._copies.setdefault(approval_id, set()).add(message_id)

    async def show_decision(self, decided: out.ApprovalDecided) -> None:
        shown = self._shown.pop(decided.approval_id, None)
        copies = self._copies.pop(decided.approval_id, set())
        if shown is not None:
            message_id, tool = shown
            port = self._calls.port
            text = port.escape(f"{tool}: {decided.decision} by {decided.by}")
            for target in (message_id, *sorted(copies)):
                await self._calls.retried("show a decision", partial(port.edit, self._to, target, text))


class Deciding(Protocol):
    """What deciding a press needs of the gateway."""

    async def find_approval(self, approval_id: str) -> str | None: ...

    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str: ...


async def decide(gateway: Deciding, calls: PlatformCalls, click: ButtonClick, session_id: str | None) -> None:
    """Decide the approval a press belongs to (``session_id``: the session that asked, when
    this renderer showed it; else looked up among the pending, as after a restart — and
    then the pressed message itself is edited to show the decision, since no prompt here
    will be)."""
    platform = calls.platform
    shown_here = session_id is not None
    try:
        if session_id is None:
            session_id = await gateway.find_approval(click.value)
        if session_id is None:
            raise ApprovalNotFound("this request is no longer pending (decided, expired or cancelled)")
        await gateway.decide_in_chat(
            platform,
            session_id,
            click.value,
            click.action_id,
            user_id=click.user_id,
            user_name=click.user_name or click.user_id,
        )
        if not shown_here and click.message is not None:
            port, message = calls.port, click.message
            text = port.escape(f"{click.action_id} by {click.user_name or click.user_id}")
            await calls.quietly(
                "show a decision", port.edit(Conversation(message.channel), message.message_id, text)
            )
    except (ApprovalError, InvalidInput) as exc:
        log.info("%s: %s's %r on %s refused: %s", platform, click.user_id, click.action_id, click.value, exc)
        if click.respond is not None:
            await calls.quietly("answer a button press", click.respond(str(exc)))
    except NetclawError as exc:
        log.warning("%s: deciding %s failed: %s", platform, click.value, exc)
        if click.respond is not None:
            await calls.quietly("answer a button press", click.respond(f"could not decide: {exc}"))
