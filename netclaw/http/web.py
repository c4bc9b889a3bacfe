"""HTTP plumbing shared by the control API and the webhook routes (aiohttp).

One error shape — ``{"error": {"code", "message"}}`` — produced by one middleware;
one reading of JSON bodies, ``?wait=`` and ``Idempotency-Key``; one answer to a
submitted message. Bad input is a 4xx naming what was wrong, never a 500.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from netclaw import outputs as out
from netclaw.cluster import keep_body, kept_body
from netclaw.errors import (
    ApiError,
    ApprovalError,
    IdempotencyKeyReused,
    InvalidInput,
    JournalError,
    NetclawError,
    OutcomeUnknown,
    SessionUnavailable,
)
from netclaw.gateway import Admission, Subscription, TurnOutcome
from netclaw.process import traces
from netclaw.security.redact import scrub_bytes

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY = 200
SSE_HEARTBEAT_S = 15.0
BODY_TIMEOUT_S = 30.0  # a request body must arrive within this (slow senders hold a connection)
IDEMPOTENCY_PREFIX = "idem:"  # a key's replay identity in the session
RETRY_AFTER_S = 5.0  # a 503's Retry-After when its cause does not know better

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(
    http_status: int,
    code: str,
    message: str,
    extra: Mapping[str, Any] | None = None,
    *,
    retry_after: float | None = None,
) -> web.Response:
    """The JSON error answer. A 503 always says when to try again (``Retry-After``,
    whole seconds): ``retry_after`` if the cause knows, else :data:`RETRY_AFTER_S`."""
    body = {"error": {"code": code, "message": message}, **(extra or {})}
    response = web.json_response(body, status=http_status)
    if http_status == 503:
        response.headers["Retry-After"] = retry_after_header(retry_after)
    return response


def retry_after_header(seconds: float | None = None) -> str:
    """``Retry-After`` in whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds if seconds is not None else RETRY_AFTER_S)))


def submission_response(admission: Admission, outcome: TurnOutcome | None) -> web.Response:
    """The answer to a submitted message: 202 once durable; with ``wait``, 200 and the reply,
    429 with ``Retry-After`` when a spend guard stopped the turn (it resets at UTC
    midnight), or 502 with the turn's error."""
    answer: dict[str, Any] = {"session_id": admission.session_id, "message_id": admission.message_id}
    if admission.duplicate:
        answer["duplicate"] = True
    if outcome is None:
        return web.json_response(answer, status=202)
    answer["turn"] = outcome.turn
    if outcome.status != "completed":
        err = outcome.error or {"code": "turn_failed", "message": f"the turn {outcome.status}"}
        extra = {**answer, "status": outcome.status}
        if err["code"] == "spend_limit":
            response = error_response(429, err["code"], err["message"], {**extra, "cap": err.get("cap")})
            if err.get("resets_at"):  # a sub-agent's budget never resets: no time to come back at
                response.headers["Retry-After"] = str(_seconds_until(err["resets_at"]))
            return response
        return error_response(502, err["code"], err["message"], extra)
    answer["reply"] = outcome.reply
    return web.json_response(answer, status=200)


def _seconds_until(when: str | None) -> int:
    """Whole seconds until an ISO-8601 time (at least 1; an hour when it is unknown)."""
    try:
        at = dt.datetime.fromisoformat(when or "").timestamp()
    except ValueError:
        return 3600
    return max(1, math.ceil(at - time.time()))


