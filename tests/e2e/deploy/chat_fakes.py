"""Inside the systemd test container: Slack's and Discord's protocol-level fakes (the real
slack-bolt and discord.py talk to them), for checking the channels under the unit's
hardening. Writes where they listen to OUT.json, waits for OUT.go, then a person writes in
each channel; writes what the bot answered to OUT.result.json, and stops once OUT.done
exists (the daemon stopped first: a fake going away makes the clients log reconnects).

    python -m tests.e2e.deploy.chat_fakes /root/fakes
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.fakes.discord_port import FakeDiscordServer
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackThread

ECHO_SLACK = "echo: hello from slack"  # what the echo model answers the two messages below
ECHO_DISCORD = "echo: hello from discord"


def main(out: str) -> int:
    base = Path(out)
    with FakeSlackThread() as slack:
        discord = FakeDiscordServer(bot_id="999", channel_id="100").start()
        try:
            base.with_suffix(".json").write_text(
                json.dumps(
                    {
                        "slack_api_url": slack.api_url,
                        "discord_port": discord.port,
                        "discord_token": discord.token,
                    }
                )
            )
            deadline = time.monotonic() + 300
            while not base.with_suffix(".go").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            discord.wait_for(lambda: discord.connected == 1, 60, "the daemon's Discord connection")
            while slack.connections < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            ts, _ = slack.say("C1", f"<@{BOT_USER_ID}> hello from slack")
            discord.post_message("<@999> hello from discord", mentions_bot=True)
            discord.wait_for(lambda: bool(discord.threads), 30, "a Discord thread")
            thread = discord.threads[0]["id"]
            # A reply streams: its first words are posted at once and edited into the whole
            # answer as it comes (the echo model's). Wait for that, then say what is shown.
            end = time.monotonic() + 30
            while time.monotonic() < end and not (
                ECHO_DISCORD in discord.bot_messages(thread)
                and ECHO_SLACK in [m.get("text") for m in slack.bot_messages("C1", ts)]
            ):
                time.sleep(0.2)
            result = {
                "slack": [m.get("text") for m in slack.bot_messages("C1", ts)],
                "discord": discord.bot_messages(thread),
            }
        except Exception as exc:  # noqa: BLE001 - the test reads why
            result = {"error": f"{type(exc).__name__}: {exc}"}
        base.with_suffix(".result.json").write_text(json.dumps(result))
        try:
            deadline = time.monotonic() + 300
            while not base.with_suffix(".done").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            discord.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
