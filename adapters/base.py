"""The adapter contract: what every channel adapter provides to the daemon.

An adapter turns one platform's events into gateway messages and renders the
session's outputs back on that platform. It runs on the I/O loop. The daemon
starts adapters after the sessions and before the HTTP API, stops them in
reverse. A misconfigured adapter is reported and disabled; one that fails to start or
loses its connection for good is started again with backoff
(:mod:`adapters.supervisor`) — the daemon and the other adapters keep running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import AdapterError

if TYPE_CHECKING:
    from aiohttp import web

# running: serving. starting / reconnecting: connecting (the library retries by itself).
# retrying: failed to start or lost for good; the supervisor starts it again after a backoff.
# disabled: misconfigured (a token missing), until a restart. failed / stopped: down.
AdapterState = Literal[
    "starting", "running", "reconnecting", "retrying", "standby", "disabled", "failed", "stopped"
]


@dataclass(frozen=True, slots=True)
class AdapterStatus:
    state: AdapterState
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"state": self.state, "detail": self.detail} if self.detail else {"state": self.state}


class Adapter(Protocol):
    name: str

    def check(self) -> None:
        """Validate the environment (tokens present, library importable) without I/O.
        Raises AdapterError naming what is missing."""
        ...

    def routes(self) -> list[web.RouteDef]:
        """HTTP routes to add to the daemon's server (webhooks); most adapters have none."""
        ...

    async def probe(self) -> str:
        """Prove the credentials work (log in, nothing more), for ``netclaw doctor``; says
        as whom. Raises AdapterError naming what is wrong."""
        ...

    async def start(self) -> None:
        """Connect and begin serving. Raises AdapterError if it cannot."""
        ...

    async def stop(self) -> None: ...

    def status(self) -> AdapterStatus: ...


def required_secret(env: str, *, what: str, key: str, docs: str) -> str:
    """The secret in the variable ``env`` (a channel's token), or an AdapterError naming it,
    the config key that names it (``discord.token_env``) and where to put it."""
    secret = read_secret(env)
    if not secret:
        channel = key.partition(".")[0]
        raise AdapterError(
            f"{channel}: the {what} {env} is not set ({key}); {where_to_put(env)} (see {docs})"
        )
    return secret
