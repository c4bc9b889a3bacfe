"""A scripted OpenAI-compatible speech server on 127.0.0.1, over real HTTP.

- ``POST /v1/audio/transcriptions`` (multipart: ``file``, ``model``, ``response_format``,
  ``language``): the uploaded bytes must be audio the test registered with :meth:`expect`
  (matched by their SHA-256, so a transcript proves the daemon sent the very recording);
  a WAV's header is parsed and must hold samples. Unknown audio is refused (400), as a
  server refuses what it cannot decode. The answer is ``verbose_json`` (text, language,
  duration) unless another format was asked for.
- ``POST /v1/audio/speech`` (JSON: ``model``, ``input``, ``voice``, ``response_format``):
  a real WAV of silence as long as the text would take to say (16 kHz mono), so the
  reply is an audio file a player opens.
- ``GET /v1/models``: the two models.

Every request is recorded (:attr:`FakeSpeech.requests`); :meth:`fail_next` makes the next
requests of a route answer an error, :meth:`hold` keeps transcriptions waiting until
:meth:`release` (a test kills the daemon meanwhile).

:func:`spoken` makes the audio the tests send: ``espeak-ng`` (Debian's package) saying a
sentence as a WAV; a test is skipped, with the reason, where it is not installed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.fakes._loop_thread import LoopThread

STT_MODEL = "whisper-fake"
TTS_MODEL = "tts-fake"


def spoken(text: str) -> bytes:
    """``text`` said by espeak-ng, as WAV bytes (the test is skipped without espeak-ng)."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng): no speech to send")
    done = subprocess.run([binary, "--stdout", text], capture_output=True, check=True, timeout=60)
    assert done.stdout[:4] == b"RIFF", "espeak-ng wrote no WAV"
    return done.stdout


