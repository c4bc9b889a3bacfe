"""Configuration: pydantic-settings models, loading and validation.

Sources, strongest first: ``NETCLAW_<SECTION>__<KEY>`` environment variables,
the JSON file (whole-line ``//`` comments allowed), built-in defaults. Unknown keys and
invalid values raise
:class:`~netclaw.errors.ConfigError` naming the key path. Secrets never live
in the file: keys ending in ``_env`` name an environment variable.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, TypeVar, cast, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from netclaw.commands import Command
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ConfigError
from netclaw.process.system import SYSTEM_CONFIG, state_directory

ENV_PREFIX = "NETCLAW_"
CONFIG_ENV = "NETCLAW_CONFIG"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Section = _Section  # a section's parts: unknown keys refused, frozen (adapters' sections use it too)


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an environment variable name; `*_env` keys name the "
            "variable that holds the secret, never the secret itself"
        )
    return value


check_env_name = _check_env_name  # for the sections declared beside their adapters


class ProviderConfig(_Section):
    # "demo": the built-in demo model (netclaw/providers/_demo.py), no server; base_url unused.
    type: Literal["openai", "anthropic", "demo"] = "openai"
    base_url: str = "http://127.0.0.1:11434/v1"
    api_key_env: str | None = None
    timeout_s: float = Field(180.0, gt=0)
    max_retries: int = Field(4, ge=0, le=10)
    # Provider prompt caching: Anthropic `cache_control` breakpoints, an OpenAI-compatible
    # per-session `prompt_cache_key`. `off` for a server that rejects fields it does not know.
    prompt_cache: Literal["auto", "off"] = "auto"
    cache_ttl: Literal["5m", "1h"] = "5m"  # Anthropic: how long a cached prefix lives

    _env = field_validator("api_key_env")(_check_env_name)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value.rstrip("/")

    def api_key(self) -> str | None:
        return read_secret(self.api_key_env) if self.api_key_env else None

    def missing_key(self) -> str | None:
        """What a person must do when ``api_key_env`` names a secret that is not set."""
        if self.api_key_env is None or self.api_key():
            return None
        return f"its key {self.api_key_env} is not set: {where_to_put(self.api_key_env)}"


class Price(_Section):
    """What a model costs per million tokens, in ``spend.currency``. A cached read or a
    cache write without its own price costs as much as input."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


class ModelConfig(_Section):
    provider: str = "local"
    model: str = "qwen3:8b"
    context_window: int = Field(32768, gt=0)
    max_output_tokens: int = Field(4096, gt=0)
    vision: bool = False  # reads images: attached ones go to it as image parts
    # Models (names under `models`) a turn goes on with, in order, when this one stays
    # rate-limited, overloaded, unavailable or silent after its retries.
    fallbacks: list[str] = []
    price: Price | None = None  # None: its tokens are counted, not priced

    @model_validator(mode="after")
    def _output_fits(self) -> ModelConfig:
        if self.max_output_tokens >= self.context_window:
            raise ValueError(
                f"max_output_tokens ({self.max_output_tokens}) must be smaller than "
                f"context_window ({self.context_window})"
            )
        return self


