"""The bot's mailbox over IMAP (``aioimaplib``; nothing else imports it).

One :class:`Mailbox` is one logged-in connection with the folder selected. What the
adapter asks of it: the UIDs of the mail not yet taken (``UNSEEN``: the server's flags
are the truth, nothing is kept here), one mail's bytes (``BODY.PEEK``: reading does not
mark it), marking it taken (``\\Seen``, only once its input is journaled), and waiting
for news — IMAP IDLE where the server has it, else a plain wait of the poll interval
(:meth:`Mailbox.wait`). Failures are :class:`MailError`; a lost connection is transient.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl

import aioimaplib

from adapters.email._port import MailError

log = logging.getLogger("adapters.email")

IDLE_DONE_S = 5.0  # how long the server gets to end an IDLE
_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")
_FETCH_UID = re.compile(rb"\bUID (\d+)\b")


class Mailbox:
    def __init__(self, client: aioimaplib.IMAP4, folder: str, timeout_s: float) -> None:
        self._client = client
        self.folder = folder
        self.timeout_s = timeout_s
        self.uidvalidity = ""
        self.idle_works = client.has_capability("IDLE")

    @classmethod
    async def connect(
        cls, host: str, port: int, tls: bool, user: str, password: str, folder: str, timeout_s: float
    ) -> Mailbox:
        """Connect, log in and select ``folder``. MailError (transient when the server
        could not be reached; not when it refused the login or the folder)."""
        if tls:
            client: aioimaplib.IMAP4 = aioimaplib.IMAP4_SSL(
                host, port, timeout=timeout_s, ssl_context=ssl.create_default_context()
            )
        else:
            client = aioimaplib.IMAP4(host, port, timeout=timeout_s)
        where = f"IMAP {host}:{port}"
        try:
            await asyncio.wait_for(client.wait_hello_from_server(), timeout_s)
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise MailError(f"cannot reach {where}: {exc or type(exc).__name__}", transient=True) from exc
        box = cls(client, folder, timeout_s)
        try:
            answer = await box._call(client.login(user, password), "log in")
            if answer.result != "OK":
                raise MailError(f"{where} refused the login of {user!r}: {_said(answer)}")
            box.idle_works = client.has_capability("IDLE")
            answer = await box._call(client.select(aioimaplib.quoted(folder)), f"select {folder}")
            if answer.result != "OK":
                raise MailError(f"{where}: no folder {folder!r} for {user!r}: {_said(answer)}")
        except BaseException:
            await box.close()
            raise
        for line in answer.lines:
            found = _UIDVALIDITY.search(bytes(line))
            if found is not None:
                box.uidvalidity = found.group(1).decode()
        return box

    async def _call(self, call: object, what: str) -> aioimaplib.Response:
        try:
            answer: aioimaplib.Response = await asyncio.wait_for(call, self.timeout_s)  # type: ignore[arg-type]
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise MailError(f"IMAP: could not {what}: {exc or type(exc).__name__}", transient=True) from exc
        return answer

    async def unseen(self, *, larger_than: int | None = None) -> list[str]:
        """The UIDs of the mail not yet taken (larger than ``larger_than`` bytes, when
        given), oldest first."""
        criteria = ("UNSEEN", "LARGER", str(larger_than)) if larger_than is not None else ("UNSEEN",)
        answer = await self._call(self._client.uid_search(*criteria), "search the folder")
        if answer.result != "OK":
            raise MailError(f"IMAP: search refused: {_said(answer)}", transient=True)
        uids = bytes(answer.lines[0]).split() if answer.lines else []
        return sorted((u.decode() for u in uids if u.isdigit()), key=int)

    async def fetch(self, uid: str) -> bytes | None:
        """The bytes of mail ``uid`` (None when it is gone), read without marking it."""
        answer = await self._call(self._client.uid("fetch", uid, "(BODY.PEEK[])"), f"fetch mail {uid}")
        if answer.result != "OK":
            raise MailError(f"IMAP: fetch of {uid} refused: {_said(answer)}", transient=True)
        lines = answer.lines
        for index, line in enumerate(lines[:-1]):
            head = bytes(line)
            if b"FETCH" in head and head.endswith(b"}") and _FETCH_UID.search(head):
                return bytes(lines[index + 1])
        return None

    async def mark_taken(self, uid: str) -> None:
        answer = await self._call(
            self._client.uid("store", uid, "+FLAGS.SILENT", r"(\Seen)"), f"flag mail {uid} seen"
        )
        if answer.result != "OK":
            raise MailError(f"IMAP: flagging {uid} seen refused: {_said(answer)}", transient=True)

    async def wait(self, seconds: float, *, idle: bool) -> None:
        """Until something happens in the folder (IDLE), or ``seconds`` pass. Without IDLE
        (the server has none, ``idle`` is off, or it failed once) just wait."""
        if not (idle and self.idle_works):
            await asyncio.sleep(seconds)
            return
        client = self._client
        try:
            done = await asyncio.wait_for(client.idle_start(timeout=seconds), self.timeout_s)
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            # This connection polls from now on (a broken connection fails the next search).
            log.warning("email: IMAP IDLE failed (%r); polling every %gs instead", exc, seconds)
            self.idle_works = False
            await asyncio.sleep(seconds)
            return
        try:
            with contextlib.suppress(TimeoutError):
                await client.wait_server_push(timeout=seconds + 1)
        finally:
            client.idle_done()
            try:
                await asyncio.wait_for(done, IDLE_DONE_S)
            except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
                raise MailError(
                    f"IMAP: IDLE did not end: {exc or type(exc).__name__}", transient=True
                ) from exc

    async def close(self) -> None:
        client = self._client
        with contextlib.suppress(Exception):  # leaving: whatever the connection's state
            if client.has_pending_idle():
                client.idle_done()
            await asyncio.wait_for(client.logout(), 2)
        with contextlib.suppress(Exception):
            transport = getattr(client.protocol, "transport", None)
            if transport is not None:
                transport.close()


def _said(answer: aioimaplib.Response) -> str:
    return " ".join(bytes(line).decode(errors="replace") for line in answer.lines[-1:]) or answer.result