def wav_samples(data: bytes) -> int:
    """How many samples a WAV holds (0 when it is not one): the server checks what it got."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return 0
    at, block = 12, 0
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if chunk == b"fmt ":
            block = struct.unpack_from("<H", data, at + 20)[0]
        elif chunk == b"data":
            length = size if 0 < size <= len(data) - at - 8 else len(data) - at - 8
            return length // block if block else 0
        at += 8 + size + (size & 1)
    return 0


def silence(seconds: float, rate: int = 16_000) -> bytes:
    frames = int(seconds * rate)
    data = b"\x00\x00" * frames
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


@dataclass
class Heard:
    """A registered recording and what the server says was said in it."""

    text: str
    language: str | None = "english"
    duration: float | None = None


@dataclass
class SpeechRequest:
    path: str
    fields: dict[str, str]
    audio: bytes = b""
    filename: str | None = None
    content_type: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    status: int = 200


class FakeSpeech:
    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.requests: list[SpeechRequest] = []
        self._expected: dict[str, Heard] = {}
        self._failures: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
        self._raw: dict[str, list[tuple[int, bytes]]] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self.waiting = threading.Event()  # a transcription arrived and is held
        self._runner: web.AppRunner | None = None

    # -- what the test scripts ----------------------------------------------------------------

    def expect(
        self, audio: bytes, text: str, *, language: str | None = "english", duration: float | None = None
    ) -> None:
        with self._lock:
            self._expected[hashlib.sha256(audio).hexdigest()] = Heard(text, language, duration)

    def fail_next(
        self,
        route: str,
        status: int,
        *,
        count: int = 1,
        message: str = "scripted failure",
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next ``count`` requests of ``route`` (``transcriptions``, ``speech``) fail."""
        with self._lock:
            self._failures.setdefault(route, []).extend([(status, message, headers or {})] * count)

    def answer_next(self, route: str, body: bytes, *, status: int = 200) -> None:
        """The next request of ``route`` is answered ``body`` as it is (a hostile or broken server)."""
        with self._lock:
            self._raw.setdefault(route, []).append((status, body))

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def hold(self) -> None:
        """Transcriptions wait (answering nothing) until :meth:`release`."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def transcriptions(self, audio: bytes | None = None) -> list[SpeechRequest]:
        """The transcription requests answered with a transcript (of ``audio``, when given)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.path.endswith("/transcriptions")
                and r.status == 200
                and (audio is None or r.audio == audio)
            ]

    def speeches(self) -> list[SpeechRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/speech") and r.status == 200]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- the server ---------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.base_url

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _failure(self, route: str) -> web.Response | None:
        with self._lock:
            raw = self._raw.get(route)
            if raw:
                status, body = raw.pop(0)
                return web.Response(status=status, body=body, content_type="application/json")
            queue = self._failures.get(route)
            if not queue:
                return None
            status, message, headers = queue.pop(0)
        return web.json_response(
            {"error": {"message": message, "type": "server_error"}}, status=status, headers=headers
        )

    def _record(self, request: SpeechRequest) -> None:
        with self._lock:
            self.requests.append(request)

    async def _transcribe(self, request: web.Request) -> web.Response:
        if not request.content_type.startswith("multipart/form-data"):
            return _refuse(f"expected multipart/form-data, got {request.content_type}")
        fields: dict[str, str] = {}
        audio, filename, content_type = b"", None, None
        reader = await request.multipart()
        async for part in reader:
            if part.name == "file":
                filename, content_type = part.filename, part.headers.get("Content-Type")
                audio = await part.read()  # type: ignore[union-attr]
            elif part.name:
                fields[part.name] = await part.text()  # type: ignore[union-attr]
        seen = SpeechRequest(request.path, fields, audio, filename, content_type)
        failure = self._failure("transcriptions")
        if failure is not None:
            seen.status = failure.status
            self._record(seen)
            return failure
        if not self._released.is_set():
            self.waiting.set()
            await asyncio.to_thread(self._released.wait)  # stop() releases it too
        problem = None
        if not audio:
            problem = "no file part, or an empty one"
        elif "model" not in fields:
            problem = "no model field"
        elif audio[:4] == b"RIFF" and wav_samples(audio) == 0:
            problem = "the WAV holds no samples"
        with self._lock:
            heard = self._expected.get(hashlib.sha256(audio).hexdigest())
        if problem is None and heard is None:
            problem = "the audio is not one this server knows (not registered with expect())"
        if problem is not None:
            seen.status = 400
            self._record(seen)
            return _refuse(problem)
        self._record(seen)
        duration = heard.duration
        if duration is None and audio[:4] == b"RIFF":
            rate = struct.unpack_from("<I", audio, 24)[0]
            duration = wav_samples(audio) / rate if rate else None
        if fields.get("response_format", "json") == "verbose_json":
            answer: dict[str, Any] = {"task": "transcribe", "text": heard.text, "duration": duration}
            if heard.language is not None:
                answer["language"] = heard.language
            return web.json_response(answer)
        return web.json_response({"text": heard.text})

    async def _speech(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _refuse("the body is not JSON")
        seen = SpeechRequest(request.path, {}, body=body)
        failure = self._failure("speech")
        if failure is not None:
            seen.status = failure.status
            self._record(seen)
            return failure
        text = body.get("input")
        if not isinstance(text, str) or not text or not body.get("model") or not body.get("voice"):
            seen.status = 400
            self._record(seen)
            return _refuse("input, model and voice are required")
        self._record(seen)
        if body.get("response_format", "mp3") != "wav":
            return _refuse("this server speaks only wav")
        return web.Response(body=silence(min(len(text) / 15.0, 30.0)), content_type="audio/wav")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": STT_MODEL}, {"id": TTS_MODEL}]})


def _refuse(message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=400)


class FakeSpeechThread(LoopThread[FakeSpeech]):
    """The server on its own loop and thread, for synchronous tests and daemons."""

    def __init__(self) -> None:
        super().__init__(FakeSpeech(), "fake-speech")

    def __getattr__(self, name: str) -> Any:  # its scripting methods are thread-safe
        return getattr(self.server, name)
