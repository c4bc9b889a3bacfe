"""What a channel's test driver offers, so that the same conformance cases run on every channel.

A driver stands between the cases and one channel's fake platform: it plays the people
(they write, share files, press the approval control; the platform delivers an event
twice) and reads what the people see (the bot's messages as they are now, every edit with
its time, the files the bot posted). The cases never touch a fake directly; what a
platform cannot do is read from the channel's own :class:`~adapters.channel.Capabilities`
(its ``Channel`` declaration), and a case that needs it is skipped, saying why.

Writing a driver for a new channel is one module in ``tests/conformance/drivers/``
exporting ``DRIVER``: a class with a no-argument constructor implementing
:class:`ChannelDriver` (see ``drivers/slack.py`` for a chat platform and
``drivers/webhooks.py`` for a channel without threads, edits or buttons). The kit finds
it by itself (``drivers/__init__.py``); run ``python -m pytest tests/conformance -k
<name>`` to see which cases it passes.

Words used here:

- a **person** is ``"alice"``, ``"bob"`` or ``"carol"`` (:data:`PEOPLE`); the driver maps
  each to a platform user id and names them as roles do (:meth:`ChannelDriver.speaker`:
  ``slack:U1``). The kit's config gives bob a role without the tool ``current_time`` and
  carol a role whose ``current_time`` calls wait for an approval she may decide.
- a **conversation** is whatever the platform keeps a session in (a Slack thread, a
  Discord thread, a webhook session key), as an opaque string of the driver's making.
- a **handle** (:class:`Said`) is one message a person sent, as the platform knows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import httpx
import pytest

from adapters.channel import Capabilities

Person = Literal["alice", "bob", "carol"]
PEOPLE: tuple[Person, ...] = ("alice", "bob", "carol")
Decision = Literal["approve", "deny", "always"]


@dataclass(frozen=True, slots=True)
class Said:
    """One message a person sent. ``conversation`` is where it went (for a message that
    starts one, known once the platform made it: :meth:`ChannelDriver.conversation_of`);
    ``ref`` is the driver's own record of the platform event (to deliver it again)."""

    text: str
    person: Person
    conversation: str | None
    ref: Any = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Edit:
    """One change people saw to a bot message: its first text (``first``) or a new text,
    at ``at`` (``time.monotonic()`` of the test process, when the platform took it)."""

    message_id: str
    text: str
    at: float
    first: bool = False


@dataclass(frozen=True, slots=True)
class Prompt:
    """An approval request as the platform shows it (a message with buttons, a message
    to react or reply to; for ``approvals="api"`` the pending request itself)."""

    approval_id: str
    text: str
    ref: Any = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Daemon:
    """Where the daemon under test is: its HTTP base URL and a client carrying the control
    token (a webhook driver posts to the first; every driver may read sessions with the
    second). Set again after each restart."""

    base_url: str
    control: httpx.Client


class ChannelDriver(Protocol):
    """One channel's driver. Every method is called from the test thread and returns
    without waiting for the daemon (the cases wait for what they expect); ``start``
    comes first and ``stop`` last, ``attach`` before any person speaks."""

    name: ClassVar[str]  # the channel's name, as its Channel declares it ("slack")
    # Does the channel read "/stop", "/status"… as chat commands (the gateway's chat role)?
    chat_commands: ClassVar[bool]

    # -- the fake platform and how the daemon reaches it -----------------------------------------

    def start(self) -> None:
        """Start the fake platform on 127.0.0.1."""
        ...

    def stop(self) -> None:
        """Stop it (after the daemon stopped)."""
        ...

    def sections(self) -> dict[str, Any]:
        """netclaw.json sections that enable the channel against the fake (the channel's own
        section, and any other it needs), allowing every :data:`PEOPLE` to talk."""
        ...

    def env(self) -> dict[str, str]:
        """Environment variables the daemon needs (the secrets its sections name)."""
        ...

    def launcher(self) -> list[str]:
        """The argv prefix that runs ``netclaw`` against the fake in a subprocess (``run
        --config …`` is appended): ``[python, "-m", "netclaw.cli"]`` unless the platform
        library must first be pointed at the fake."""
        ...

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        """Prepare this process to run the daemon against the fake (what ``launcher`` does
        for a subprocess: point the platform library at it), undone with ``patch``."""
        ...

    def attach(self, daemon: Daemon) -> None:
        """The daemon (or, after a restart, its successor) is up."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the platform can do: the channel's own declaration (``adapters.channel``)."""
        ...

    def speaker(self, person: Person) -> str:
        """How roles name ``person`` on this channel (``slack:U1``, ``webhook:kit-bob``)."""
        ...

    # -- people ----------------------------------------------------------------------------------

    def say(
        self,
        text: str,
        conversation: str | None = None,
        *,
        person: Person = "alice",
        mention: bool = True,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Said:
        """``person`` writes ``text`` (with ``files``: name, MIME type, bytes) in
        ``conversation``, or where a new one starts (an allowed channel) when None;
        ``mention``: addressing the bot, where the platform has mentions."""
        ...

    def redeliver(self, said: Said) -> None:
        """The platform delivers the event of ``said`` again (Slack's retry after a slow
        ack, a gateway replaying events, a webhook sender retrying with the same key)."""
        ...

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        """The conversation ``said`` is in (waiting for the platform to make it, e.g. the
        thread a mention starts on Discord)."""
        ...

    def session_of(self, conversation: str) -> str:
        """The session id the channel keeps ``conversation`` in."""
        ...

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        """``person`` decides ``prompt`` with the platform's control (a button, a reaction,
        a reply; the control API where ``approvals == "api"``)."""
        ...

    # -- what people see ---------------------------------------------------------------------------

    def bot_messages(self, conversation: str) -> list[str]:
        """The texts of the bot's messages in ``conversation`` as shown now (after edits),
        oldest first; messages without text (a file alone) left out."""
        ...

    def everywhere(self) -> list[str]:
        """The texts of every bot message people can see on the platform now, in any
        conversation or channel (to check that nothing showed up somewhere else)."""
        ...

    def told(self, person: Person) -> list[str]:
        """What the platform showed ``person`` alone (Slack's ephemeral messages, Discord's
        ephemeral follow-ups to a button press), oldest first."""
        ...

    def edits(self, conversation: str) -> list[Edit]:
        """Every text the bot's messages in ``conversation`` showed, in order: each
        message's first text, then each edit ([] where the platform has no edits)."""
        ...

    def prompts(self, conversation: str) -> list[Prompt]:
        """The approval requests shown in ``conversation`` that still wait for a decision."""
        ...

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        """(name, bytes) of every file the bot posted in ``conversation``."""
        ...