class ModelsConfig(_Section):
    """``main`` (what sessions use unless a person pins another), ``compaction`` (the
    summaries and memory flushes; main's when absent), and any other named models, for
    fallbacks and ``/model NAME``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, ModelConfig] = Field(init=False)

    main: ModelConfig = ModelConfig()
    compaction: ModelConfig | None = None

    @model_validator(mode="after")
    def _names_and_fallbacks(self) -> ModelsConfig:
        named = self.named()
        for name in named:
            if not _MODEL_NAME.fullmatch(name):
                raise ValueError(
                    f"model name {name!r}: use letters, digits, '_', '.' or '-' (at most 40), "
                    "starting with a letter or digit"
                )
            if name.lower() == "default":  # `/model default` means models.main
                raise ValueError("a model cannot be named 'default': /model default goes back to main")
        for name, model in named.items():
            for fallback in model.fallbacks:
                if fallback == name:
                    raise ValueError(f"{name}.fallbacks: a model cannot be its own fallback")
                if fallback not in named:
                    known = ", ".join(sorted(named))
                    raise ValueError(f"{name}.fallbacks: {fallback!r} is not a model here (models: {known})")
        return self

    def named(self) -> dict[str, ModelConfig]:
        """Every model by its name: ``main``, ``compaction`` when set, then the others."""
        found = {"main": self.main}
        if self.compaction is not None:
            found["compaction"] = self.compaction
        found.update(self.model_extra or {})
        return found

    def get(self, name: str) -> ModelConfig | None:
        return self.named().get(name)


class Transcriber(_Section):
    """One OpenAI-compatible ``/audio/transcriptions`` endpoint: the provider
    (``providers.<name>``: its base_url, key, timeout_s and max_retries) and the model."""

    provider: str
    model: str = "whisper-1"
    price_per_minute: float | None = Field(None, ge=0)  # None: counted, not priced


class TranscriptionConfig(Transcriber):
    """Speech-to-text for audio attachments (voice notes), before the turn that reads them."""

    language: str | None = Field(None, pattern=r"^[a-z]{2,3}$")  # a hint (ISO-639-1); None: detected
    # Endpoints tried in order when this one stays unreachable, rate-limited or overloaded.
    fallbacks: list[Transcriber] = []


class Synthesizer(_Section):
    """One OpenAI-compatible ``/audio/speech`` endpoint."""

    provider: str
    model: str = "tts-1"
    voice: str = Field("alloy", min_length=1, max_length=64)
    format: Literal["mp3", "opus", "aac", "flac", "wav"] = "mp3"
    price_per_million_chars: float | None = Field(None, ge=0)


class SynthesisConfig(Synthesizer):
    """Text-to-speech for spoken replies (``/voice on``, ``audiences.<name>.voice_replies``)."""

    fallbacks: list[Synthesizer] = []
    max_chars: int = Field(4000, ge=1, le=100_000)  # a longer reply is sent as text only


class SpeechConfig(_Section):
    transcription: TranscriptionConfig | None = None
    synthesis: SynthesisConfig | None = None
    max_audio_s: float = Field(600.0, gt=0)  # a longer recording is not transcribed (a notice says so)
    max_audio_bytes: int = Field(25_000_000, gt=0)  # OpenAI's own limit

    def endpoints(self) -> list[tuple[str, Transcriber | Synthesizer]]:
        """Every configured endpoint with its key path (for checks and messages)."""
        found: list[tuple[str, Transcriber | Synthesizer]] = []
        if self.transcription is not None:
            found.append(("speech.transcription", self.transcription))
            found += [
                (f"speech.transcription.fallbacks[{i}]", f)
                for i, f in enumerate(self.transcription.fallbacks)
            ]
        if self.synthesis is not None:
            found.append(("speech.synthesis", self.synthesis))
            found += [(f"speech.synthesis.fallbacks[{i}]", f) for i, f in enumerate(self.synthesis.fallbacks)]
        return found


class SessionConfig(_Section):
    compaction_threshold: float = Field(0.75, gt=0, le=1)
    keep_recent_tool_results: int = Field(3, ge=0)
    snapshot_interval: int = Field(20, ge=1)
    idle_timeout_s: float = Field(1800.0, gt=0)
    passivation_grace_s: float = Field(5.0, ge=0)
    max_tool_iterations: int = Field(25, ge=1)
    turn_timeout_s: float = Field(300.0, gt=0)
    max_resident_sessions: int = Field(1000, ge=1)
    compaction_timeout_s: float = Field(120.0, gt=0)  # extension: time budget of one compaction
    max_reminders: int = Field(50, ge=0)  # extension: reminders one session may have
    max_tokens_per_day: int | None = Field(None, gt=0)  # spend guard: provider tokens per UTC day
    # Sub-agents (spawn_agent): children running at once per session, how deep children may
    # spawn their own (0: no sub-agents), how long `wait: true` holds the parent's tool call
    # (kept under tools.call_timeout_s), and a child's token budget when the model names none.
    max_subagents: int = Field(4, ge=0)
    max_subagent_depth: int = Field(1, ge=0)
    subagent_wait_s: float = Field(90.0, gt=0)
    subagent_budget_tokens: int | None = Field(None, gt=0)
    max_cost_per_day: float | None = Field(None, gt=0)  # spend guard: money per UTC day (spend.currency)


class HistoryConfig(_Section):
    trim_budget_tokens: int | None = Field(None, gt=0)
    # A trim (over the budget) cuts down to this fraction of it, so the next trim — which
    # moves the start of the prompt and so breaks the provider's cache — is many turns away.
    low_water: float = Field(0.6, gt=0, le=1)


class MemoryConfig(_Section):
    """Durable memory (docs/memory.md). ``embeddings``: the model that gives each memory a
    vector for recall by meaning; ``minilm-l6`` (default) ships inside netclaw, so it works
    offline with nothing to download; ``none`` recalls by keywords only. Changing it
    re-embeds the memories in the background. ``max_per_audience``: the live memories an
    audience keeps."""

    embeddings: Literal["minilm-l6", "none"] = "minilm-l6"
    # Live memories an audience keeps: past it, a write forgets the least recently told,
    # confirmed or recalled ones (docs/memory.md). None: no cap.
    max_per_audience: int | None = Field(10_000, gt=0)


class SpendConfig(_Section):
    """The whole daemon's spend guard, per UTC day (each session's is under ``session``),
    and the currency the models' prices are in."""

    currency: str = Field("USD", min_length=1, max_length=8)
    max_tokens_per_day: int | None = Field(None, gt=0)
    max_cost_per_day: float | None = Field(None, gt=0)


class GatewayConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(5199, ge=0, le=65535)
    control_token_env: str | None = None
    # A second listener serving only the webhook routes, so they can face the internet
    # while the control API stays on host:port. Both or neither.
    webhook_host: str | None = None
    webhook_port: int | None = Field(None, ge=0, le=65535)

    _env = field_validator("control_token_env")(_check_env_name)

    @model_validator(mode="after")
    def _webhook_listener(self) -> GatewayConfig:
        if (self.webhook_host is None) != (self.webhook_port is None):
            raise ValueError("webhook_host and webhook_port: set both (a second listener) or neither")
        return self


