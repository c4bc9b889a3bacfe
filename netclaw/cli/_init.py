"""``netclaw init``: a commented starter ``netclaw.json``, a check of the provider, and
the next steps. Asks for what it was not told unless ``--yes``; never overwrites a file
without ``--force``."""

from __future__ import annotations

import argparse
import asyncio
import grp
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from netclaw.config import ProviderConfig, load_settings
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ModelNotServed, NetclawError
from netclaw.process.system import SYSTEM_CONFIG, SYSTEM_ENV_FILE, SYSTEM_GROUP, SYSTEM_STATE_DIR

CHECK_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Choice:
    provider: str  # "openai" (any OpenAI-compatible server), "anthropic" or "demo" (built in)
    base_url: str
    model: str
    api_key_env: str | None
    context_window: int

    @property
    def local(self) -> bool:
        return urlsplit(self.base_url).hostname in ("127.0.0.1", "localhost", "::1")


def defaults(provider: str, base_url: str | None) -> Choice:
    """What a starter config uses when not told otherwise."""
    if provider == "demo":  # no server: base_url is unused
        return Choice("demo", "", "demo", None, 32_768)
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
    system = bool(getattr(args, "system", False))
    path = Path(args.config or (SYSTEM_CONFIG if system else "netclaw.json"))
    if path.exists() and not args.force:
        print(f"netclaw: {path} already exists; use --force to overwrite it", file=sys.stderr)
        return 1
    choice = _choose(args)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(starter_config(choice, system=system), encoding="utf-8")
        print(f"wrote {path}")
        if system:
            _system_files(path, choice)
    except OSError as exc:
        sudo = " (as root: sudo netclaw init --system)" if system else ""
        print(f"netclaw: cannot write {exc.filename or path}: {exc.strerror}{sudo}", file=sys.stderr)
        return 1
    settings = load_settings(path)  # what was written must load: the same rules as `run`
    found = _check(choice, settings.providers["main"])
    _next_steps(path, choice, found, system=system)
    return 0


def _system_files(path: Path, choice: Choice) -> None:
    """The system config is readable by the service (its group) but no one else; the
    environment file beside it holds secrets (root only, read by systemd) and is never
    overwritten."""
    try:
        group = grp.getgrnam(SYSTEM_GROUP).gr_gid
    except KeyError:
        group = None
    if group is not None and os.geteuid() == 0:
        os.chown(path, 0, group)
        path.chmod(0o640)
        print(f"  {path}: mode 0640, owner root:{SYSTEM_GROUP} (the service reads it through that group)")
    else:
        path.chmod(0o644)  # no secrets in it by design; the service's dynamic user must read it
        print(f"  {path}: mode 0644 (no group {SYSTEM_GROUP!r} here: run deploy/install.sh as root first)")
    env_file = path.parent / SYSTEM_ENV_FILE.name
    if env_file.exists():
        print(f"kept {env_file} (it may hold secrets; edit it by hand)")
        return
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(env_file_text(choice))
    print(f"wrote {env_file} (mode 0600: secrets go here, or in systemd credentials)")


def env_file_text(choice: Choice) -> str:
    lines = [
        f"# {SYSTEM_ENV_FILE}: read by systemd for netclaw.service (mode 0600, root only).",
        "# The variables the config's *_env keys name: API keys, chat tokens. Prefer systemd",
        "# credentials (LoadCredential= in the unit) where you can.",
    ]
    if choice.api_key_env:
        lines.append(f"{choice.api_key_env}=")
    lines += [
        "#SLACK_BOT_TOKEN=xoxb-...",
        "#SLACK_APP_TOKEN=xapp-...",
        "#DISCORD_BOT_TOKEN=...",
        "# Any config key can be overridden here too, e.g. NETCLAW_LOG__LEVEL=debug",
        "",
    ]
    return "\n".join(lines)


def _choose(args: argparse.Namespace) -> Choice:
    provider = args.provider or (
        "openai"
        if args.yes
        else _ask("provider (openai = any OpenAI-compatible server, or anthropic)", "openai")
    )
    if provider not in ("openai", "anthropic", "demo"):
        raise NetclawError(f"--provider must be openai, anthropic or demo, not {provider!r}")
    base = defaults(provider, args.base_url)
    if args.yes or provider == "demo":
        return Choice(
            provider,
            base.base_url,
            args.model or base.model,
            args.api_key_env if args.api_key_env is not None else base.api_key_env,
            base.context_window,
        )
    base_url = args.base_url or _ask("base URL", base.base_url)
    base = defaults(provider, base_url)
    model = args.model
    if model is None:
        served = served_models(Choice(provider, base_url, base.model, base.api_key_env, base.context_window))
        default = base.model
        if served:
            print(
                f"the server at {base_url} has: {', '.join(served[:20])}{', …' if len(served) > 20 else ''}"
            )
            if default not in served:
                default = served[0]
        model = _ask("model", default)
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


