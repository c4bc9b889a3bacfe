"""Sending the bot's mail over SMTP (``aiosmtplib``; nothing else imports it): one
connection per mail (replies are few; no connection to keep alive or lose), STARTTLS or
implicit TLS as configured, a login when a password is given. Failures are
:class:`~adapters.email._port.MailError`: a 4xx answer or a lost connection may be
retried, a 5xx refusal may not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage

import aiosmtplib

from adapters.email._port import MailError


@dataclass(frozen=True, slots=True)
class SmtpServer:
    host: str
    port: int
    tls: str  # "starttls", "tls" or "none"
    user: str
    password: str  # "": no login
    timeout_s: float

    @property
    def where(self) -> str:
        return f"SMTP {self.host}:{self.port}"

    def _options(self) -> dict[str, object]:
        login = {"username": self.user, "password": self.password} if self.password else {}
        return {
            "hostname": self.host,
            "port": self.port,
            "use_tls": self.tls == "tls",
            "start_tls": self.tls == "starttls",
            "timeout": self.timeout_s,
            **login,
        }

    async def send(self, mail: EmailMessage, sender: str, recipients: Sequence[str]) -> None:
        try:
            await aiosmtplib.send(mail, sender=sender, recipients=list(recipients), **self._options())  # type: ignore[arg-type]
        except aiosmtplib.SMTPResponseException as exc:
            raise MailError(
                f"{self.where} refused the mail: {exc.code} {exc.message}", transient=400 <= exc.code < 500
            ) from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise MailError(f"{self.where}: {exc or type(exc).__name__}", transient=True) from exc

    async def probe(self) -> str:
        """Connect, greet and log in (as sending would), then leave: what answered."""
        options = self._options()
        client = aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            use_tls=self.tls == "tls",
            start_tls=self.tls == "starttls",
            timeout=self.timeout_s,
        )
        try:
            await client.connect()
            await client.ehlo()
            if "username" in options:
                await client.login(self.user, self.password)
            await client.quit()
        except aiosmtplib.SMTPAuthenticationError as exc:
            raise MailError(
                f"{self.where} refused the login of {self.user!r}: {exc.code} {exc.message}"
            ) from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise MailError(
                f"cannot reach {self.where}: {exc or type(exc).__name__}", transient=True
            ) from exc
        return self.where