class UiConfig(_Section):
    """The control room in a browser, under ``/ui`` on the control listener."""

    enabled: bool = True
    login_hours: float = Field(12.0, gt=0, le=720)  # how long a login lasts


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"
    libraries: Literal["debug", "info", "warning", "error"] = "warning"  # extension: library loggers

    @field_validator("level", "libraries", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class TelemetryConfig(_Section):
    """Traces of each turn over OTLP/HTTP (docs/telemetry.md); needs the ``telemetry`` extra.
    The standard ``OTEL_*`` variables apply (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ...); ``endpoint`` and
    ``service_name`` here are used when the environment names none."""

    traces: bool = False
    capture_content: bool = False  # message and tool text on spans (redacted); off: names, counts, times
    endpoint: str | None = None  # the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318
    service_name: str | None = None  # None: OTEL_SERVICE_NAME, else "netclaw"
    max_queue: int = Field(2048, ge=1, le=1_000_000)  # spans waiting for export; more are dropped, counted

    @field_validator("endpoint")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https:// (OTLP over HTTP)")
        return value

    def traces_url(self) -> str:
        """Where spans go, as the exporter decides it: ``endpoint``, else the standard
        variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is, ``OTEL_EXPORTER_OTLP_ENDPOINT``
        plus ``/v1/traces``), else ``http://localhost:4318/v1/traces``."""
        if self.endpoint:
            return self.endpoint.rstrip("/") + "/v1/traces"
        if found := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
            return found
        base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
        return base.rstrip("/") + "/v1/traces"


class DeliverConfig(_Section):
    channel: str  # a chat channel's name: slack, discord, or an installed one (telegram, ...)
    to: str = Field(min_length=1)  # a channel id

    @field_validator("channel")
    @classmethod
    def _chat_channel(cls, value: str) -> str:
        if not is_chat_channel(value):
            chats = ", ".join(sorted(k for k in {*_BUILT_IN_CHAT, *_CHANNEL_SECTIONS} if is_chat_channel(k)))
            raise ValueError(
                f"{value!r} is not a chat channel that can open a thread (chat channels: {chats})"
            )
        return value


class ChannelAccess(_Section):
    """Who may talk to the bot on a chat platform. Empty allowlists mean nobody."""

    channels: list[str] = []  # channel ids where the bot listens
    users: list[str] | None = None  # None: anyone in an allowed channel; else only these user ids
    require_mention: bool = True  # a thread starts only when the bot is mentioned
    allow_dms: bool = False
    # A session that starts mid-conversation first reads what came before, this much of it
    # (the newest messages that fit both bounds; 0 messages: none).
    thread_context_messages: int = Field(30, ge=0, le=1000)
    thread_context_tokens: int = Field(4000, ge=0)


# -- channel sections: declared beside their adapters ------------------------------------------


class ChannelSection(_Section):
    """A channel's own section of netclaw.json (``webhooks``, ``slack``, ``discord``).

    Its model is declared beside the adapter's code (``adapters/<channel>/_config.py``) and
    registered by the ``adapters`` package (:func:`register_channel_sections`), so the core
    never imports an adapter: :class:`Settings` names the sections and validates each with
    its adapter's model. What the core reads of a section is declared here, on the base."""

    key: ClassVar[str] = ""  # its key in netclaw.json
    restart_keys: ClassVar[tuple[str, ...]] = ()  # its keys a reload cannot change (used at start-up)

    def active(self) -> bool:
        """Does the config ask for this channel to run?"""
        return False

    def audience_of(self, session_id: str) -> Literal["personal", "team", "public"] | None:
        """The audience this section gives a session of its channel, when it says."""
        return None

    def check_environment(self) -> None:
        """Checks at load that read the environment (ConfigError naming the key path)."""

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """This section of ``settings``, as its adapter's model."""
        section = getattr(settings, cls.key, None)
        if not isinstance(section, cls):
            raise TypeError(
                f"settings.{cls.key} is a {type(section).__name__}, not a {cls.__name__}: "
                "were the settings made before the `adapters` package registered the section?"
            )
        return section


class ChatSection(ChannelAccess, ChannelSection):
    """A chat platform's section: whether it runs, and who may talk (the gateway's policy)."""

    enabled: bool = False

    def active(self) -> bool:
        return self.enabled


S = TypeVar("S", bound=ChannelSection)
_CHANNEL_SECTIONS: dict[str, type[ChannelSection]] = {}


def register_channel_sections(*models: type[ChannelSection]) -> None:
    """The channels' section models, each under its ``key``. A built-in channel's key is one
    of Settings' own sections (the model must be of its kind); an installed channel's key
    becomes a section of :func:`settings_model` (it must not be another setting's)."""
    for model in models:
        field = Settings.model_fields.get(model.key)
        base = field.annotation if field is not None else ChannelSection
        if not _SECTION_KEY.fullmatch(model.key):
            raise TypeError(f"{model.__name__}: {model.key!r} is not a section key (lowercase, a-z0-9_)")
        if field is not None and not (isinstance(base, type) and issubclass(base, ChannelSection)):
            raise TypeError(f"{model.__name__}: {model.key!r} is one of netclaw.json's own sections")
        if not (isinstance(base, type) and issubclass(model, base)):
            raise TypeError(
                f"{model.__name__}: netclaw.json has no channel section {model.key!r} of its kind"
            )
        known = _CHANNEL_SECTIONS.setdefault(model.key, model)
        if known is not model:
            raise TypeError(
                f"two models for the {model.key!r} section: {known.__name__} and {model.__name__}"
            )


def registered_channels() -> Mapping[str, type[ChannelSection]]:
    """Every registered channel section by key (built-in and installed)."""
    return dict(_CHANNEL_SECTIONS)


def is_chat_channel(name: str) -> bool:
    """Is ``name`` a chat platform's channel (its section a :class:`ChatSection`): sessions
    ``<name>:...``, speakers ``<name>:<user>``, replies owed through the outbox. Slack and
    Discord are, registered or not (the core must not depend on import order for them)."""
    model = _CHANNEL_SECTIONS.get(name)
    return name in _BUILT_IN_CHAT or (model is not None and issubclass(model, ChatSection))


def channel_section(settings: Settings, name: str) -> ChannelSection | None:
    """The section of channel ``name`` in ``settings``; None when no such channel is registered."""
    section = getattr(settings, name, None) if name in _CHANNEL_SECTIONS or name in _BUILT_IN_CHAT else None
    return section if isinstance(section, ChannelSection) else None


_SECTION_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
_BUILT_IN_CHAT = frozenset({"slack", "discord"})


def _section_default(key: str, base: type[S]) -> Callable[[], S]:
    """A section left out of the file: its adapter's defaults (the base's, unregistered)."""

    def make() -> S:
        return cast(type[S], _CHANNEL_SECTIONS.get(key, base))()

    return make


class _EnvSource(EnvSettingsSource):
    """The environment, with each channel section read as its adapter's model (so that a
    nested key such as ``NETCLAW_WEBHOOKS__ROUTES`` is parsed as JSON, as for any section)."""

    def explode_env_vars(
        self, field_name: str, field: FieldInfo, env_vars: Mapping[str, str | None]
    ) -> dict[str, Any]:
        model = _CHANNEL_SECTIONS.get(field_name)
        return super().explode_env_vars(
            field_name, FieldInfo.from_annotation(model) if model is not None else field, env_vars
        )


class AudienceConfig(_Section):
    tools: list[str] | None = None  # tool-name patterns (`*` globs); None: every tool
    memory_recall: bool = True
    approve: list[str] = []  # tool-name patterns whose calls wait for a person's decision
    approvers: list[str] = []  # platform user ids who may decide; empty: whoever may talk
    reminders: bool | None = None  # the model may schedule reminders; None: all but public
    subagents: bool | None = None  # the model may spawn sub-agents; None: all but public
    # Which memories a session recalls: those made where it is (`channel`: the same Slack
    # channel or Discord channel, the same person's DMs, the same webhook route), the whole
    # audience's (`audience`), or none.
    memory_scope: Literal["channel", "audience", "none"] = "channel"
    # May shell commands of this audience's sessions reach the network? None: tools.shell.network.
    shell_network: Literal["none", "host"] | None = None
    # Which skills (netclaw/skills) its sessions see in their index: all, none, or these names
    # (`*` globs). The index is left out where `tools` does not allow `load_skill`.
    skills: Literal["all", "none"] | list[str] = "all"
    # Replies also spoken (speech.synthesis) in this audience's conversations; `/voice on|off`
    # decides for one conversation.
    voice_replies: bool = False
    # A voice note's transcript is also shown in the conversation, under the note.
    show_transcripts: bool = False


class RoleConfig(_Section):
    """What the people and API tokens of one role may do (on top of what the audience of
    the session allows). ``members``: ``slack:U0123``, ``discord:1234``, ``token:NAME``,
    ``webhook:ROUTE`` — or globs such as ``slack:*``; an exact member beats a glob."""

    members: list[str] = []
    tools: list[str] | None = None  # tool-name patterns it may use; None: all the audience allows
    approve_tools: list[str] = []  # patterns whose calls wait for approval in this role's turns
    approve: bool = False  # may decide on other people's tool calls
    chat: bool = True  # may send messages that start turns
    commands: list[Command] | None = None  # the chat commands it may use; None: all
    memory: Literal["read_write", "read", "none"] = "read_write"  # remember / search_memory
    manage: bool = False  # delete sessions and memories, reminders of others (API)


class WebFetchConfig(_Section):
    enabled: bool = True
    allow_private_networks: bool = False
    max_bytes: int = Field(2_000_000, gt=0)
    timeout_s: float = Field(20.0, gt=0)


class WebSearchConfig(_Section):
    """``web_search``: one backend, chosen here. The URL is the operator's (a self-hosted
    SearXNG on a private address is fine: the SSRF rules guard what the model fetches,
    not this); the key comes through the usual secret resolution (``api_key_env``)."""

    enabled: bool = False
    backend: Literal["searxng", "brave", "tavily"] = "searxng"
    url: str | None = None  # searxng: the instance (required); brave, tavily: their API by default
    api_key_env: str | None = None  # brave and tavily: required
    max_results: int = Field(5, ge=1, le=20)
    max_snippet_chars: int = Field(300, ge=50, le=2000)
    timeout_s: float = Field(15.0, gt=0)

    _env = field_validator("api_key_env")(_check_env_name)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _complete(self) -> WebSearchConfig:
        if not self.enabled:
            return self
        if self.backend == "searxng" and self.url is None:
            raise ValueError(
                "url: the searxng backend needs the address of the instance (e.g. http://127.0.0.1:8888)"
            )
        if self.backend != "searxng" and self.api_key_env is None:
            raise ValueError(
                f"api_key_env: the {self.backend} backend needs the name of the environment variable "
                "holding its API key"
            )
        return self

    def api_key(self) -> str | None:
        return read_secret(self.api_key_env) if self.api_key_env else None


class FilesConfig(_Section):
    enabled: bool = True


class ShellConfig(_Section):
    enabled: bool = False
    timeout_s: float = Field(60.0, gt=0)
    max_output_bytes: int = Field(65536, gt=0)
    # Where commands run: a bubblewrap sandbox (read-only system, the workspace the only
    # writable path, no network, own PID/IPC/UTS namespaces), or — an explicit opt-out —
    # directly on the host as the daemon's user.
    sandbox: Literal["bwrap", "none"] = "bwrap"
    network: Literal["none", "host"] = "none"  # audiences.<name>.shell_network overrides it
    cpu_s: int = Field(60, gt=0)  # CPU seconds per process (RLIMIT_CPU)
    memory_mb: int = Field(2048, gt=0)  # address space per process (RLIMIT_AS)
    max_processes: int = Field(64, gt=0)  # processes in the sandbox (RLIMIT_NPROC)
    max_file_mb: int = Field(256, gt=0)  # largest file a command may write (RLIMIT_FSIZE)
    ro_paths: list[Path] = []  # more host paths the sandbox sees read-only (e.g. /opt/tools)
    # When the daemon runs as root, commands never do: they run as this uid/gid, which then
    # owns the workspace.
    sandbox_uid: int = Field(65534, gt=0)
    sandbox_gid: int = Field(65534, gt=0)

    @field_validator("ro_paths")
    @classmethod
    def _absolute(cls, value: list[Path]) -> list[Path]:
        for path in value:
            if not path.is_absolute():
                raise ValueError(f"{str(path)!r} must be an absolute path")
        return value


class ToolsConfig(_Section):
    workspace_dir: Path = Path("./workspace")  # relative to the config file
    web_fetch: WebFetchConfig = WebFetchConfig()
    web_search: WebSearchConfig = WebSearchConfig()
    files: FilesConfig = FilesConfig()
    shell: ShellConfig = ShellConfig()
    approval_timeout_s: float = Field(900.0, gt=0)
    call_timeout_s: float = Field(120.0, gt=0)  # extension: one tool call's limit (MCP: its own timeout_s)


_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


class McpOAuthConfig(_Section):
    """OAuth 2.1 for an HTTP server (authorization code + PKCE); ``netclaw mcp login NAME``
    stores its tokens. Without ``client_id`` the client registers itself (dynamic client
    registration)."""

    scopes: list[str] | None = None  # None: what the server's metadata asks for
    redirect_port: int = Field(33418, ge=0, le=65535)  # the login listens on 127.0.0.1:<port>/callback
    client_name: str = "netclaw"
    client_id: str | None = None  # a client registered beforehand
    client_secret_env: str | None = None  # its secret, if it has one

    _env = field_validator("client_secret_env")(_check_env_name)


class McpServerConfig(_Section):
    """One MCP server: ``command`` (+ ``args``) over stdio, or ``url`` (streamable HTTP, or
    the legacy HTTP+SSE transport with ``transport: "sse"``)."""

    command: str | None = None
    args: list[str] = []
    env_env: dict[str, str] = {}  # variable the server sees → variable of ours holding the value
    cwd: Path | None = None
    url: str | None = None
    transport: Literal["http", "sse"] = "http"  # for `url`: streamable HTTP, or HTTP+SSE (older servers)
    headers_env: dict[str, str] = {}  # HTTP header → variable holding its value
    oauth: McpOAuthConfig | None = None  # OAuth 2.1 (HTTP servers); `netclaw mcp login NAME`
    tools: list[str] | None = None  # allowlist of the server's own tool names; None: all
    timeout_s: float = Field(60.0, gt=0)  # one call
    trust_annotations: bool = True  # its readOnlyHint/destructiveHint decide approvals (docs/mcp.md)
    resources: bool = True  # its resources as <server>__list_resources / <server>__read_resource
    # The folders offered to it as its roots: true, the workspace (while the file or shell
    # tools are on); a list, those folders; false, none (a server keeps the directories it
    # was started with: server-filesystem replaces them with any roots it is offered).
    roots: bool | list[Path] = True
    elicitation: bool = True  # it may ask the person in the conversation (forms, links); public: declined
    sampling: bool = False  # it may ask the session's model, once a person allows each request
    # "auto": probe server/discover (2026-07-28) and fall back to the initialize handshake;
    # "legacy": the handshake only (protocol 2025-11-25 and older), for servers the probe upsets.
    protocol: Literal["auto", "legacy"] = "auto"
    enabled: bool = True  # extension

    @field_validator("env_env", "headers_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value.values():
            _check_env_name(name)
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (streamable HTTP)")
        if self.url is not None and (self.args or self.env_env or self.cwd is not None):
            raise ValueError("`args`, `env_env` and `cwd` are for stdio servers (`command`), not `url`")
        if self.command is not None and (self.headers_env or self.transport != "http" or self.oauth):
            raise ValueError(
                "`headers_env`, `transport` and `oauth` are for HTTP servers (`url`), not `command`"
            )
        return self


class ScheduleConfig(_Section):
    """One configured reminder: exactly one of ``cron``, ``every_s`` or ``at``."""

    cron: str | None = None
    every_s: float | None = Field(None, ge=60)
    at: str | None = None  # ISO-8601
    timezone: str = "UTC"
    text: str = Field(min_length=1)
    session: str | None = None
    deliver: DeliverConfig | None = None
    catch_up: Literal["latest", "all", "skip"] = "latest"

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Europe/Berlin'") from exc
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> ScheduleConfig:
        given = [k for k in ("cron", "every_s", "at") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of `cron`, `every_s` or `at` (got {', '.join(given) or 'none'})"
            )
        if self.session is None and self.deliver is None:
            raise ValueError("give `session` (a session id) and/or `deliver` (where to post)")
        if self.cron is not None and (len(self.cron.split()) != 5 or not croniter.is_valid(self.cron)):
            raise ValueError(f"`cron` {self.cron!r} is not a 5-field cron expression")
        if self.at is not None:
            try:
                dt.datetime.fromisoformat(self.at.replace("Z", "+00:00"))
            except ValueError as exc:
                raise ValueError(f"`at` {self.at!r} is not an ISO-8601 time") from exc
        return self


class SkillsConfig(_Section):
    """Skills in the Agent Skills folder format (netclaw/skills): each folder of ``dirs`` holds
    one folder per skill. On a duplicate name the first found wins (``dirs`` in order, then
    ``save_dir``, then the bundled examples). Changes on disk apply on SIGHUP."""

    dirs: list[Path] = []  # relative to the config file
    bundled: bool = False  # also the example skills that ship with netclaw
    max_description_chars: int = Field(1024, ge=1, le=1024)  # the format's limit; lower keeps the index small
    # Where `save_skill` writes a skill the agent made (every save waits for approval); None: no save_skill.
    save_dir: Path | None = None


class McpConfig(_Section):
    servers: dict[str, McpServerConfig] = {}
    # A server that fails is reconnected with full-jitter backoff from 1 s up to this.
    max_reconnect_delay_s: float = Field(60.0, ge=1.0)

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not _SERVER_NAME.fullmatch(name) or "__" in name:
                raise ValueError(
                    f"server name {name!r}: use letters, digits, '-' or single '_' (at most 32); "
                    "its tools appear as <server>__<tool>"
                )
        return value


# Per-audience defaults when `audiences` does not name one: a public session (webhooks)
# sees only harmless tools and never recalls memories.
DEFAULT_AUDIENCES: dict[str, AudienceConfig] = {
    "personal": AudienceConfig(),
    "team": AudienceConfig(),
    "public": AudienceConfig(tools=["current_time"], memory_recall=False, skills="none"),
}
_ANY_AUDIENCE = AudienceConfig()  # an audience named nowhere: the defaults throughout


class AgentConfig(_Section):
    """Extension: how the agent presents itself to the model."""

    system_prompt: str = (
        "You are netclaw, a helpful assistant living in a chat thread. "
        "Answer concisely. Use tools when they help."
    )


class JournalConfig(_Section):
    """Where the journal and the other stores live: the embedded SQLite file (default), or
    PostgreSQL (several nodes on one database) with the DSN in the variable ``dsn_env``
    names. ``synchronous``: durability of the SQLite journal. ``commit_delay_ms``: how long a
    commit may wait for other sessions' appends while many are mid-turn (0: never)."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    dsn_env: str | None = None
    synchronous: Literal["full", "normal"] = "full"
    commit_delay_ms: float = Field(5.0, ge=0, le=100)

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> JournalConfig:
        if self.backend == "postgres" and not self.dsn_env:
            raise ValueError(
                "dsn_env: journal.backend 'postgres' needs the name of the environment variable "
                'holding the PostgreSQL DSN (e.g. "NETCLAW_PG_DSN")'
            )
        return self

    def dsn(self) -> str:
        """The PostgreSQL DSN from the environment; ConfigError naming the variable if unset."""
        value = os.environ.get(self.dsn_env or "", "").strip()
        if not value:
            raise ConfigError(
                f"journal.dsn_env: the environment variable {self.dsn_env!r} is not set; "
                "set it to the PostgreSQL DSN (postgresql://user@host:5432/netclaw)"
            )
        return value


class ClusterConfig(_Section):
    """Several nodes on one PostgreSQL (only with ``journal.backend`` = ``postgres``):
    ``node_id`` (default: the host name), the URL other nodes reach this one at, how
    long a node's hold on a session lasts without renewal, how long a stopping node lets
    running turns finish (``drain_s``) and then still forwards (``drain_linger_s``), how long a request for a session whose node does
    not answer is held for its new node (``hold_s``, default ``lease_s`` + 2), and how the
    resident sessions are evened out across the nodes (``rebalance_*``)."""

    node_id: str | None = None
    advertise_url: str | None = None
    lease_s: float = Field(15.0, gt=0)
    drain_s: float = Field(30.0, ge=0)
    # After a drain on stop, what still reaches this node is forwarded for this long before
    # it stops listening: a load balancer's health check sees /healthz say "draining" first.
    drain_linger_s: float = Field(2.0, ge=0)
    hold_s: float | None = Field(None, ge=0)
    rebalance: bool = True
    rebalance_every_s: float = Field(10.0, gt=0)
    rebalance_batch: int = Field(8, ge=1)  # sessions one node moves away per round, at most

    @field_validator("advertise_url")
    @classmethod
    def _is_http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL other nodes can reach, got {value!r}")
        return value

    @property
    def node(self) -> str:
        return self.node_id or socket.gethostname()

    @property
    def hold_for_s(self) -> float:
        """How long a request waits for a session's node to answer or be replaced."""
        return self.hold_s if self.hold_s is not None else self.lease_s + 2


class Settings(BaseSettings):
    """The whole of ``netclaw.json``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    data_dir: Path = Path("./data")
    providers: dict[str, ProviderConfig] = {"local": ProviderConfig()}
    models: ModelsConfig = ModelsConfig()
    speech: SpeechConfig = SpeechConfig()
    session: SessionConfig = SessionConfig()
    history: HistoryConfig = HistoryConfig()
    memory: MemoryConfig = MemoryConfig()
    spend: SpendConfig = SpendConfig()
    gateway: GatewayConfig = GatewayConfig()
    webhooks: SerializeAsAny[ChannelSection] = Field(
        default_factory=_section_default("webhooks", ChannelSection)
    )
    slack: SerializeAsAny[ChatSection] = Field(default_factory=_section_default("slack", ChatSection))
    discord: SerializeAsAny[ChatSection] = Field(default_factory=_section_default("discord", ChatSection))
    audiences: dict[Literal["personal", "team", "public"], AudienceConfig] = {}
    agent: AgentConfig = AgentConfig()
    journal: JournalConfig = JournalConfig()
    cluster: ClusterConfig = ClusterConfig()
    tools: ToolsConfig = ToolsConfig()
    mcp: McpConfig = McpConfig()
    skills: SkillsConfig = SkillsConfig()
    schedules: dict[str, ScheduleConfig] = {}
    log: LogConfig = LogConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    ui: UiConfig = UiConfig()
    # Per-person permissions (netclaw/security/roles.py). Empty: everyone may do what the audience
    # allows. "admin" (the control token) may do everything; a role named "default" applies
    # to whoever no role lists.
    roles: dict[str, RoleConfig] = {}

    @field_validator("roles")
    @classmethod
    def _role_names(cls, value: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        for name in value:
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", name):
                raise ValueError(f"role name {name!r}: use 1-32 lowercase letters, digits, '_' or '-'")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file arrives as init kwargs; the environment must beat it.
        return (_EnvSource(settings_cls), init_settings)

    @field_validator("webhooks", "slack", "discord", mode="wrap")
    @classmethod
    def _channel_section(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """A channel section is validated with the model its adapter registered."""
        model = _CHANNEL_SECTIONS.get(info.field_name or "")
        if model is None:
            if isinstance(value, ChannelSection):
                return handler(value)
            raise PydanticCustomError(
                "channel_section",
                "no adapter declared this section (import `adapters` before loading settings)",
            )
        return handler(value if isinstance(value, model) else model.model_validate(value))

    @model_validator(mode="after")
    def _references_exist(self) -> Settings:
        for role, model in self.models.named().items():
            if model.provider not in self.providers:
                known = ", ".join(sorted(self.providers)) or "none"
                raise ValueError(
                    f"models.{role}.provider: {model.provider!r} is not a configured provider "
                    f"(configured: {known})"
                )
        for where, endpoint in self.speech.endpoints():
            provider = self.providers.get(endpoint.provider)
            if provider is None:
                known = ", ".join(sorted(self.providers)) or "none"
                raise ValueError(
                    f"{where}.provider: {endpoint.provider!r} is not a configured provider (configured: {known})"
                )
            if provider.type != "openai":
                raise ValueError(
                    f"{where}.provider: {endpoint.provider!r} is of type {provider.type!r}; speech "
                    'endpoints are OpenAI-compatible (type "openai")'
                )
        if (
            self.journal.backend == "postgres"
            and self.cluster.advertise_url is not None
            and not self.gateway.control_token_env
        ):
            raise ValueError(
                "cluster.advertise_url: nodes forward requests to each other with the control "
                "token, so every node needs the same one: set gateway.control_token_env on each"
            )
        return self

    # Derived values, so the rule lives in one place.
    @property
    def trim_budget_tokens(self) -> int:
        return self.trim_budget_of(self.models.main)

    def trim_budget_of(self, model: ModelConfig) -> int:
        """What the model-visible history may take of ``model``'s window (the configured
        budget never more than the window leaves for the answer)."""
        room = model.context_window - model.max_output_tokens
        configured = self.history.trim_budget_tokens
        return min(configured, room) if configured is not None else room

    def audience(self, name: str) -> AudienceConfig:
        # Asked several times a turn: an unknown audience's defaults are built once, not per call.
        found = self.audiences.get(name) or DEFAULT_AUDIENCES.get(name)  # type: ignore[call-overload]
        return found if found is not None else _ANY_AUDIENCE

    @property
    def compaction_model(self) -> ModelConfig:
        return self.models.compaction or self.models.main

    @property
    def database_path(self) -> Path:
        return self.data_dir / "netclaw.db"


_MODELS: dict[tuple[tuple[str, type[ChannelSection]], ...], type[Settings]] = {}


def settings_model() -> type[Settings]:
    """The model of netclaw.json: :class:`Settings` plus a section for each installed
    channel registered beyond the built-in ones (``telegram``, ...), so their keys are
    validated, read from ``NETCLAW_<KEY>__...`` and refused when mistyped like any other."""
    extra = tuple((k, m) for k, m in _CHANNEL_SECTIONS.items() if k not in Settings.model_fields)
    if not extra:
        return Settings
    model = _MODELS.get(extra)
    if model is None:
        fields: dict[str, Any] = {
            key: (SerializeAsAny[section], Field(default_factory=section))  # type: ignore[misc,valid-type]
            for key, section in extra
        }
        model = create_model("Settings", __base__=Settings, __module__=__name__, **fields)
        _MODELS[extra] = model
    return model


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """``--config``, else ``$NETCLAW_CONFIG``, else ./netclaw.json, else
    ~/.config/netclaw/netclaw.json, else the system config (/etc/netclaw/netclaw.json)."""
    if explicit:
        return Path(explicit)
    if env := os.environ.get(CONFIG_ENV):
        return Path(env)
    for candidate in (
        Path("netclaw.json"),
        Path.home() / ".config" / "netclaw" / "netclaw.json",
        SYSTEM_CONFIG,
    ):
        if candidate.is_file():
            return candidate
    return None


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    explicit: bool | None = None,
    secret_names: tuple[str, ...] = (),
) -> Settings:
    """Load config from ``path`` (or the usual places) plus the environment.

    An explicitly named file that does not exist is an error; with no file at
    all, built-in defaults apply. ``secret_names``: variables a command names on its
    own (``--dsn-env``), which are secrets, never config overrides.
    """
    if explicit is None:
        explicit = path is not None or CONFIG_ENV in os.environ
    found = find_config_path(path)
    data: dict[str, Any] = {}
    if found is not None:
        data = _read_json(found, must_exist=explicit)
    try:
        settings = settings_model()(**data)
    except ValidationError as exc:
        _reject_unknown_env_names(data, secret_names)  # a mistyped override explains the failure better
        where = f" in {found}" if found else ""
        raise ConfigError(
            f"invalid configuration{where}:\n{format_validation_error(exc, settings_model())}"
        ) from exc
    _reject_unknown_env_names(settings.model_dump(mode="json"), secret_names)
    settings = _resolve_paths(settings, data, found)
    for key in _CHANNEL_SECTIONS:
        getattr(settings, key).check_environment()
    return settings


def _resolve_paths(settings: Settings, data: Mapping[str, Any], found: Path | None) -> Settings:
    """Absolute ``data_dir`` and ``tools.workspace_dir``. A relative path in a file is
    relative to that file; under a service (:func:`netclaw.process.system.state_directory`) the
    state directory is the data_dir unless an absolute one is given, and a relative
    workspace lives inside it (see :mod:`netclaw.process.system`)."""
    state_dir = state_directory(found if found is not None and found.is_file() else None)
    from_env = "NETCLAW_DATA_DIR" in os.environ
    data_dir = settings.data_dir
    if data_dir.is_absolute():
        pass
    elif from_env:
        data_dir = data_dir.resolve()
    elif state_dir is not None:
        data_dir = state_dir
    elif found is not None and data.get("data_dir") is not None:
        data_dir = (found.resolve().parent / data_dir).resolve()  # relative to the file
    else:
        data_dir = data_dir.resolve()
    workspace = settings.tools.workspace_dir
    if not workspace.is_absolute():
        if state_dir is not None:
            base = state_dir
        else:
            base = found.resolve().parent if found is not None else Path.cwd()
        workspace = (base / workspace).resolve()
    tools = settings.tools.model_copy(update={"workspace_dir": workspace})
    settings = settings.model_copy(update={"data_dir": data_dir, "tools": tools})
    # Skill folders: relative to the config file (or the working directory without one).
    base = found.resolve().parent if found is not None else Path.cwd()
    skills = settings.skills
    save_dir = skills.save_dir
    placed = skills.model_copy(
        update={
            "dirs": [(base / d).resolve() for d in skills.dirs],
            "save_dir": (base / save_dir).resolve() if save_dir is not None else None,
        }
    )
    if placed != skills:
        settings = settings.model_copy(update={"skills": placed})
    # MCP servers' listed roots: relative to the config file too.
    servers = {
        name: server.model_copy(update={"roots": [(base / r).expanduser().resolve() for r in server.roots]})
        for name, server in settings.mcp.servers.items()
        if isinstance(server.roots, list)
    }
    if servers:
        mcp = settings.mcp.model_copy(update={"servers": {**settings.mcp.servers, **servers}})
        settings = settings.model_copy(update={"mcp": mcp})
    return settings


def _read_json(path: Path, *, must_exist: bool) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        if must_exist:
            raise ConfigError(f"config file {path} does not exist") from exc
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        data = json.loads(strip_comments(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object at the top level")
    return data


def strip_comments(text: str) -> str:
    """Whole lines whose first non-blank characters are ``//`` are comments (``netclaw init``
    writes some). They become blank lines, so error positions still match the file; a JSON
    string cannot span lines, so no string is touched."""
    return "\n".join("" if line.lstrip().startswith("//") else line for line in text.split("\n"))


# Never config overrides: the names of secrets (see secret_env_names) and these prefixes.
RESERVED_ENV_PREFIXES = ("NETCLAW_SECRET_", "NETCLAW_BENCH_")


def secret_env_names(data: Any) -> set[str]:
    """Every variable a ``*_env`` key names (``api_key_env``, ``env_env``'s values, …),
    upper-cased, with its ``_FILE`` twin: these hold secrets, whatever they are called."""
    names = _env_key_values(data)
    return names | {f"{n}_FILE" for n in names}


def _env_key_values(data: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(data, Mapping):
        for key, value in data.items():
            if str(key).endswith("_env"):
                values = value.values() if isinstance(value, Mapping) else [value]
                names.update(str(v).upper() for v in values if isinstance(v, str))
            else:
                names |= _env_key_values(value)
    elif isinstance(data, list):
        for item in data:
            names |= _env_key_values(item)
    return names


def _reject_unknown_env_names(data: Mapping[str, Any], secret_names: tuple[str, ...] = ()) -> None:
    """A ``NETCLAW_*`` variable is a config override unless it is ``NETCLAW_CONFIG``, a
    secret's variable (named by a ``*_env`` key of this config, or by the command), or under
    a reserved prefix (``NETCLAW_SECRET_``, ``NETCLAW_BENCH_``). An override must name a
    key: a typo stops start-up instead of being ignored."""
    known = {name.upper() for name in settings_model().model_fields}
    secrets = secret_env_names(data) | {n.upper() for n in secret_names}
    # An override of a *_env key names a secret too (NETCLAW_GATEWAY__CONTROL_TOKEN_ENV=NETCLAW_TOKEN).
    secrets |= {
        value.strip().upper()
        for name, value in os.environ.items()
        if name.upper().startswith(ENV_PREFIX) and name.upper().endswith("_ENV")
    }
    secrets |= {f"{n}_FILE" for n in secrets}
    for name in os.environ:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV or upper in secrets:
            continue
        if upper.startswith(RESERVED_ENV_PREFIXES):
            continue
        section = upper[len(ENV_PREFIX) :].split("__", 1)[0]
        if section not in known:
            raise ConfigError(
                f"environment variable {name}: {section.lower()!r} is not a config key "
                f"(known: {', '.join(sorted(k.lower() for k in known))}). Overrides are "
                "NETCLAW_<SECTION>__<KEY>; a secret may have any NETCLAW_ name that a *_env key "
                "of the config names, or one starting NETCLAW_SECRET_"
            )


def format_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = _keys_at(model, err["loc"][:-1]) if model is not None else []
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            lines.append(f"  {path}: unknown key" + (f" (did you mean {close[0]!r}?)" if close else ""))
        else:
            lines.append(f"  {path}: {err['msg']}")
    return "\n".join(lines)


def _keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys a config section at ``loc`` accepts ([] where that is not a known section)."""
    for depth, part in enumerate(loc):
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        inner = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type)]
        models = [a for a in inner if issubclass(a, BaseModel)]
        if depth == 0 and str(part) in _CHANNEL_SECTIONS:  # declared as ChatSection, read as its own
            models = [_CHANNEL_SECTIONS[str(part)]]
        if not models:
            return []
        model = models[0]
    return list(model.model_fields)


