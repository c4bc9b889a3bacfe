"""Slack's Web API, one call at a time, translated into netclaw's errors (slack-sdk and
aiohttp exceptions never leave ``adapters/slack/``).

- Rate limits: a ``429``/``ratelimited`` answer becomes a transient
  :class:`~adapters.chat.ChatApiError` carrying Slack's ``Retry-After``, which the
  caller's retries (:mod:`netclaw.retry`) honour; meanwhile further calls of the same
  method wait out the window here, so concurrent renderers do not hammer it.
- Lost answers: a call that is not idempotent (``chat.postMessage``) and whose answer was
  lost raises :class:`ResponseLost`, so that the caller looks before posting again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.chat import ChatApiError, retry_verdict
from netclaw.retry import RetryPolicy, with_retries

log = logging.getLogger("adapters.slack")

DEFAULT_API_URL = "https://slack.com/api/"
MAX_RETRY_AFTER_S = 300.0
START_POLICY = RetryPolicy(
    max_retries=3, base_delay_s=0.5, max_delay_s=5.0, max_retry_after_s=MAX_RETRY_AFTER_S
)


class SlackCallFailed(ChatApiError):
    """A Web API call answered ``ok: false``; ``error`` is Slack's error code."""

    code = "slack_api_error"

    def __init__(
        self, method: str, error: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        rate_limited = status == 429 or error == "ratelimited"
        super().__init__(
            f"Slack {method} failed: {error}",
            status=404 if error in ("message_not_found", "thread_not_found") else status,
            retry_after=retry_after,
            transient=rate_limited or (status is not None and status >= 500),
        )
        self.method = method
        self.error = error


class ResponseLost(ChatApiError):
    """The request may have reached Slack, but its answer did not reach us."""


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            try:
                return max(float(value), 0.0)
            except (TypeError, ValueError):
                break
    return 1.0


def field_of(response: Any, key: str) -> Any:
    """A field of a Web API answer; None when the answer has no JSON body."""
    try:
        return response.get(key)
    except (AttributeError, TypeError, ValueError):  # a response without a JSON body
        return None


class SlackApi:
    """A logged-in Web API client, called through :meth:`call` (once) or
    :meth:`call_retrying` (an idempotent call, retried)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._not_before: dict[str, float] = {}  # method -> monotonic time its rate limit ends

    async def call(
        self,
        method: str,
        send: Callable[..., Awaitable[AsyncSlackResponse]],
        *,
        idempotent: bool = True,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """One Web API call, translated: SlackCallFailed (transient for rate limits and
        5xx), ResponseLost when a non-idempotent request may have landed, a transient
        ChatApiError for a failure that sent nothing (or harmlessly)."""
        wait = self._not_before.get(method, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            return await send(**kwargs)
        except SlackApiError as exc:
            response: Any = exc.response
            status = getattr(response, "status_code", None)
            error = str(field_of(response, "error") or f"HTTP {status}")
            retry_after = None
            if status == 429 or error == "ratelimited":
                retry_after = _retry_after(getattr(response, "headers", None))
                self._not_before[method] = time.monotonic() + min(retry_after, MAX_RETRY_AFTER_S)
                log.info("slack: %s rate limited for %.1fs", method, retry_after)
            raise SlackCallFailed(method, error, status=status, retry_after=retry_after) from exc
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            raise ChatApiError(f"cannot reach Slack for {method}: {exc}", transient=True) from exc
        except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
            if not idempotent:
                raise ResponseLost(f"Slack {method}: the answer was lost ({type(exc).__name__})") from exc
            raise ChatApiError(f"Slack {method} failed: {type(exc).__name__}: {exc}", transient=True) from exc

    async def call_retrying(
        self, method: str, send: Callable[..., Awaitable[AsyncSlackResponse]], **kwargs: Any
    ) -> AsyncSlackResponse:
        """An idempotent call, retried like every platform call (start-up, lookups)."""
        return await with_retries(
            partial(self.call, method, send, **kwargs),
            classify=retry_verdict,
            policy=START_POLICY,
            what=f"slack: {method}",
            logger=log,
        )
