"""Browser tests: a real headless Chromium (Debian's package, driven by Playwright) against
the daemon. One browser and one daemon per module; each test has its own browser context
(its own cookies) and its own sessions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from tests.browser._room import Room, launch, log_in, need_chromium, open_room


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def room(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    with open_room(tmp_path_factory.mktemp("room") / "data") as room:
        yield room
    survivors = pykka.ActorRegistry.get_all()
    pykka.ActorRegistry.stop_all()
    assert not survivors, f"actors survived daemon shutdown: {survivors}"


@pytest.fixture
def console_errors() -> list[str]:
    """What the page logged as errors; a test expecting one takes it out."""
    return []


@pytest.fixture
def page(browser: Any, room: Room, console_errors: list[str]) -> Iterator[Any]:
    """A logged-in page of a fresh browser context; no script error or failed load allowed."""
    context = browser.new_context(base_url=room.base_url)
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors = console_errors
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    log_in(page, room)
    yield page
    context.close()
    assert not errors, f"the page logged errors: {errors}"
