"""The documented screenshot command runs as written (into a temporary folder) and saves
every page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.browser._room import need_chromium
from tests.browser.screenshots import PHONE_SHOTS, SHOTS

REPO = Path(__file__).resolve().parents[2]


def test_python_m_tests_browser_screenshots_saves_every_page(tmp_path: Path) -> None:
    need_chromium()
    done = subprocess.run(
        [sys.executable, "-m", "tests.browser.screenshots", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, _ in SHOTS + PHONE_SHOTS:
        shot = tmp_path / f"{name}.png"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert shot.stat().st_size > 10_000, name
