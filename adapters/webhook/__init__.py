"""The webhook channel: ``POST /webhooks/{route}`` for each route in ``webhooks.routes``.

- ``_config``: the ``webhooks`` config section (:class:`WebhooksConfig`, its routes).
- ``_adapter``: :class:`WebhookAdapter` — authentication, limits, JSON paths,
  idempotency, delivery — imported on first use (this face stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.webhook._config import WebhookAuth, WebhookRoute, WebhooksConfig

if TYPE_CHECKING:
    from adapters.webhook._adapter import WebhookAdapter, json_path, session_key

__all__ = ["WebhookAdapter", "WebhookAuth", "WebhookRoute", "WebhooksConfig", "json_path", "session_key"]

__getattr__ = lazy_names(
    __name__, {"WebhookAdapter": "_adapter", "json_path": "_adapter", "session_key": "_adapter"}
)
