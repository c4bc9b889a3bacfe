"""Reading the repository's documentation from tests, so a documented example or table
and the test that checks it are the same text: a test loads the block the page shows,
never a copy of it.

A block or table is found by the HTML comment placed right before it
(``<!-- example: netclaw.json ... -->``, ``<!-- events table ... -->``), invisible when
the page is rendered.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(```|~~~)")


def read(name: str) -> str:
    """A file of the repository, by its path from the repository's root."""
    return (REPO / name).read_text(encoding="utf-8")


def _lines_after(name: str, marker: str) -> list[str]:
    lines = read(name).splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"<!-- {marker}"):
            return lines[i + 1 :]
    raise AssertionError(f"{name} has no `<!-- {marker} ... -->` marker")


def block_after(name: str, marker: str) -> str:
    """The fenced code block that follows the marker comment."""
    lines = _lines_after(name, marker)
    start = next((i for i, line in enumerate(lines) if _FENCE.match(line.strip())), None)
    assert start is not None, f"{name}: no code block after the {marker!r} marker"
    end = next(i for i in range(start + 1, len(lines)) if _FENCE.match(lines[i].strip()))
    return "\n".join(lines[start + 1 : end]) + "\n"


def table_after(name: str, marker: str) -> list[list[str]]:
    """The rows (cells stripped, header and rule left out) of the table that follows the
    marker comment. ``\\|`` inside a cell is a literal ``|``."""
    lines = _lines_after(name, marker)
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows[2:]  # past the header and the |---| rule


def code_spans(text: str) -> list[str]:
    """What stands between backticks in ``text``."""
    return re.findall(r"`([^`]+)`", text)