def redacted(settings: Settings) -> Mapping[str, Any]:
    """The effective config as JSON-able data (it holds no secrets by design)."""
    return settings.model_dump(mode="json")


# -- the running config and reloads -------------------------------------------------------------

# Key paths a reload cannot change in a running daemon: what they configure was opened,
# bound or connected at start-up. Everything else applies at once.
RESTART_KEYS = (
    "data_dir",
    "gateway",
    "providers",
    "models",
    "journal",
    # ... and each channel section's restart_keys (ChannelSection), e.g. "slack.bot_token_env".
    "tools.workspace_dir",  # the built-in tools are built once at start-up
    "tools.web_fetch",
    "tools.web_search",
    "tools.files",
    "tools.shell",
    "mcp",  # servers are started and supervised from start-up
    "cluster",  # the node's membership, leases and rebalancer are built at start-up
    "ui",  # the control room's routes and login lifetime are set up at start-up
    "telemetry",  # the tracer and its exporter are built at start-up
    "memory",  # the memory store opens with its embeddings; a new model re-embeds after the restart
)


def changed_keys(old: Settings, new: Settings) -> list[str]:
    """Dotted key paths whose values differ (down to a section's own keys)."""
    return _diff(old.model_dump(mode="json"), new.model_dump(mode="json"), "")


