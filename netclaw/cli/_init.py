"""``netclaw init``: a commented starter ``netclaw.json``, a check of the provider, and
the next steps. Asks for what it was not told unless ``--yes``; never overwrites a file
without ``--force``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from netclaw.config import ProviderConfig, load_settings
from netclaw.credentials import read_secret, where_to_put
from netclaw.errors import NetclawError

CHECK_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Choice:
    provider: str  # "openai" (any OpenAI-compatible server) or "anthropic"
    base_url: str
    model: str
    api_key_env: str | None
    context_window: int

    @property
    def local(self) -> bool:
        return urlsplit(self.base_url).hostname in ("127.0.0.1", "localhost", "::1")


def defaults(provider: str, base_url: str | None) -> Choice:
    """What a starter config uses when not told otherwise."""
    if provider == "anthropic":
        return Choice(
            "anthropic",
            base_url or "https://api.anthropic.com",
            "claude-sonnet-4-5",
            "ANTHROPIC_API_KEY",
            200_000,
        )
    url = base_url or "http://127.0.0.1:11434/v1"  # Ollama's OpenAI-compatible API
    hosted = urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1")
    if hosted:
        return Choice("openai", url, "gpt-4.1-mini", "OPENAI_API_KEY", 128_000)
    return Choice("openai", url, "qwen3:8b", None, 32_768)


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.config or "netclaw.json")
    if path.exists() and not args.force:
        print(f"netclaw: {path} already exists; use --force to overwrite it", file=sys.stderr)
        return 1
    choice = _choose(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(starter_config(choice), encoding="utf-8")
    print(f"wrote {path}")
    settings = load_settings(path)  # what was written must load: the same rules as `run`
    ok = _check(choice, settings.providers["main"])
    _next_steps(path, choice, ok)
    return 0


def _choose(args: argparse.Namespace) -> Choice:
    provider = args.provider or (
        "openai"
        if args.yes
        else _ask("provider (openai = any OpenAI-compatible server, or anthropic)", "openai")
    )
    if provider not in ("openai", "anthropic"):
        raise NetclawError(f"--provider must be openai or anthropic, not {provider!r}")
    base = defaults(provider, args.base_url)
    if args.yes:
        return Choice(
            provider,
            base.base_url,
            args.model or base.model,
            args.api_key_env if args.api_key_env is not None else base.api_key_env,
            base.context_window,
        )
    base_url = args.base_url or _ask("base URL", base.base_url)
    base = defaults(provider, base_url)
    model = args.model or _ask("model", base.model)
    key = args.api_key_env or _ask(
        "environment variable holding the API key (empty: none)", base.api_key_env or ""
    )
    return Choice(provider, base_url, model, key or None, base.context_window)


def _ask(question: str, default: str) -> str:
    try:
        answer = input(f"{question} [{default}]: ").strip()
    except EOFError:
        answer = ""
    return answer or default


def starter_config(choice: Choice) -> str:
    """The file: the chosen provider and model, the rest at their defaults, with comments."""
    provider = {"type": choice.provider, "base_url": choice.base_url, "api_key_env": choice.api_key_env}
    lines = [
        "// netclaw configuration, written by `netclaw init`. Whole-line // comments are allowed.",
        "// Every key and its default: netclaw.example.json in the source, and the README.",
        "// Secrets never go in this file: *_env keys name an environment variable (or VAR_FILE,",
        "// or a systemd credential VAR) that holds them.",
        "{",
        "  // Where sessions, memories and the control token live (relative to this file).",
        '  "data_dir": "./data",',
        "",
        "  // The model server. type openai: any OpenAI-compatible server (Ollama, vLLM,",
        "  // llama.cpp, LiteLLM, OpenAI); type anthropic: Anthropic's Messages API.",
        f'  "providers": {{"main": {json.dumps(provider)}}},',
        "  // context_window: what the model accepts; netclaw compacts at 75% of it.",
        f'  "models": {{"main": {{"provider": "main", "model": {json.dumps(choice.model)}, '
        f'"context_window": {choice.context_window}, "max_output_tokens": 4096}}}},',
        "",
        "  // The control API and webhooks listen here; keep it on loopback unless you put",
        "  // it behind TLS. The bearer token is written to data_dir/control.token.",
        '  "gateway": {"host": "127.0.0.1", "port": 5199},',
        "",
        "  // Chat platforms: set enabled to true and export the tokens (see the README).",
        '  "slack": {"enabled": false, "bot_token_env": "SLACK_BOT_TOKEN", "app_token_env": "SLACK_APP_TOKEN", "channels": []},',
        '  "discord": {"enabled": false, "token_env": "DISCORD_BOT_TOKEN", "channels": []},',
        "",
        "  // A daily cap on provider tokens per conversation (null: none).",
        '  "session": {"max_tokens_per_day": null},',
        "",
        '  "log": {"level": "info", "format": "text"}',
        "}",
        "",
    ]
    return "\n".join(lines)


def _check(choice: Choice, config: ProviderConfig) -> bool:
    from netclaw.providers import make_provider

    if choice.api_key_env and not read_secret(choice.api_key_env):
        print(f"[warn] the key {choice.api_key_env} is not set here: {where_to_put(choice.api_key_env)}")
        return False

    async def probe() -> str:
        provider = make_provider("main", config)
        try:
            return await asyncio.wait_for(provider.check(choice.model), CHECK_TIMEOUT_S)
        finally:
            await provider.aclose()

    try:
        detail = asyncio.run(probe())
    except (NetclawError, TimeoutError) as exc:
        print(f"[warn] provider at {choice.base_url}: {exc or 'no answer in time'}")
        return False
    print(f"[ok] provider at {choice.base_url}: {detail}; model {choice.model}")
    return True


def _next_steps(path: Path, choice: Choice, provider_ok: bool) -> None:
    config = "" if path == Path("netclaw.json") else f" --config {path}"
    steps = []
    if choice.api_key_env and not os.environ.get(choice.api_key_env):
        steps.append(f"export {choice.api_key_env}=...   # or {choice.api_key_env}_FILE=/path/to/a/file")
    if not provider_ok and choice.local:
        steps.append(f"start your model server (e.g. `ollama serve`, then `ollama pull {choice.model}`)")
    steps += [
        f"netclaw doctor{config}      # checks everything again",
        f"netclaw run{config}         # the daemon, in the foreground",
        f"netclaw chat{config}        # in another terminal",
    ]
    print("\nnext steps:")
    for number, step in enumerate(steps, 1):
        print(f"  {number}. {step}")
