"""Sending a corpus case over a raw socket, byte for byte (no client library would send
most of them), and reading the answer if there is one to read."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import select
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.fuzz.corpus import Case

TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Target:
    host: str
    api_port: int
    webhook_port: int
    token: str
    webhook_secret: str


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer (a hang-up case, or the daemon closed the connection)
    content_type: str = ""
    body: bytes = b""

    def error_shape(self) -> bool:
        """Whether the body is ``{"error": {"code", "message"}}``."""
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return False
        error = parsed.get("error") if isinstance(parsed, dict) else None
        return (
            isinstance(error, dict)
            and isinstance(error.get("code"), str)
            and isinstance(error.get("message"), str)
        )


def request_bytes(case: Case, target: Target) -> tuple[bytes, bytes]:
    """The request head and the body as they go on the wire."""
    headers = [("Host", b"127.0.0.1"), *_credentials(case, target), *case.headers]
    names = {name.lower() for name, _ in case.headers}
    if case.framing == "chunked":
        headers.append(("Transfer-Encoding", b"chunked"))
        body = (
            b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in _pieces(case.body, 7)) + b"0\r\n\r\n"
        )
    elif case.framing == "raw":
        body = case.body
    else:
        if "content-length" not in names:
            headers.append(("Content-Length", b"%d" % len(case.body)))
        body = case.body
    if case.framing in ("expect", "hangup_expect"):
        headers.append(("Expect", b"100-continue"))
    headers = [(name, value.replace(b"{unique}", uuid.uuid4().hex.encode())) for name, value in headers]
    head = f"{case.method} {case.target} HTTP/1.1\r\n".encode()
    head += b"".join(name.encode() + b": " + value + b"\r\n" for name, value in headers) + b"\r\n"
    if case.head_edit is not None:
        old, new = case.head_edit
        assert old in head, (case.name, old)
        head = head.replace(old, new, 1)
    return head, body


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _credentials(case: Case, target: Target) -> list[tuple[str, bytes]]:
    given = {name.lower() for name, _ in case.headers}
    if not case.auth:
        return []
    auth = case.route.auth
    found: list[tuple[str, bytes]] = []
    if auth in ("token", "webhook_bearer") and "authorization" not in given:
        secret = target.token if auth == "token" else target.webhook_secret
        found.append(("Authorization", f"Bearer {secret}".encode()))
    if auth == "webhook_hmac":
        stamp = dict((k.lower(), v) for k, v in case.headers).get("x-netclaw-timestamp")
        if stamp is None:
            stamp = str(int(time.time())).encode()
            found.append(("X-Netclaw-Timestamp", stamp))
        if "x-netclaw-signature" not in given:
            signed = stamp + b"." + (case.signed_over if case.signed_over is not None else case.body)
            digest = hmac.new(target.webhook_secret.encode(), signed, hashlib.sha256).hexdigest()
            found.append(("X-Netclaw-Signature", f"sha256={digest}".encode()))
    return found


def send(case: Case, target: Target) -> Answer:
    """Send ``case``; its answer (status None when it hung up or got none)."""
    port = target.webhook_port if case.route.listener == "webhooks" else target.api_port
    head, body = request_bytes(case, target)
    sock = socket.create_connection((target.host, port), timeout=TIMEOUT_S)
    try:
        return _exchange(sock, case, head, body)
    finally:
        sock.close()


def _exchange(sock: socket.socket, case: Case, head: bytes, body: bytes) -> Answer:
    framing = case.framing
    if framing == "hangup_head":
        sock.sendall(head[: len(head) // 2])
        return _hang_up(sock)
    if framing in ("hangup_after_head", "hangup_expect"):
        sock.sendall(head)
        return _hang_up(sock)
    if framing == "hangup_body":
        sock.sendall(head + body[: len(body) // 2])
        return _hang_up(sock)
    if framing == "expect":
        sock.sendall(head)
        select.select([sock], [], [], 2.0)  # the interim "100 Continue" (or a final answer)
        _send_quietly(sock, body)
    else:
        _send_quietly(sock, head + body)
    if framing == "pipelined":
        _send_quietly(sock, head + body)
    if framing == "hangup_request":
        return _hang_up(sock)
    return _read_answer(sock, case, close_after_status=framing == "hangup_answer")


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    # The daemon may answer (413, 401) and close before reading everything: that is fine.
    with contextlib.suppress(ConnectionError, BrokenPipeError):
        sock.sendall(data)


def _hang_up(sock: socket.socket) -> Answer:
    # An abortive close (RST), as a client that crashed or timed out would leave.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return Answer(None)


def _read_answer(sock: socket.socket, case: Case, *, close_after_status: bool) -> Answer:
    """The final answer (interim 1xx skipped), parsed here: aiohttp echoes whatever HTTP
    version the request named, which no client library would read."""
    stream = sock.makefile("rb")
    try:
        while True:
            status, headers = _read_head(stream)
            if status is None or status >= 200:
                break
    except ConnectionError:
        return Answer(None)
    if status is None:
        return Answer(None)
    content_type = headers.get("content-type", "")
    if close_after_status or content_type.startswith("text/event-stream"):
        _hang_up(sock)  # an event stream never ends: hang up on it, as clients do
        return Answer(status, content_type)
    try:
        body = b"" if case.method == "HEAD" or status in (204, 304) else _read_body(stream, headers)
    except (ConnectionError, ValueError) as exc:
        raise AssertionError(f"{case.name}: the answer {status} was cut short: {exc}") from exc
    return Answer(status, content_type, body)


def _read_head(stream: Any) -> tuple[int | None, dict[str, str]]:
    line = stream.readline(65537)
    if not line:
        return None, {}
    parts = line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise AssertionError(f"not an HTTP status line: {line[:200]!r}")
    headers: dict[str, str] = {}
    while (header := stream.readline(65537)) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def _read_body(stream: Any, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while (size := int(stream.readline(1024).split(b";")[0], 16)) > 0:
            chunks.append(stream.read(size))
            stream.readline(8)
        return b"".join(chunks)
    if "content-length" in headers:
        length = int(headers["content-length"])
        body: bytes = stream.read(length)
        if len(body) != length:
            raise ConnectionError(f"{len(body)} of {length} bytes")
        return body
    return bytes(stream.read())  # until the daemon closes
