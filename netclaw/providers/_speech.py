"""Speech endpoints: OpenAI-compatible ``/audio/transcriptions`` (speech-to-text) and
``/audio/speech`` (text-to-speech), configured like the chat providers.

An endpoint names a provider (``providers.<name>``: its ``base_url``, key, ``timeout_s``
and ``max_retries``) and a model; each attempt is retried by :mod:`netclaw.retry` as a
chat call is (transient failures, a rate limit's ``Retry-After``), and the next of the
``fallbacks`` is tried when one stays unreachable, rate-limited or overloaded.

Neither call ever raises for a failure of the other side: :meth:`Speech.transcribe`
answers a :class:`~netclaw.messages.Transcript` whose ``error`` says why there is no
text (too long, too big, no endpoint, every endpoint failed), and
:meth:`Speech.synthesize` a :class:`Spoken` with its ``error`` — the session then tells
people instead of dropping the note or the reply. Runs on the I/O loop; the audio is
already in memory (read off the loop by the caller).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from netclaw import __version__
from netclaw.config import LiveSettings, ProviderConfig, SpeechConfig, Synthesizer, Transcriber
from netclaw.errors import ProviderError, ProviderProtocolError
from netclaw.messages import Transcript
from netclaw.providers._classify import (
    PROVIDER_MAX_RETRY_AFTER_S,
    classify_http_error,
    classify_transport_error,
    retry_verdict,
)
from netclaw.retry import RetryPolicy, with_retries

log = logging.getLogger("netclaw.providers.speech")

T = TypeVar("T")
MAX_TRANSCRIPT_BYTES = 1_000_000  # a transcription's answer; past it, a protocol error
MAX_SPEECH_BYTES = 25_000_000  # a synthesised reply's audio
MAX_ERROR_BYTES = 64 * 1024  # an error body is read this far, never whole
_MIME_OF_FORMAT = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
}


@dataclass(frozen=True, slots=True)
class Spoken:
    """A reply as speech: the audio (``name``, ``mime_type``, ``data``) and the model that
    spoke it, or why there is none (``error``)."""

    data: bytes = b""
    name: str = ""
    mime_type: str = ""
    model: str | None = None
    chars: int = 0
    error: str | None = None


class Speech:
    """The daemon's speech endpoints, read from the running config at each call (a reload
    applies to the next note). One HTTP client per provider, kept while its settings hold."""

    def __init__(
        self,
        live: LiveSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self._live = live
        self._transport = transport
        self._retry_base_delay = retry_base_delay  # tests shrink the backoff
        self._clients: dict[str, tuple[ProviderConfig, httpx.AsyncClient]] = {}
        self._retired: list[httpx.AsyncClient] = []

    @property
    def config(self) -> SpeechConfig:
        return self._live.current.speech

    # -- speech-to-text -------------------------------------------------------------------------

    async def transcribe(self, data: bytes, name: str, mime_type: str, seconds: float | None) -> Transcript:
        """What was said in ``data`` (``seconds`` long, if its headers said), or why it
        cannot be known (never raises for the other side's failure)."""
        config = self.config
        stt = config.transcription
        if stt is None:
            return Transcript(error="speech-to-text is not configured (speech.transcription)")
        if len(data) > config.max_audio_bytes:
            return Transcript(
                seconds=seconds,
                error=f"it is {len(data):,} bytes; the limit is {config.max_audio_bytes:,} (speech.max_audio_bytes)",
            )
        if seconds is not None and seconds > config.max_audio_s:
            return Transcript(
                seconds=seconds,
                error=f"it is {seconds:.0f} s long; the limit is {config.max_audio_s:g} s (speech.max_audio_s)",
            )
        failures: list[str] = []
        for endpoint in (stt, *stt.fallbacks):
            try:
                heard = await self._transcribe_on(endpoint, stt.language, data, name, mime_type)
            except ProviderError as exc:
                log.warning("transcription by %s failed: %s", endpoint.model, exc)
                failures.append(str(exc))
                if not exc.retryable:  # a refusal another endpoint would repeat: no fallback
                    break
                continue
            if heard.seconds is None and seconds is not None:
                heard = Transcript(heard.text, heard.language, seconds, heard.error, heard.model)
            return heard
        return Transcript(seconds=seconds, error="; ".join(failures))

    async def _transcribe_on(
        self, endpoint: Transcriber, language: str | None, data: bytes, name: str, mime_type: str
    ) -> Transcript:
        provider, client = self._client(endpoint.provider)
        form = {"model": endpoint.model, "response_format": "verbose_json"}
        if language is not None:
            form["language"] = language
        url = f"{provider.base_url}/audio/transcriptions"

        async def attempt() -> Transcript:
            request = client.build_request(
                "POST",
                url,
                data=form,
                files={"file": (name, data, mime_type or "application/octet-stream")},
                headers=self._headers(provider),
            )
            body = await self._send(endpoint.provider, provider, client, request, MAX_TRANSCRIPT_BYTES)
            return _transcript(endpoint, body, url)

        return await self._retried(attempt, provider, f"transcription ({endpoint.provider}/{endpoint.model})")

    # -- text-to-speech -------------------------------------------------------------------------

    async def synthesize(self, text: str) -> Spoken:
        """``text`` spoken, or why it is not (never raises for the other side's failure)."""
        tts = self.config.synthesis
        if tts is None:
            return Spoken(error="text-to-speech is not configured (speech.synthesis)")
        if len(text) > tts.max_chars:
            return Spoken(
                error=f"the reply is longer than {tts.max_chars:,} characters (speech.synthesis.max_chars)"
            )
        failures: list[str] = []
        for endpoint in (tts, *tts.fallbacks):
            try:
                return await self._synthesize_on(endpoint, text)
            except ProviderError as exc:
                log.warning("speech by %s failed: %s", endpoint.model, exc)
                failures.append(str(exc))
                if not exc.retryable:
                    break
        return Spoken(chars=len(text), error="; ".join(failures))

    async def _synthesize_on(self, endpoint: Synthesizer, text: str) -> Spoken:
        provider, client = self._client(endpoint.provider)
        url = f"{provider.base_url}/audio/speech"
        body = {
            "model": endpoint.model,
            "input": text,
            "voice": endpoint.voice,
            "response_format": endpoint.format,
        }

        async def attempt() -> Spoken:
            request = client.build_request("POST", url, json=body, headers=self._headers(provider))
            audio = await self._send(endpoint.provider, provider, client, request, MAX_SPEECH_BYTES)
            if not audio:
                raise ProviderProtocolError(f"provider {endpoint.provider!r}: {url} answered no audio")
            return Spoken(
                audio, f"reply.{endpoint.format}", _MIME_OF_FORMAT[endpoint.format], endpoint.model, len(text)
            )

        return await self._retried(attempt, provider, f"speech ({endpoint.provider}/{endpoint.model})")

    # -- shared ---------------------------------------------------------------------------------

    async def close(self) -> None:
        for client in [*self._retired, *(c for _, c in self._clients.values())]:
            await client.aclose()
        self._clients.clear()
        self._retired.clear()

    def _client(self, name: str) -> tuple[ProviderConfig, httpx.AsyncClient]:
        provider = self._live.current.providers[name]  # the config names only configured ones
        held = self._clients.get(name)
        if held is not None and held[0] == provider:
            return held
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(provider.timeout_s, connect=min(10.0, provider.timeout_s)),
            transport=self._transport,
        )
        if held is not None:  # its settings changed (a reload): closed with the others
            self._retired.append(held[1])
        self._clients[name] = (provider, client)
        return provider, client

    @staticmethod
    def _headers(provider: ProviderConfig) -> dict[str, str]:
        headers = {"user-agent": f"netclaw/{__version__}"}
        key = provider.api_key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    async def _send(
        self,
        name: str,
        provider: ProviderConfig,
        client: httpx.AsyncClient,
        request: httpx.Request,
        limit: int,
    ) -> bytes:
        """The answer's body, read no further than ``limit`` bytes (an error's: 64 KiB)."""
        try:
            response = await client.send(request, stream=True)
            try:
                failed = response.status_code >= 400
                cap = MAX_ERROR_BYTES if failed else limit
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > cap:
                        break
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise classify_transport_error(
                exc, name, provider.base_url, timeout_s=provider.timeout_s
            ) from exc
        if failed:
            text = bytes(body[:MAX_ERROR_BYTES]).decode("utf-8", "replace")
            raise classify_http_error(
                response.status_code, text, response.headers, name, api_key_env=provider.api_key_env
            )
        if len(body) > limit:
            raise ProviderProtocolError(f"provider {name!r}: the answer is larger than {limit:,} bytes")
        return bytes(body)

    async def _retried(self, attempt: Callable[[], Awaitable[T]], provider: ProviderConfig, what: str) -> T:
        policy = RetryPolicy(
            max_retries=provider.max_retries,
            base_delay_s=self._retry_base_delay,
            max_retry_after_s=PROVIDER_MAX_RETRY_AFTER_S,
        )
        return await with_retries(attempt, classify=retry_verdict, policy=policy, what=what, logger=log)


def _transcript(endpoint: Transcriber, body: bytes, url: str) -> Transcript:
    """The answer of ``/audio/transcriptions``: ``verbose_json`` (text, language, duration)
    or a server's plain ``json`` (text alone)."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        answer = None
    text = answer.get("text") if isinstance(answer, dict) else None
    if not isinstance(text, str):
        shown = body[:200].decode("utf-8", "replace")
        raise ProviderProtocolError(
            f"provider {endpoint.provider!r}: {url} answered without a transcript ({shown!r})"
        )
    language = answer.get("language")
    duration = answer.get("duration")
    seconds = (
        float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None
    )
    text = text.strip()
    if not text:
        return Transcript(seconds=seconds, error="no speech could be heard in it", model=endpoint.model)
    return Transcript(
        text, str(language) if isinstance(language, str) and language else None, seconds, None, endpoint.model
    )
