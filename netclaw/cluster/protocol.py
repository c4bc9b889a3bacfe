"""The protocol nodes speak to each other, versioned so a cluster can be upgraded one
node at a time.

Every forwarded request carries the version it is written in (``X-Netclaw-Protocol``);
each node keeps the newest version it speaks in the node registry, and a sender writes
the newer of what both understand. The rule: a release may add a version, and it still
accepts the previous release's (``OLDEST``), so release N and N+1 run side by side; a
version is dropped one release after nothing writes it any more.

Version 1: a session API request proxied as it came (path, query, body, the headers in
:data:`REQUEST_HEADERS`), and other input as ``POST /api/cluster/messages`` with
``{"inbound", "wait", "turn_timeout"}``; a node that let the session go answers 503 with
``X-Netclaw-Moved`` (nothing was done: send it to the session's new node).
"""

from __future__ import annotations

CURRENT = 1  # the newest version this node writes and reads
OLDEST = 1  # the oldest version it still reads

VERSION = "X-Netclaw-Protocol"  # the version a forwarded request is written in
FORWARDED_BY = "X-Netclaw-Forwarded-By"  # the node that forwarded the request
MOVED = "X-Netclaw-Moved"  # on a 503: the session left this node, nothing was done here
SUBMIT_PATH = "/api/cluster/messages"  # input that did not come through the session API

# Passed on as they are; hop-by-hop and length headers are the client library's.
REQUEST_HEADERS = ("Authorization", "Content-Type", "Accept", "Idempotency-Key", "Last-Event-ID")
RESPONSE_HEADERS = ("Content-Type", "Cache-Control", "Retry-After", "Location", MOVED)


def to_speak(peer: int) -> int:
    """The version to write to a node that speaks up to ``peer``."""
    return max(OLDEST, min(CURRENT, peer))


def problem(version: str | None) -> str | None:
    """Why a forwarded request written in ``version`` cannot be read here, or None."""
    if version is None:
        return None  # a node of the first release, which wrote version 1 without saying so
    try:
        number = int(version)
    except ValueError:
        return f"{VERSION} must be a number, not {version[:20]!r}"
    if not OLDEST <= number <= CURRENT:
        return (
            f"this node reads forwarding protocol {OLDEST}..{CURRENT}, not {number}: "
            "the nodes are more than one release apart; upgrade them one release at a time"
        )
    return None
