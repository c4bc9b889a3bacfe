"""The ``email`` section of netclaw.json: the bot's address, its IMAP mailbox (where people's
mail arrives) and its SMTP server (where replies leave), where the passwords are, who may
write (the chat policy's :class:`~netclaw.config.ChannelAccess`: ``users`` are addresses;
every mail is a direct message, so ``allow_dms`` is on by default and ``channels`` is not
used), and the loop guard's bound. Registered with the other channel sections by the
``adapters`` package."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from netclaw.config import ChatSection, check_env_name


def normal_address(value: str) -> str:
    """An address as netclaw compares them: trimmed, lowercase (``Alice@Example.org``)."""
    return value.strip().lower()


class EmailConfig(ChatSection):
    key: ClassVar[str] = "email"
    restart_keys: ClassVar[tuple[str, ...]] = (
        "enabled",
        "address",
        "imap_host",
        "imap_port",
        "imap_tls",
        "imap_user",
        "imap_password_env",
        "folder",
        "smtp_host",
        "smtp_port",
        "smtp_tls",
        "smtp_user",
        "smtp_password_env",
    )

    allow_dms: bool = True  # a mail to the bot is a direct message: on, or nobody could write
    address: str = ""  # the bot's own address: replies come from it, mail from it is never answered
    name: str = "netclaw"  # the display name on replies
    imap_host: str = ""
    imap_port: int = Field(993, ge=1, le=65535)
    imap_tls: Literal["tls", "none"] = "tls"  # none: plain IMAP, for a server on this host only
    imap_user: str = ""  # empty: the address
    imap_password_env: str = "EMAIL_IMAP_PASSWORD"
    folder: str = "INBOX"  # the mailbox the bot reads (its mail marked \Seen once taken)
    idle: bool = True  # IMAP IDLE: mail is read as it arrives; else (or without IDLE) polled
    poll_interval_s: float = Field(60.0, gt=0, le=3600)  # polling, and how long one IDLE waits
    smtp_host: str = ""
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_tls: Literal["starttls", "tls", "none"] = "starttls"
    smtp_user: str = ""  # empty: the IMAP user
    smtp_password_env: str = "EMAIL_SMTP_PASSWORD"  # unset: the IMAP password; "" : no SMTP login
    timeout_s: float = Field(30.0, gt=0, le=300)  # one IMAP or SMTP exchange
    # The loop guard: at most this many mails from one correspondent start a turn in an hour
    # (another robot answering every reply is stopped here, whatever its headers say).
    turns_per_hour: int = Field(20, ge=1, le=10_000)
    # Who vouches for a sender: the authserv-id of the receiving mail server (its
    # Authentication-Results header, e.g. "mx.example.org"); set, a mail starts a turn only
    # when that server says dmarc=pass. None: From is trusted as delivered (docs say when).
    authserv_id: str | None = None
    # Where people reach the control room (https://netclaw.example.org/ui): approval mails
    # link to its approvals page beside the reply code. None: the code alone.
    control_room_url: str | None = None

    _env = field_validator("imap_password_env")(check_env_name)

    @field_validator("smtp_password_env")
    @classmethod
    def _smtp_env(cls, value: str) -> str:
        checked = check_env_name(value) if value else value
        return checked or ""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        value = normal_address(value)
        if value and (value.count("@") != 1 or value.startswith("@") or value.endswith("@") or " " in value):
            raise ValueError(f"{value!r} is not an email address (name@example.org)")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value) or len(value) > 100:
            raise ValueError("the display name must be one line of at most 100 characters")
        return value.strip()

    @field_validator("folder")
    @classmethod
    def _folder(cls, value: str) -> str:
        if not value or not all(32 <= ord(c) < 127 for c in value):
            raise ValueError(
                f"folder {value!r}: give the folder's name in printable ASCII (INBOX, Bots/netclaw)"
            )
        return value

    @field_validator("users")
    @classmethod
    def _users(cls, value: list[str] | None) -> list[str] | None:
        return [normal_address(u) for u in value] if value is not None else None

    @field_validator("control_room_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _enabled_needs_servers(self) -> EmailConfig:
        if self.enabled:
            missing = [k for k in ("address", "imap_host", "smtp_host") if not getattr(self, k)]
            if missing:
                raise ValueError(
                    f"email is enabled but {', '.join(missing)} not set (see docs/channels/email.md)"
                )
        return self

    @property
    def login(self) -> str:
        return self.imap_user or self.address

    @property
    def smtp_login(self) -> str:
        return self.smtp_user or self.login
