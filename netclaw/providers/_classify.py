"""Turn HTTP and transport failures into netclaw's :class:`ProviderError` tree.

Shared by every provider. OpenAI, Anthropic, Ollama, vLLM and llama.cpp all say
"your prompt is too big" differently, and the session must recognise that one
case (it compacts instead of failing), so the patterns live here in one place.
Callers translate with ``raise classify_...(...) from exc``.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from netclaw.errors import (
    ContextOverflow,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderProtocolError,
    ProviderUnavailable,
    RateLimited,
)
from netclaw.retry import Retry

MAX_DETAIL_CHARS = 300

# Error codes/types that mean "prompt larger than the window" (OpenAI, llama.cpp).
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})

# Lower-cased message fragments, per server family.
_OVERFLOW_PHRASES = (
    # OpenAI / vLLM: "This model's maximum context length is 8192 tokens. ..."
    "maximum context length",
    "context_length_exceeded",
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    "prompt is too long",
    # Anthropic, prompt plus max_tokens over the window: "input length and `max_tokens`
    # exceed context limit: 187254 + 20000 > 200000, decrease input length or ..."
    "exceed context limit",
    # Ollama
    "context length exceeded",
    "exceeds the context window",
    "input length exceeds",
    # vLLM
    "is longer than the model's context length",
    "reduce the length of the messages",
    "is too long to fit into the model",
    "is too long and exceeds limit",
    # llama.cpp server / llama-cpp-python
    "exceeds the available context size",
    "exceed context window",
)
# llama.cpp's terser forms ("input is larger than the max context size", "n_ctx ...
# exceeded"): "context size"/"n_ctx" alone is too vague (it also names a setting), so
# require a word saying something went over.
_OVERFLOW_RE = re.compile(
    r"(context size|n_ctx).{0,80}(exceed|too (long|large|many)|larger|greater)"
    r"|(exceed|too (long|large|many)|larger|greater).{0,80}(context size|n_ctx)",
    re.DOTALL,
)


def _truncate(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    text = " ".join(text.split())  # one line: these end up in logs and chat messages
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse_json(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def error_detail(body: str) -> tuple[str, tuple[str, ...]]:
    """(the server's own message, its error code and type) from an error body.

    Understands ``{"error": {"message", "code", "type"}}`` (OpenAI, Anthropic,
    llama.cpp, newer vLLM), ``{"error": "..."}`` (Ollama) and ``{"message", "code"}``
    (older vLLM); anything else is reported as raw text.
    """
    data = _parse_json(body)
    message: str | None = None
    codes: list[str | None] = []
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            message = _str_or_none(err.get("message"))
            codes += [_str_or_none(err.get("code")), _str_or_none(err.get("type"))]
        elif isinstance(err, str):
            message = err
        if message is None:
            message = _str_or_none(data.get("message")) or _str_or_none(data.get("detail"))
        codes += [_str_or_none(data.get("code")), _str_or_none(data.get("type"))]
    if not message:
        message = body.strip() or "(empty body)"
    return message, tuple(c.lower() for c in codes if c)


def _str_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return str(value)


def looks_like_overflow(message: str, codes: tuple[str, ...] = ()) -> bool:
    """True when an error message or code says the prompt exceeds the context window."""
    if any(c.lower() in _OVERFLOW_CODES for c in codes):
        return True
    lowered = message.lower()
    return any(p in lowered for p in _OVERFLOW_PHRASES) or bool(_OVERFLOW_RE.search(lowered))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # Plain dicts are case-sensitive; HTTP headers are not.
    value = headers.get(name)
    if value is not None:
        return value
    for key, val in headers.items():
        if key.lower() == name:
            return val
    return None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP-date)."""
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0:
            return value
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT; a naive result means no zone was given
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def classify_http_error(
    status: int,
    body: str,
    headers: Mapping[str, str],
    provider: str,
    *,
    api_key_env: str | None = None,
) -> ProviderError:
    """The :class:`ProviderError` for a non-2xx answer from ``provider``.

    ``api_key_env`` (optional) names the key variable in the auth-error message.
    """
    message, codes = error_detail(body)
    detail = _truncate(message)
    where = f"provider {provider!r} (HTTP {status})"

    if status in (401, 403):
        if api_key_env:
            hint = (
                f"check that the environment variable {api_key_env} "
                f"(providers.{provider}.api_key_env) holds a valid API key"
            )
        else:
            hint = (
                f"providers.{provider}.api_key_env is not set; point it at the environment "
                "variable that holds the API key"
            )
        return ProviderAuthError(f"{where} rejected the credentials: {detail}; {hint}")

    if status == 429:
        if "insufficient_quota" in codes:
            # Waiting does not refill a quota; retrying would only delay the error.
            return ProviderBadRequest(
                f"{where}: the account's quota is exhausted: {detail}; check the plan and billing"
            )
        retry_after = parse_retry_after(headers)
        wait = f"; the server asks to wait {retry_after:g} s" if retry_after is not None else ""
        return RateLimited(f"{where} is rate-limiting requests: {detail}{wait}", retry_after)

    if status == 413:
        # The HTTP layer's hard size limit, not the model's window: compacting the
        # history to the window would not necessarily help, so this is terminal.
        return ProviderBadRequest(f"{where}: the request is too large for the provider to accept: {detail}")

    if looks_like_overflow(message, codes):
        return ContextOverflow(f"{where}: the prompt exceeds the model's context window: {detail}")

    if status == 529:
        return ProviderUnavailable(f"{where} is overloaded: {detail}; try again later")
    if status == 408 or 500 <= status <= 599:
        return ProviderUnavailable(f"{where} failed on the server side: {detail}")
    if 400 <= status <= 499:
        return ProviderBadRequest(f"{where} rejected the request: {detail}")
    return ProviderProtocolError(f"{where}: unexpected HTTP status: {detail}")


def classify_transport_error(
    exc: httpx.HTTPError,
    provider: str,
    base_url: str,
    *,
    timeout_s: float | None = None,
) -> ProviderError:
    """The :class:`ProviderError` for a failure below HTTP (connect, timeout, ...)."""
    reason = _truncate(str(exc) or type(exc).__name__)
    who = f"provider {provider!r}"
    limit = f" within {timeout_s:g} s" if timeout_s is not None else ""
    if isinstance(exc, httpx.ConnectTimeout):
        return ProviderUnavailable(
            f"{who}: timed out connecting to {base_url}: {reason}; is the server running "
            "and the address right?"
        )
    if isinstance(exc, httpx.ConnectError):
        return ProviderUnavailable(f"{who}: cannot reach {base_url}: {reason}; is the server running?")
    if isinstance(exc, httpx.TimeoutException):
        return ProviderUnavailable(
            f"{who}: no response from {base_url}{limit} ({type(exc).__name__}); the model may "
            f"be loading or overloaded; raise providers.{provider}.timeout_s if it is just slow"
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.NetworkError):
        return ProviderUnavailable(f"{who}: connection to {base_url} failed: {reason}")
    if isinstance(exc, httpx.ProxyError):
        return ProviderUnavailable(f"{who}: proxy failed for {base_url}: {reason}")
    if isinstance(exc, httpx.UnsupportedProtocol):
        # A configuration mistake; retrying cannot fix it.
        return ProviderBadRequest(
            f"{who}: cannot use {base_url}: {reason}; check providers.{provider}.base_url"
        )
    # Decoding errors, redirects, local protocol misuse: the answer is not usable.
    return ProviderProtocolError(f"{who}: bad answer from {base_url}: {reason}")


def retry_verdict(exc: BaseException) -> Retry | None:
    """The retry classifier for provider calls: transient errors are retried, a rate
    limit after the server's Retry-After when it gave one."""
    if isinstance(exc, ProviderError) and exc.retryable:
        return Retry(exc.retry_after if isinstance(exc, RateLimited) else None)
    return None


# Longest server-requested wait a turn sits through; beyond it the error goes to the user.
PROVIDER_MAX_RETRY_AFTER_S = 120.0
