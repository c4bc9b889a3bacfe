"""The ``telegram`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`: ``channels`` are the group chat ids the bot answers
in), whether the adapter runs, how updates arrive (long polling or a webhook), and where
its token and webhook secret are. Registered with the other channel sections by the
``adapters`` package."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from netclaw.config import ChatSection, check_env_name


class TelegramConfig(ChatSection):
    key: ClassVar[str] = "telegram"
    restart_keys: ClassVar[tuple[str, ...]] = (
        "enabled",
        "token_env",
        "mode",
        "webhook_url",
        "webhook_secret_env",
        "api_url",
        "poll_timeout_s",
    )

    token_env: str = "TELEGRAM_BOT_TOKEN"  # from @BotFather: 123456:ABC-…
    # polling: the daemon asks Telegram for updates (getUpdates), nothing to expose.
    # webhook: Telegram POSTs them to webhook_url, which reaches the daemon's /telegram/webhook.
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # the public https URL Telegram posts to (mode webhook)
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"  # checked on every webhook request
    api_url: str | None = None  # the Bot API's base, e.g. a local test double; None: Telegram's
    poll_timeout_s: int = Field(30, ge=1, le=50)  # how long one getUpdates long poll waits

    _env = field_validator("token_env", "webhook_secret_env")(check_env_name)

    @field_validator("webhook_url", "api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramConfig:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError(
                "mode 'webhook' needs webhook_url: the public https URL that reaches this "
                "daemon's /telegram/webhook (or use mode 'polling')"
            )
        return self
