"""The Telegram driver in webhook mode: as :mod:`~tests.conformance.drivers.telegram`
(the same group, topics, people and controls), but Telegram POSTs each update to the
daemon's ``/telegram/webhook`` with the secret header, and posts it again until it is
answered 2xx — across a SIGKILL too, which the restart cases then rely on.

The public URL in the config is a stand-in on 127.0.0.1 that nothing answers; once the
daemon listens, the fake is told where that URL leads (:meth:`FakeTelegram.reach`, as a
proxy in front of the daemon would), and updates posted meanwhile are posted again there.
"""

from __future__ import annotations

from typing import Any

from tests.conformance.driver import Daemon
from tests.conformance.drivers.telegram import TelegramDriver

PUBLIC_URL = "http://127.0.0.1:1/telegram/webhook"  # nothing listens on port 1
SECRET = "kit-telegram-webhook-secret"


class TelegramWebhookDriver(TelegramDriver):
    def sections(self) -> dict[str, Any]:
        sections = super().sections()
        sections["telegram"] = {**sections["telegram"], "mode": "webhook", "webhook_url": PUBLIC_URL}
        return sections

    def env(self) -> dict[str, str]:
        return {**super().env(), "TELEGRAM_WEBHOOK_SECRET": SECRET}

    def attach(self, daemon: Daemon) -> None:
        url = f"{daemon.base_url}/telegram/webhook"
        self.fake.read(lambda s: s.reach(url))
        super().attach(daemon)


DRIVER = TelegramWebhookDriver
