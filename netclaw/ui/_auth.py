"""Logins of the control room: signed cookies, CSRF tokens and a slowed login (pure).

- **The cookie** is ``v1.<expiry>.<nonce>.<mac>``: an HMAC keyed by a key derived from the
  control token. Nothing is stored, so a login survives a restart and works on every node
  that shares the token; changing the token ends every login. Logging out revokes the
  nonce here (until it would have expired anyway) and deletes the cookie in the browser.
- **The CSRF token** of a login is another HMAC of its nonce: a form carries it, a post
  without the right one is refused. It never leaves the pages of that login.
- **Failed logins** from one address wait before the next try, twice as long each time
  (1 s, 2 s, 4 s … at most ``MAX_WAIT_S``; forgotten after a quiet ``FORGET_AFTER_S``); a try during the wait is refused unread, so
  a guesser cannot go faster by asking in parallel. Success clears the address.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "netclaw_ui"
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 300.0
MAX_TRACKED_ADDRESSES = 10_000  # failed-login records kept; the oldest go first
FORGET_AFTER_S = 900.0  # a quiet address starts again from the first wait


@dataclass(frozen=True, slots=True)
class Login:
    nonce: str
    expires: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Logins:
    """Issues and checks login cookies and CSRF tokens for one control token."""

    def __init__(self, token: str, lifetime_s: float, clock: Callable[[], float] = time.time) -> None:
        self._key = hmac.new(
            token.encode("utf-8", "surrogateescape"), b"netclaw-ui-v1", hashlib.sha256
        ).digest()
        self._token = token.encode("utf-8", "surrogateescape")
        self.lifetime_s = lifetime_s
        self._clock = clock
        self._revoked: dict[str, int] = {}  # nonce → its expiry

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), self._token)

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

    def issue(self) -> tuple[str, Login]:
        """A new login: the cookie value and what it stands for."""
        login = Login(secrets.token_urlsafe(16), int(self._clock() + self.lifetime_s))
        body = f"v1.{login.expires}.{login.nonce}"
        return f"{body}.{self._mac(body)}", login

    def check(self, cookie: str | None) -> Login | None:
        """The login a cookie proves, or None (absent, forged, expired or logged out)."""
        if not cookie or len(cookie) > 200:
            return None
        parts = cookie.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not (parts[1].isascii() and parts[1].isdigit()):
            return None
        body = ".".join(parts[:3])
        if not hmac.compare_digest(self._mac(body), parts[3]):
            return None
        login = Login(parts[2], int(parts[1]))
        if login.expires <= self._clock() or login.nonce in self._revoked:
            return None
        return login

    def csrf(self, login: Login) -> str:
        return self._mac(f"csrf.{login.nonce}")

    def csrf_matches(self, login: Login, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf(login), given)

    def revoke(self, login: Login) -> None:
        now = self._clock()
        for nonce in [n for n, expires in self._revoked.items() if expires <= now]:
            del self._revoked[nonce]
        self._revoked[login.nonce] = login.expires


class LoginThrottle:
    """Per-address backoff after failed logins."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # → (count, wait until)

    def wait_s(self, address: str) -> float:
        """How long ``address`` must still wait before its next try (0: it may try now)."""
        found = self._failures.get(address)
        return max(0.0, found[1] - self._clock()) if found is not None else 0.0

    def failed(self, address: str) -> float:
        """Record a failure; the wait it earns."""
        now = self._clock()
        count, until = self._failures.pop(address, (0, now))
        count = 1 if now > until + FORGET_AFTER_S else count + 1
        wait = min(FIRST_WAIT_S * 2.0 ** (count - 1), MAX_WAIT_S)
        self._failures[address] = (count, now + wait)
        while len(self._failures) > MAX_TRACKED_ADDRESSES:
            self._failures.popitem(last=False)
        return wait

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
