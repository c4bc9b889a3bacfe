"""``netclaw`` with discord.py pointed at a :class:`~tests.fakes.discord_port.FakeDiscordServer`
listening on 127.0.0.1:PORT — how a daemon subprocess talks to the fake (the in-process
tests use ``FakeDiscordServer.install``, which patches the same two places).

    python -m tests.e2e.netclaw_with_fake_discord PORT run --config netclaw.json
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import discord.gateway
    import discord.http
    import yarl

    from netclaw.cli import main as netclaw_main

    port, rest = int(argv[0]), argv[1:]
    discord.http.Route.BASE = f"http://127.0.0.1:{port}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://127.0.0.1:{port}/gateway")
    return netclaw_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
