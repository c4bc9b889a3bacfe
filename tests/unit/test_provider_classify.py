"""Error classification and the retry loop shared by all providers."""

from __future__ import annotations

import json
from email.utils import formatdate

import httpx
import pytest

from netclaw.errors import (
    ContextOverflow,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderProtocolError,
    ProviderUnavailable,
    RateLimited,
)
from netclaw.providers._classify import (
    classify_http_error,
    classify_transport_error,
    parse_retry_after,
)


def openai_body(message: str, code: str | None = None, type_: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


# --------------------------------------------------------------------------- overflow

OVERFLOW_BODIES = {
    "openai-code": openai_body("Input is too big.", code="context_length_exceeded"),
    "openai-message": openai_body(
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens. Please reduce the length of the messages."
    ),
    "anthropic": json.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 208310 tokens > 200000 maximum",
            },
        }
    ),
    "ollama-native": json.dumps({"error": "context length exceeded"}),
    "ollama-window": openai_body("the input exceeds the context window of the model", None),
    "ollama-input": json.dumps({"error": "the input length exceeds the context length"}),
    "vllm-old": json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    ),
    "vllm-longer": openai_body(
        "The decoder prompt (length 5000) is longer than the model's context length (4096)."
    ),
    "vllm-v1": openai_body(
        "The prompt (total length 5000) is too long to fit into the model (context length "
        "4096). Make sure that `max_model_len` is no smaller than the number of text tokens."
    ),
    "llamacpp": json.dumps(
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 5000,
                "n_ctx": 4096,
            }
        }
    ),
    "llamacpp-type-only": json.dumps(
        {"error": {"code": 400, "message": "too bad", "type": "exceed_context_size_error"}}
    ),
    "llamacpp-old": json.dumps(
        {"error": {"code": 500, "message": "input is larger than the max context size"}}
    ),
    "llamacpp-n_ctx": "prompt tokens (5000) exceed n_ctx (4096)",
    "llama-cpp-python": openai_body("Requested tokens (5000) exceed context window of 4096"),
}


@pytest.mark.parametrize("family", sorted(OVERFLOW_BODIES))
@pytest.mark.parametrize("status", [400, 500])
def test_overflow_per_server_family(family: str, status: int) -> None:
    err = classify_http_error(status, OVERFLOW_BODIES[family], {}, "local")
    assert isinstance(err, ContextOverflow), (family, err)
    assert not err.retryable
    assert "'local'" in str(err)
    assert f"HTTP {status}" in str(err)


@pytest.mark.parametrize(
    "message",
    [
        "invalid value for context size parameter",
        "n_ctx must be positive",
        "model not found",
    ],
)
def test_near_misses_are_not_overflow(message: str) -> None:
    err = classify_http_error(400, openai_body(message), {}, "local")
    assert type(err) is ProviderBadRequest


def test_413_is_terminal_bad_request() -> None:
    body = json.dumps({"type": "error", "error": {"type": "request_too_large", "message": "big"}})
    err = classify_http_error(413, body, {}, "claude")
    assert type(err) is ProviderBadRequest
    assert "too large for the provider" in str(err)
    assert not err.retryable


# --------------------------------------------------------------------------- other statuses


def test_rate_limited_with_retry_after_seconds() -> None:
    body = openai_body(
        "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.",
        code="rate_limit_exceeded",
        type_="tokens",
    )
    err = classify_http_error(429, body, {"Retry-After": "7"}, "openai")
    assert isinstance(err, RateLimited)
    assert err.retry_after == 7.0
    assert err.retryable
    assert "HTTP 429" in str(err)


def test_rate_limited_headers() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"RETRY-AFTER": "0.25"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    now = 1_700_000_000.0
    date = formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    err = classify_http_error(429, "slow down", httpx.Headers({"Retry-After-Ms": "200"}), "x")
    assert isinstance(err, RateLimited)
    assert err.retry_after == 0.2
    no_header = classify_http_error(429, "slow down", {}, "x")
    assert isinstance(no_header, RateLimited)
    assert no_header.retry_after is None


def test_insufficient_quota_is_not_retried() -> None:
    body = openai_body("You exceeded your current quota.", code="insufficient_quota")
    err = classify_http_error(429, body, {"Retry-After": "1"}, "openai")
    assert type(err) is ProviderBadRequest
    assert "quota" in str(err)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors(status: int) -> None:
    body = openai_body("Incorrect API key provided.", code="invalid_api_key")
    err = classify_http_error(status, body, {}, "openai", api_key_env="OPENAI_API_KEY")
    assert isinstance(err, ProviderAuthError)
    assert not err.retryable
    assert "OPENAI_API_KEY" in str(err)
    assert "Incorrect API key provided." in str(err)
    bare = classify_http_error(status, body, {}, "openai")
    assert "providers.openai.api_key_env" in str(bare)


@pytest.mark.parametrize("status", [408, 500, 502, 503, 504, 529])
def test_transient_statuses(status: int) -> None:
    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}})
    err = classify_http_error(status, body, {}, "claude")
    assert isinstance(err, ProviderUnavailable)
    assert err.retryable
    assert f"HTTP {status}" in str(err)
    assert "Busy" in str(err)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_4xx_bad_request(status: int) -> None:
    err = classify_http_error(status, json.dumps({"error": "model 'x' not found"}), {}, "ollama")
    assert type(err) is ProviderBadRequest
    assert "model 'x' not found" in str(err)


def test_unexpected_status_is_protocol_error() -> None:
    assert isinstance(classify_http_error(302, "", {}, "x"), ProviderProtocolError)


def test_raw_body_truncated() -> None:
    err = classify_http_error(502, "<html>" + "x" * 2000 + "</html>", {}, "proxy")
    assert isinstance(err, ProviderUnavailable)
    assert "<html>xxx" in str(err)
    assert len(str(err)) < 420


def test_empty_body() -> None:
    assert "(empty body)" in str(classify_http_error(500, "", {}, "x"))


# --------------------------------------------------------------------------- transport errors


def test_transport_errors() -> None:
    url = "http://127.0.0.1:9/v1"
    refused = classify_transport_error(httpx.ConnectError("Connection refused"), "local", url)
    assert isinstance(refused, ProviderUnavailable)
    assert f"cannot reach {url}" in str(refused)
    assert "is the server running?" in str(refused)
    timeout = classify_transport_error(httpx.ReadTimeout(""), "local", url, timeout_s=30)
    assert isinstance(timeout, ProviderUnavailable)
    assert "30 s" in str(timeout)
    assert "timeout_s" in str(timeout)
    connect_timeout = classify_transport_error(httpx.ConnectTimeout(""), "local", url)
    assert isinstance(connect_timeout, ProviderUnavailable)
    dropped = classify_transport_error(httpx.RemoteProtocolError("peer closed"), "local", url)
    assert isinstance(dropped, ProviderUnavailable)
    decoding = classify_transport_error(httpx.DecodingError("bad gzip"), "local", url)
    assert isinstance(decoding, ProviderProtocolError)
    scheme = classify_transport_error(httpx.UnsupportedProtocol("ftp"), "local", url)
    assert type(scheme) is ProviderBadRequest