@web.middleware
async def trace_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A W3C ``traceparent`` the request came with is what the turn it admits continues
    (telemetry.traces; netclaw/process/traces.py). A malformed one is ignored."""
    with traces.received(request.headers):
        return await handler(request)


@web.middleware
async def scrub_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The last line of defence: no answer's body carries the daemon's own secrets (the
    control token, the config's secrets; :mod:`netclaw.security.redact`), whatever a transcript,
    an error or a listing holds. Outermost, so error answers are scrubbed too; streams
    scrub their events themselves (:class:`SseStreams`)."""
    response = await handler(request)
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        body = scrub_bytes(response.body)
        if body is not response.body:
            response.body = body
    return response


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure answered in the JSON error shape; only a bug is a 500."""
    try:
        return await handler(request)
    except ApiError as exc:
        response = error_response(exc.status, exc.code, exc.message)
        response.headers.update(exc.headers)
        return response
    except IdempotencyKeyReused as exc:
        return error_response(409, exc.code, str(exc))
    except ApprovalError as exc:
        return error_response(exc.status, exc.code, str(exc))
    except InvalidInput as exc:
        return error_response(400, "invalid_" + exc.field, str(exc))
    except OutcomeUnknown as exc:
        return _outcome_unknown(exc)
    except SessionUnavailable as exc:
        return error_response(503, exc.code, str(exc), retry_after=exc.retry_after)
    except JournalError as exc:
        log.error("journal error answering %s %s: %s", request.method, request.path, exc)
        return error_response(503, exc.code, f"the journal is unavailable: {exc}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, http_code(exc.status), exc.reason)
    except (web.RequestPayloadError, HttpProcessingError) as exc:  # a body aiohttp could not read
        return error_response(400, "invalid_body", f"the request body could not be read: {exc}")
    except NetclawError as exc:
        return error_response(500, exc.code, str(exc))
    except Exception as exc:
        if isinstance(exc, ConnectionError) and client_gone(request):
            raise  # the client hung up: no answer can reach it (the listener notes it at DEBUG)
        log.exception("unhandled error answering %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error; see the daemon log")


def client_gone(request: web.BaseRequest) -> bool:
    """Whether the client hung up (its connection is closed or closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _outcome_unknown(exc: OutcomeUnknown) -> web.Response:
    identity = exc.identity or ""
    if not identity.startswith(IDEMPOTENCY_PREFIX):
        return error_response(503, exc.code, str(exc), retry_after=1)
    key = identity[len(IDEMPOTENCY_PREFIX) :]
    message = (
        f"{exc}. Send the same request again with the header 'Idempotency-Key: {key}': if the "
        "message was recorded you get its answer, otherwise it is recorded then"
    )
    return error_response(503, exc.code, message, {"idempotency_key": key}, retry_after=1)


def http_code(status: int) -> str:
    return {
        400: "bad_request",
        401: "unauthorized",
        404: "not_found",
        405: "method_not_allowed",
        408: "request_timeout",
        413: "body_too_large",
        417: "expectation_failed",
        431: "headers_too_large",
        500: "internal",
    }.get(status, f"http_{status}")


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, within ``limit`` bytes and ``BODY_TIMEOUT_S``: 413 past the limit,
    408 for a sender too slow, 400 for a body that cannot be decoded (bad gzip)."""
    too_large = ApiError(413, "body_too_large", f"the body is larger than {limit} bytes")
    kept = kept_body(request)  # read already (several nodes: by an attempt to forward it)
    if kept is not None:
        if len(kept) > limit:
            raise too_large
        return kept
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            # Chunks arrive as they come (chunked or slow senders): read to the end, in the limit.
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, "body_timeout", f"the body did not arrive within {BODY_TIMEOUT_S:g}s") from None
    except (web.RequestPayloadError, HttpProcessingError) as exc:
        raise ApiError(400, "invalid_body", f"the request body could not be read: {exc}") from exc
    body = b"".join(chunks)
    keep_body(request, body)  # should the request be forwarded after all
    return body


def read_json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; ApiError 400 naming what is wrong."""
    if not raw.strip():
        raise ApiError(400, "invalid_json", "the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except ValueError as exc:  # also UnicodeDecodeError, and an integer past the digit limit
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "invalid_json", "the request body is not valid JSON: nested too deeply") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the request body must be a JSON object")
    return body


def flag(request: web.Request, name: str) -> bool:
    """A yes/no query flag: ``1``, ``true``, ``yes`` or bare (``?name``) is yes; ``0``,
    ``false``, ``no`` or absent is no; anything else is a 400 naming it."""
    value = request.query.get(name)
    if value is None:
        return False
    if value.lower() in ("1", "true", "yes", ""):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ApiError(400, f"invalid_{name}", f"{name} must be 1 or 0, not {value!r}")


def wait_flag(request: web.Request) -> bool:
    """``?wait=1`` and its spellings (see :func:`flag`)."""
    return flag(request, "wait")


def idempotency_key(request: web.Request) -> str:
    """The request's ``Idempotency-Key``, or a fresh one when it has none: every message
    has an identity, so an answer that was lost (a timeout, a dropped connection) can be
    retried safely with the key the error names."""
    header = request.headers.get("Idempotency-Key")
    if header is None:
        return f"auto-{uuid.uuid4().hex}"
    key = header.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable characters",
        )
    return key


def identity_for(key: str) -> str:
    return IDEMPOTENCY_PREFIX + key


# -- SSE: a session's outputs as a stream ---------------------------------------------------------


def sse_event(output: out.Output) -> bytes:
    """One SSE message: ``event: <name>`` and the output's payload as ``data:``."""
    data = json.dumps(out.payload(output), ensure_ascii=False, separators=(",", ":"))
    return f"event: {output.event}\ndata: {data}\n\n".encode()


class SseStreams:
    """The open SSE responses of one application, cancelled when it shuts down."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    async def serve(
        self,
        request: web.Request,
        session_id: str,
        subscription: Subscription,
        encode: Callable[[out.Output], bytes] = sse_event,
    ) -> web.StreamResponse:
        """Stream ``subscription`` until the client leaves or the session's stream ends (a
        subscriber that fell too far behind is told so); a comment every
        ``SSE_HEARTBEAT_S`` keeps proxies from closing an idle stream."""
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
        except ConnectionResetError:
            subscription.close()
            return response  # the client hung up before the stream began: nothing to undo
        except BaseException:
            subscription.close()
            raise
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                try:
                    output = await subscription.get(SSE_HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if output is None:
                    if subscription.overflowed:
                        message = "this stream fell too far behind and was closed; reconnect"
                        await response.write(
                            encode(
                                out.Error(session_id=session_id, code="subscriber_overflow", message=message)
                            )
                        )
                    break
                await response.write(scrub_bytes(encode(output)))  # see scrub_middleware
        except ConnectionResetError:
            pass  # the client went away; the finally unsubscribes it
        finally:
            subscription.close()
            if task is not None:
                self._tasks.discard(task)
        return response

    async def close_all(self, app: web.Application) -> None:
        for task in list(self._tasks):
            task.cancel()


def parse_since(text: str) -> float:
    """``since``: an ISO-8601 date or date-time (UTC unless it says otherwise)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ApiError(
            400,
            "invalid_since",
            f"since must be an ISO-8601 date or date-time (2026-11-01), not {text[:40]!r}",
        ) from exc
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