def _diff(old: Any, new: Any, prefix: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict) and prefix.count(".") < 2:
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                found.append(path)
            elif old[key] != new[key]:
                found.extend(_diff(old[key], new[key], path))
        return found
    return [prefix] if old != new else []


def restart_keys() -> tuple[str, ...]:
    """Every key path a reload cannot change: RESTART_KEYS and the channel sections' own."""
    own = (f"{key}.{name}" for key, model in _CHANNEL_SECTIONS.items() for name in model.restart_keys)
    return (*RESTART_KEYS, *own)


def needs_restart(key: str, extra: tuple[str, ...] = ()) -> bool:
    return any(key == k or key.startswith(k + ".") for k in (*restart_keys(), *extra))


@dataclass(frozen=True, slots=True)
class Reload:
    """What a reload changed: what applied at once, and what waits for a restart."""

    applied: tuple[str, ...]
    restart: tuple[str, ...]

    def describe(self) -> str:
        if not self.applied and not self.restart:
            return "config reloaded: nothing changed"
        parts = [f"applied: {', '.join(self.applied) or 'nothing'}"]
        if self.restart:
            parts.append(f"needs a restart (running values kept): {', '.join(self.restart)}")
        return "config reloaded; " + "; ".join(parts)


class LiveSettings:
    """The running configuration. A reload swaps it; every component reads
    :attr:`current` when it needs a value, so whatever can change live does. Keys that
    need a restart keep their running values until then, so nothing reads a port or a
    provider the daemon is not actually using."""

    __slots__ = ("_current",)

    def __init__(self, settings: Settings) -> None:
        self._current = settings

    @property
    def current(self) -> Settings:
        return self._current

    def reload(self, new: Settings, *, restart_keys: tuple[str, ...] = ()) -> Reload:
        """Apply ``new``; ``restart_keys`` adds keys the caller cannot apply live."""
        old = self._current
        changed = changed_keys(old, new)
        restart = tuple(k for k in changed if needs_restart(k, restart_keys))
        applied = tuple(k for k in changed if k not in restart)
        self._current = _keep_running(old, new, restart)
        return Reload(applied, restart)


def _keep_running(old: Settings, new: Settings, restart: tuple[str, ...]) -> Settings:
    """``new`` with the values at ``restart`` paths taken from ``old``."""
    data = new.model_dump()
    running = old.model_dump()
    for path in restart:
        *parents, leaf = path.split(".")
        target, source = data, running
        for part in parents:
            target, source = target[part], source[part]
        if leaf in source:
            target[leaf] = source[leaf]
        else:
            target.pop(leaf, None)
    return type(old).model_validate(data) if data != running else old
