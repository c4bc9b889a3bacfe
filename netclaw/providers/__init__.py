"""Chat model providers: the protocol, the OpenAI-compatible implementation, a factory."""

from __future__ import annotations

from netclaw.config import ProviderConfig, Settings
from netclaw.errors import ConfigError
from netclaw.providers._anthropic import AnthropicProvider
from netclaw.providers._base import (
    Completion,
    Delta,
    OnDelta,
    Provider,
    ProviderRequest,
    ToolSchema,
    Usage,
)
from netclaw.providers._classify import classify_http_error, classify_transport_error
from netclaw.providers._demo import DemoProvider
from netclaw.providers._http import HttpStreamingProvider
from netclaw.providers._openai import OpenAIProvider
from netclaw.providers._speech import Speech, Spoken

__all__ = [
    "AnthropicProvider",
    "Completion",
    "Delta",
    "DemoProvider",
    "HttpStreamingProvider",
    "OnDelta",
    "OpenAIProvider",
    "Provider",
    "ProviderRequest",
    "Speech",
    "Spoken",
    "ToolSchema",
    "Usage",
    "classify_http_error",
    "classify_transport_error",
    "make_provider",
    "make_providers",
]


def make_provider(name: str, config: ProviderConfig) -> Provider:
    """The provider for ``providers.<name>`` in the config."""
    if config.type == "openai":
        return OpenAIProvider(name, config)
    if config.type == "anthropic":
        return AnthropicProvider(name, config)
    if config.type == "demo":
        return DemoProvider(name, config)
    raise ConfigError(f"providers.{name}.type: unknown provider type {config.type!r}")


def make_providers(settings: Settings) -> dict[str, Provider]:
    """One provider for each ``providers.<name>`` some model uses (main, compaction,
    fallbacks and the models a person may pin), by name."""
    used = dict.fromkeys(model.provider for model in settings.models.named().values())
    return {name: make_provider(name, settings.providers[name]) for name in used}
