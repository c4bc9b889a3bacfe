"""The file an MCP server's OAuth tokens are kept in (``netclaw mcp login``): private from
the first write, and a new login really starts without the old tokens."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from netclaw.mcp._oauth import TokenFile, token_path

URL = "http://127.0.0.1:1/mcp"
CALLBACK = "http://127.0.0.1:2/callback"


def logged_in(data_dir: Path) -> TokenFile:
    store = TokenFile(token_path(data_dir, "github"), URL, CALLBACK)
    info = OAuthClientInformationFull(client_id="c-1", redirect_uris=[CALLBACK])  # type: ignore[list-item]
    asyncio.run(store.set_client_info(info))
    asyncio.run(store.set_tokens(OAuthToken(access_token="a-1", refresh_token="r-1", expires_in=60)))
    return store


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_login_before_the_daemon_ever_ran_makes_the_data_dir_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "site" / "data"  # not there yet: `netclaw mcp login` comes first
    store = logged_in(data_dir)
    assert (mode(data_dir), mode(data_dir / "mcp-oauth"), mode(store.path)) == (0o700, 0o700, 0o600)


def test_forgetting_the_tokens_keeps_the_registration_only(tmp_path: Path) -> None:
    store = logged_in(tmp_path / "data")
    assert store.has_tokens() and store.expires_at() is not None
    store.forget_tokens()
    again = TokenFile(store.path, URL, CALLBACK)  # as the next process reads it
    assert not again.has_tokens() and again.expires_at() is None
    assert asyncio.run(again.get_tokens()) is None
    info = asyncio.run(again.get_client_info())
    assert info is not None and info.client_id == "c-1"
    assert mode(store.path) == 0o600


def test_forgetting_with_nothing_stored_writes_nothing(tmp_path: Path) -> None:
    store = TokenFile(token_path(tmp_path / "data", "github"), URL, CALLBACK)
    store.forget_tokens()
    assert not (tmp_path / "data").exists()
