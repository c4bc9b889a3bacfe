"""The webhook channel: ``POST /webhooks/{route}`` for each route in ``webhooks.routes``.

- ``_config``: the ``webhooks`` config section (:class:`WebhooksConfig`, its routes).
- ``_adapter``: :class:`WebhookAdapter` — authentication, limits, JSON paths,
  idempotency, delivery — imported on first use (this face stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.webhook._config import WebhookAuth, WebhookRoute, WebhooksConfig

if TYPE_CHECKING:
    from adapters.webhook._adapter import WebhookAdapter, json_path, session_key

__all__ = [
    "CHANNEL",
    "WebhookAdapter",
    "WebhookAuth",
    "WebhookRoute",
    "WebhooksConfig",
    "json_path",
    "session_key",
]

__getattr__ = lazy_names(
    __name__, {"WebhookAdapter": "_adapter", "json_path": "_adapter", "session_key": "_adapter"}
)

CHANNEL = Channel(
    name="webhooks",
    section=WebhooksConfig,
    adapter="adapters.webhook._adapter:WebhookAdapter",
    # A request is a conversation (or continues one by its key); the answer is the HTTP
    # response or a delivery to a chat channel; approvals go through the control API.
    capabilities=Capabilities(conversations="requests", approvals="api"),
    summary="POST /webhooks/<route>: each route's requests become sessions",
    docs="docs/http-api.md",
)