def starter_config(choice: Choice, *, system: bool = False) -> str:
    """The file: the chosen provider and model, the rest at their defaults, with comments.
    ``system``: for deploy/netclaw.service, state in its StateDirectory (/var/lib/netclaw)."""
    provider: dict[str, object] = {
        "type": choice.provider,
        "base_url": choice.base_url,
        "api_key_env": choice.api_key_env,
    }
    if choice.provider == "demo":
        provider = {"type": "demo"}
    lines = [
        "// netclaw configuration, written by `netclaw init`. Whole-line // comments are allowed.",
        "// Every key and its default: docs/configuration.md in netclaw's source (and netclaw.example.json).",
        "// Secrets never go in this file: *_env keys name an environment variable (or VAR_FILE,",
        "// or a systemd credential VAR) that holds them.",
        "{",
        *(
            [
                "  // Where sessions, memories and the control token live: the service's",
                "  // StateDirectory (nothing else is writable under its ProtectSystem=strict).",
                f'  "data_dir": "{SYSTEM_STATE_DIR}",',
                f'  "tools": {{"workspace_dir": "{SYSTEM_STATE_DIR / "workspace"}"}},',
            ]
            if system
            else [
                "  // Where sessions, memories and the control token live (relative to this file).",
                '  "data_dir": "./data",',
            ]
        ),
        "",
        "  // The model server. type openai: any OpenAI-compatible server (Ollama, vLLM,",
        "  // llama.cpp, LiteLLM, OpenAI); type anthropic: Anthropic's Messages API; type demo:",
        "  // netclaw's built-in demo model, no server and no AI (it repeats what it is told).",
        f'  "providers": {{"main": {json.dumps(provider)}}},',
        "  // context_window: what the model accepts; netclaw compacts at 75% of it.",
        f'  "models": {{"main": {{"provider": "main", "model": {json.dumps(choice.model)}, '
        f'"context_window": {choice.context_window}, "max_output_tokens": 4096}}}},',
        "",
        "  // The control API and webhooks listen here; keep it on loopback unless you put",
        "  // it behind TLS. The bearer token is written to data_dir/control.token.",
        '  "gateway": {"host": "127.0.0.1", "port": 5199},',
        "",
        "  // Chat platforms: set enabled to true and export the tokens (see docs/channels.md).",
        '  "slack": {"enabled": false, "bot_token_env": "SLACK_BOT_TOKEN", "app_token_env": "SLACK_APP_TOKEN", "channels": []},',
        '  "discord": {"enabled": false, "token_env": "DISCORD_BOT_TOKEN", "channels": []},',
        "",
        "  // What people and API tokens may do, by role (the control token is admin). reader",
        "  // reads sessions and transcripts and starts no turn: netclaw tokens add ci --role reader",
        '  "roles": {"reader": {"chat": false, "memory": "read"}},',
        "",
        "  // A daily cap on provider tokens per conversation (null: none).",
        '  "session": {"max_tokens_per_day": null},',
        "",
        '  "log": {"level": "info", "format": "text"}',
        "}",
        "",
    ]
    return "\n".join(lines)


ProviderCheck = Literal["ok", "no_key", "no_model", "unreachable"]


def _check(choice: Choice, config: ProviderConfig) -> ProviderCheck:
    from netclaw.providers import make_provider

    if choice.api_key_env and not read_secret(choice.api_key_env):
        print(f"[warn] the key {choice.api_key_env} is not set here: {where_to_put(choice.api_key_env)}")
        return "no_key"

    async def probe() -> str:
        provider = make_provider("main", config)
        try:
            return await asyncio.wait_for(provider.check(choice.model), CHECK_TIMEOUT_S)
        finally:
            await provider.aclose()

    try:
        detail = asyncio.run(probe())
    except ModelNotServed as exc:
        print(
            f"[warn] the server at {choice.base_url} is up but does not have the model {choice.model!r}; "
            f"it has: {', '.join(exc.available[:20]) or 'nothing'}"
        )
        return "no_model"
    except (NetclawError, TimeoutError) as exc:
        print(f"[warn] provider at {choice.base_url}: {exc or 'no answer in time'}")
        return "unreachable"
    where = "provider" if choice.provider == "demo" else f"provider at {choice.base_url}"
    print(f"[ok] {where}: {detail}; model {choice.model}")
    return "ok"


def served_models(choice: Choice) -> list[str] | None:
    """What the server lists (to offer), or None when it cannot be asked or lists nothing."""
    from netclaw.providers import HttpStreamingProvider, make_provider

    config = ProviderConfig(type=choice.provider, base_url=choice.base_url, api_key_env=choice.api_key_env)

    async def listing() -> list[str] | None:
        provider = make_provider("main", config)
        try:
            if not isinstance(provider, HttpStreamingProvider):
                return None
            return await asyncio.wait_for(provider.served_models(), CHECK_TIMEOUT_S)
        finally:
            await provider.aclose()

    try:
        return asyncio.run(listing())
    except (NetclawError, TimeoutError):
        return None


def _next_steps(path: Path, choice: Choice, provider: ProviderCheck, *, system: bool = False) -> None:
    default = SYSTEM_CONFIG if system else Path("netclaw.json")
    config = "" if path == default else f" --config {path}"
    steps = []
    env_file = path.parent / SYSTEM_ENV_FILE.name
    if choice.api_key_env and not os.environ.get(choice.api_key_env):
        if system:
            steps.append(f"put the key in {env_file}: {choice.api_key_env}=...")
        else:
            steps.append(f"export {choice.api_key_env}=...   # or {choice.api_key_env}_FILE=/path/to/a/file")
    if provider == "unreachable" and choice.local:
        steps.append(
            f"start your model server (e.g. `ollama serve`, then `ollama pull {choice.model}`), "
            f"or try netclaw first with its demo model: netclaw init --force --provider demo{config}"
        )
    elif provider == "no_model":
        steps.append(
            f"pull the model (`ollama pull {choice.model}`) or pick one the server has: "
            f"netclaw init --force{' --system' if system else ''} --model NAME"
        )
    if system:
        steps += [
            "sudo systemctl enable --now netclaw   # start it (and at boot)",
            f"sudo netclaw chat{config}              # root reads the service's control token",
            "journalctl -u netclaw -f             # its log",
        ]
    else:
        steps += [
            f"netclaw doctor{config}      # checks everything again",
            f"netclaw run{config}         # the daemon, in the foreground",
            f"netclaw chat{config}        # in another terminal",
        ]
    print("\nnext steps:")
    for number, step in enumerate(steps, 1):
        print(f"  {number}. {step}")
