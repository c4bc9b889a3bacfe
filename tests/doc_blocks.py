"""Reading the repository's documentation from tests, so a documented example or table
and the test that checks it are the same text: a test loads the block the page shows,
never a copy of it.

A block or table is found by the HTML comment placed right before it
(``<!-- example: netclaw.json ... -->``, ``<!-- events table ... -->``), invisible when
the page is rendered. A *recipe* (``<!-- recipe: NAME ... -->``: the first run, the deploy
steps) is found by its name alone, on whichever page holds it — README.md or a page of
docs/ — so a recipe can move between pages without its test following it by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(```|~~~)")


def documentation() -> list[str]:
    """The documentation's pages, by their path from the repository's root: README.md and
    every page under docs/."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [str(page.relative_to(REPO)) for page in pages]


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


def fenced_under(name: str, heading: str, lang: str, index: int = 0) -> str:
    """The ``index``-th fenced block of language ``lang`` (```sh) after the heading line
    ``heading`` (``## Web search``) of the page ``name``: a block in prose that carries no
    marker of its own."""
    text = read(name)
    at = re.search(rf"^{re.escape(heading)}$", text, re.M)
    assert at is not None, f"{name} has no heading {heading!r}"
    blocks = re.findall(rf"^```{re.escape(lang)}\n(.*?)^```", text[at.end() :], re.S | re.M)
    assert len(blocks) > index, f"{name}: fewer than {index + 1} ```{lang} blocks after {heading!r}"
    return str(blocks[index])


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


_RECIPE = re.compile(r"^<!-- recipe: ([\w-]+)", re.M)


def recipes_in(text: str) -> dict[str, list[str]]:
    """Each recipe of a page's ``text``: its name → its shell lines (the ```sh block after the
    marker), continuation lines joined, comments kept (the shell ignores them)."""
    found = {}
    for marker in _RECIPE.finditer(text):
        block = text[marker.end() :].split("```sh\n", 1)[1].split("```", 1)[0]
        found[marker.group(1)] = [
            re.sub(r"\\\n\s*", "", line) for line in re.split(r"(?<!\\)\n", block.strip())
        ]
    return found


def recipe_pages(name: str) -> list[str]:
    """The pages of the documentation holding the recipe ``name``."""
    return [page for page in documentation() if name in recipes_in(read(page))]


def recipe(name: str) -> list[str]:
    """The shell lines of the recipe ``name``, from the one page that holds it (an error
    when no page, or more than one, does)."""
    pages = recipe_pages(name)
    assert pages, f"no page of README.md or docs/ has a `<!-- recipe: {name}` block"
    assert len(pages) == 1, f"the recipe {name!r} is in more than one page: {', '.join(pages)}"
    return recipes_in(read(pages[0]))[name]
