"""The documentation stands alone and says what the code does.

- No file of the repository refers to documents outside it, and every relative link in
  README.md and docs/ reaches a file (and a heading) that exists.
- README.md is a front door: short, and linking every page of docs/.
- What the code, the deploy files and the config ``netclaw init`` writes tell people to
  read is a page of docs/ that exists, never the README.
- Every recipe a test runs as written (``<!-- recipe: NAME``) is on exactly one page, and
  one that moved off README.md kept its lines.
- Each reference page is checked against the code it describes: every CLI command and
  option, every configuration key, every HTTP route and the permission it needs, every
  output event and its payload, every chat command, and the layers of each layers contract
  of the import linter. A change to one without the other fails here, naming what to add
  or remove.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import subprocess
import tomllib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import BaseModel

import adapters
from adapters.webhook import WebhookAdapter
from netclaw import outputs
from netclaw.cli import _parser
from netclaw.cluster.membership import ClusterNode
from netclaw.commands import Command, parse_command, parse_prompt
from netclaw.config import Settings, load_settings, settings_model
from netclaw.gateway import Auditing, ChatInput, Commands, Operator, ToolQuestions
from netclaw.http.access import permission_for
from netclaw.http.api import Api
from netclaw.http.cluster import ClusterHttp, alone_routes
from netclaw.http.mcp import mcp_routes
from netclaw.http.questions import question_routes
from tests.doc_blocks import (
    REPO,
    block_after,
    code_spans,
    documentation,
    read,
    recipe,
    recipe_pages,
    recipes_in,
    table_after,
)

# -- nothing points outside the repository --------------------------------------------------

# Written so that these lines do not match themselves (a search for the names finds
# only real references).
OUTSIDE = [
    re.compile(r"[C]ONTRACT\.md"),
    re.compile(r"[A]RCHITECTURE\.md"),
    re.compile(r"\.\./[s]hared\b"),
    re.compile(r"\b[s]hared/design\b"),
    re.compile(r"/[w]ork/(?:shared|main|wt)\b"),
]


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout.decode()
        names = [n for n in listed.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        names = [
            str(p.relative_to(REPO))
            for p in REPO.rglob("*")
            if p.is_file() and not {".git", "__pycache__", "node_modules"} & set(p.parts)
        ]
    return [REPO / n for n in names if (REPO / n).is_file()]


def test_no_file_refers_to_documents_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary (images)
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, "point at the repository's own docs/ instead:\n" + "\n".join(found)


# -- links --------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def markdown_files() -> list[Path]:
    return [REPO / page for page in documentation()]


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links there are examples)."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]+`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of ``path``."""
    found: set[str] = set()
    text = re.sub(r"^(```|~~~).*?^\1", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def relative_links() -> Iterator[tuple[Path, str]]:
    for page in markdown_files():
        for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield page, target


def test_every_relative_link_reaches_a_file_and_heading_that_exist() -> None:
    broken = []
    checked = 0
    for page, target in relative_links():
        checked += 1
        where, _, anchor = target.partition("#")
        path = (page.parent / where).resolve() if where else page
        shown = f"{page.relative_to(REPO)}: ({target})"
        if not path.is_relative_to(REPO):
            broken.append(f"{shown} leaves the repository")
        elif not path.exists():
            broken.append(f"{shown} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{shown}: {path.name} has no heading #{anchor}")
    assert checked > 20, "the link pattern found almost nothing: is it still right?"
    assert not broken, "\n".join(broken)


# -- README.md, the front door ------------------------------------------------------------------

README_MAX_LINES = 250  # what netclaw is, the Quick start, the test command, the map of docs/


def test_the_readme_links_every_page_of_the_docs() -> None:
    readme = read("README.md")
    pages = [page for page in documentation() if page != "README.md"]
    assert len(pages) > 20, "documentation() found too few pages: is it still right?"
    missing = [page for page in pages if f"]({page})" not in readme]
    assert not missing, "README.md's map of the documentation does not link: " + ", ".join(missing)


_DOCS_PAGE = re.compile(r"\bdocs/[\w./-]+\.md")
# README.md itself, where the build needs it: pyproject's `readme`.
_README_NEEDED = re.compile(r"COPY pyproject\.toml README\.md|README's test command")


def test_the_code_points_at_pages_of_docs_not_the_readme() -> None:
    """What the code, the deploy files and the config `netclaw init` writes tell people to
    read is a page of docs/ that exists: the reference left README.md for docs/."""
    shipped = [
        path
        for path in tracked_files()
        if path.relative_to(REPO).parts[0] in ("netclaw", "adapters", "deploy", "Dockerfile", ".ci")
        and path.suffix not in (".png", ".js", ".sql")
    ]
    assert len(shipped) > 50, "tracked_files() found too few files of the code: is it still right?"
    wrong = []
    for path in shipped:
        data = path.read_bytes()
        if b"\0" in data:  # a binary (the embedding model's weights): nothing a person reads
            continue
        name = path.relative_to(REPO)
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if "README" in line and not _README_NEEDED.search(line):
                wrong.append(f"{name}:{number} points at the README: {line.strip()}")
            wrong += [
                f"{name}:{number} names {page}, which does not exist"
                for page in _DOCS_PAGE.findall(line)
                if not (REPO / page).is_file()
            ]
    assert not wrong, "\n".join(wrong)


def test_the_readme_stays_a_front_door() -> None:
    lines = read("README.md").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): the reference belongs in a page "
        "of docs/, linked from the README's map"
    )


# -- recipes ------------------------------------------------------------------------------------

_RECIPE_CALL = re.compile(r"\brecipe\(\s*\"([\w-]+)\"\s*\)")


def requested_recipes() -> list[str]:
    """The recipes the tests run, by the names their ``recipe("NAME")`` calls give."""
    found = {
        name
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path.name != "test_docs.py"
        for name in _RECIPE_CALL.findall(path.read_text(encoding="utf-8"))
    }
    return sorted(found)


def _readme_recipe_as_it_was(text: str, name: str) -> list[str]:
    """The lines the deploy tests read from README.md before the recipes could live in
    docs/ (``readme_recipe``, tests/e2e/_docker.py): the first ```sh block after the marker."""
    start = text.index(f"<!-- recipe: {name}")
    block = text[start:].split("```sh\n", 1)[1].split("```", 1)[0]
    return [re.sub(r"\\\n\s*", "", line) for line in re.split(r"(?<!\\)\n", block.strip())]


def _git(*args: str) -> str | None:
    """What ``git *args`` prints in the checkout, or None (not a checkout, a shallow clone
    without that history, a file not in that commit)."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def test_the_tests_run_recipes() -> None:
    assert "first-run" in requested_recipes(), "the recipe calls of the tests were not found"


@pytest.mark.parametrize("name", requested_recipes())
def test_each_recipe_a_test_runs_is_on_exactly_one_page(name: str) -> None:
    pages = recipe_pages(name)
    assert len(pages) == 1, f"the recipe {name!r} is on {len(pages)} pages: {pages}"
    assert recipe(name) == recipes_in(read(pages[0]))[name]


@pytest.mark.parametrize("name", requested_recipes())
def test_a_recipe_yields_the_lines_the_readme_gave(name: str) -> None:
    """The lines a test runs are those README.md gave when the recipe was there: read from
    README.md as it is, as the last commit has it (a move not yet committed), or as it was
    just before the commit that took the recipe out of it (compared with the page it went to
    in that commit, so later edits of the page stay free)."""
    marker = f"<!-- recipe: {name}"
    [page] = recipe_pages(name)
    if page == "README.md":
        assert recipe(name) == _readme_recipe_as_it_was(read("README.md"), name)
        return
    committed = _git("show", "HEAD:README.md")
    if committed is not None and marker in committed:
        assert recipe(name) == _readme_recipe_as_it_was(committed, name), f"{name}: moved to {page}"
        return
    log = _git("log", "-1", "--format=%H", "-S", marker, "--", "README.md")
    moved = log.strip() if log else ""
    before = _git("show", f"{moved}^:README.md") if moved else None
    if before is None or marker not in before:
        pytest.skip(f"no git history of README.md holding the recipe {name!r} here (a shallow clone?)")
    landed = next(
        (
            recipes_in(text)[name]
            for holder in (page, *documentation())
            if (text := _git("show", f"{moved}:{holder}")) is not None and name in recipes_in(text)
        ),
        None,
    )
    assert landed is not None, f"commit {moved[:12]} took {name!r} out of README.md and put it nowhere"
    assert landed == _readme_recipe_as_it_was(before, name), (
        f"commit {moved[:12]} moved the recipe {name!r} off README.md with other lines"
    )


# -- docs/cli.md --------------------------------------------------------------------------------


def help_of(*argv: str) -> str:
    """What ``netclaw *argv --help`` prints (wide, so no choice list is wrapped)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        _parser().parse_args([*argv, "--help"])
    return printed.getvalue()


def cli_surface(
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, tuple[list[str], list[str], dict[str, list[str]]]]:
    """Each command: its action words, its options, and each option's choices, as its
    ``--help`` shows them."""
    monkeypatch.setenv("COLUMNS", "250")
    listed = re.search(r"\{([\w,-]+)\}", help_of())
    assert listed is not None, "netclaw --help lists no commands"
    commands = listed.group(1).split(",")
    found = {}
    for command in commands:
        words: list[str] = []
        options: list[str] = []
        choices: dict[str, list[str]] = {}
        for line in help_of(command).splitlines():
            head = line.strip().split("  ")[0]
            if head.startswith("{"):
                words += head.strip("{}").split(",")
            elif head.startswith("-") and line.startswith("  "):
                for part in head.split(", "):
                    option, _, argument = part.partition(" ")
                    if option not in ("-h", "--help"):
                        options.append(option)
                        if argument.startswith("{"):
                            choices[option] = argument.strip("{}").split(",")
        found[command] = (words, options, choices)
    return found


def test_the_cli_page_names_every_command_and_option(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = read("docs/cli.md")
    surface = cli_surface(monkeypatch)
    assert {"run", "chat", "sessions", "doctor"} <= set(surface), "reading --help went wrong"
    missing = []
    for command, (words, options, choices) in surface.items():
        if f"`netclaw {command}" not in doc:
            missing.append(f"netclaw {command}")
        # An action word: `sessions show`, or the default `sessions [list]`.
        missing += [f"netclaw {command} {w}" for w in words if not re.search(rf"{command} \[?{w}\b", doc)]
        missing += [f"netclaw {command} {o}" for o in options if o not in doc]
        for option, values in choices.items():  # --by day: `--by session\|day\|model`
            missing += [
                f"netclaw {command} {option} {v}"
                for v in values
                if not any(s in doc for s in (f"{option} {v}", f"\\|{v}", f"`{v}`"))
            ]
    assert not missing, "docs/cli.md does not mention: " + ", ".join(missing)


# -- docs/configuration.md ----------------------------------------------------------------------


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether it may be null)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0], type(None) in args
    return None, False


def config_keys(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[str]:
    """Every key path of netclaw.json. A section (a model) gives its keys; a map of models
    gives ``<name>.`` keys; an optional model (``null`` by default) is one key, and so are
    the other names a section allows beside its own (``models.<name>``: models like
    ``models.main``)."""
    sections = (
        {i.name: i.channel.section for i in adapters.installed_channels() if i.built_in and i.channel}
        if not prefix
        else {}
    )
    extra = typing.get_type_hints(model).get("__pydantic_extra__")
    if model.model_config.get("extra") == "allow" and typing.get_origin(extra) is dict:
        value = typing.get_args(extra)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            yield f"{prefix}<name>"
    fields = dict(model.model_fields)
    if not prefix:  # netclaw's own channels beyond Settings' fields (telegram) are its keys too
        built_in = settings_model().model_fields
        fields.update({name: built_in[name] for name in sections if name in built_in})
    for name, field in fields.items():
        annotation = sections.get(name, field.annotation)
        path = f"{prefix}{name}"
        inner, nullable = _model_of(annotation)
        if typing.get_origin(annotation) is dict:
            value = typing.get_args(annotation)[1]
            if isinstance(value, type) and issubclass(value, BaseModel):
                yield from config_keys(value, f"{path}.<name>.")
                continue
        if inner is not None and not nullable:
            yield from config_keys(inner, f"{path}.")
        else:
            yield path


def documented_config_keys() -> set[str]:
    keys = set()
    for line in read("docs/configuration.md").splitlines():
        if line.startswith("| `"):
            keys.update(code_spans(line.split("|")[1]))
    return keys


def test_the_configuration_page_documents_every_key() -> None:
    # The file's model: Settings plus the sections of channels that are not its own fields (matrix).
    keys = set(config_keys(settings_model()))
    documented = documented_config_keys()
    assert len(keys) > 80, "config_keys found too few keys: is the walk still right?"
    missing = sorted(keys - documented)
    stale = sorted(k for k in documented - keys if not any(key.startswith(f"{k}.") for key in keys))
    assert not missing, "docs/configuration.md has no row for: " + ", ".join(missing)
    assert not stale, "docs/configuration.md documents keys that do not exist: " + ", ".join(stale)


def _holds(found: Any, expected: Any) -> bool:
    """``found`` (a loaded value) holds what ``expected`` (the JSON given) says."""
    if isinstance(found, BaseModel):
        found = found.model_dump(mode="json")
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            k in found and _holds(found[k], v) for k, v in expected.items()
        )
    return bool(found == expected)


def test_the_override_examples_of_the_configuration_page_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each line of the page's example: its variables, loaded as `netclaw run` would."""
    block = block_after("docs/configuration.md", "example: overrides")
    for line in block.splitlines():
        words = shlex.split(line)
        given = dict(w.split("=", 1) for w in words if re.match(r"NETCLAW_\w+=", w))
        assert given and words[len(given) :] == ["netclaw", "run"], line
        with monkeypatch.context() as env:
            for name in list(os.environ):
                if name.upper().startswith("NETCLAW_"):
                    env.delenv(name)
            env.setenv("HOME", str(tmp_path))  # no ~/.config/netclaw/netclaw.json either
            env.chdir(tmp_path)
            for name, value in given.items():
                env.setenv(name, value)
            settings = load_settings()
        for name, value in given.items():
            found: Any = settings
            for part in name.removeprefix("NETCLAW_").lower().split("__"):
                found = found[part] if isinstance(found, dict) else getattr(found, part)
            try:
                expected = json.loads(value)
            except ValueError:
                expected = value
            assert _holds(found, expected), f"{name}={value} loaded as {found!r}"


# -- docs/http-api.md ---------------------------------------------------------------------------


def served_routes() -> set[str]:
    api = Api(Operator(*[cast(Any, None)] * 4), cast(Commands, None), "token")
    app = api.app()
    # The daemon adds the MCP and question routes to the API's application (daemon.py).
    app.router.add_routes(mcp_routes(None))
    app.router.add_routes(question_routes(cast(ToolQuestions, None), cast(Auditing, None)))
    routes = {
        f"{route.method} {route.resource.canonical}"
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    webhooks = WebhookAdapter(Settings(), cast(ChatInput, None))
    routes |= {f"{r.method} {r.path}" for r in webhooks.routes()}  # type: ignore[attr-defined]
    # On one node the cluster's routes answer "cluster mode is off": listed with the cluster's.
    return routes - {f"{r.method} {r.path}" for r in alone_routes()}  # type: ignore[attr-defined]


def test_the_http_page_lists_every_route() -> None:
    documented = {row[0].strip("`") for row in table_after("docs/http-api.md", "routes table")}
    served = served_routes()
    assert len(served) > 15
    assert not served - documented, f"docs/http-api.md does not list: {sorted(served - documented)}"
    assert not documented - served, (
        f"docs/http-api.md lists routes nobody serves: {sorted(documented - served)}"
    )


def test_the_cluster_routes_are_listed_apart() -> None:
    node = types.SimpleNamespace(routing=None)
    served = {f"{r.method} {r.path}" for r in ClusterHttp(cast(ClusterNode, node)).routes()}  # type: ignore[attr-defined]
    documented = {row[0].strip("`") for row in table_after("docs/http-api.md", "cluster routes table")}
    assert served == documented
    alone = {f"{r.method} {r.path}" for r in alone_routes()}  # type: ignore[attr-defined]
    assert alone == documented - {"POST /api/cluster/sessions/{id}/take"}


def test_the_http_page_names_the_permission_each_route_needs() -> None:
    wrong = []
    tables = ("routes table", "cluster routes table")
    for row in (row for table in tables for row in table_after("docs/http-api.md", table)):
        method, _, path = row[0].strip("`").partition(" ")
        if path.startswith("/api/"):
            needs = code_spans(row[3])
            expected = permission_for(method, path)
            if not needs or needs[0] != expected:
                wrong.append(f"{row[0]}: {expected}")
    assert not wrong, "docs/http-api.md's `needs` column should say: " + ", ".join(wrong)


# -- docs/events.md -----------------------------------------------------------------------------


def test_the_events_page_matches_the_outputs() -> None:
    rows = table_after("docs/events.md", "events table")
    documented = {row[0].strip("`"): row for row in rows}
    assert set(documented) == set(outputs.OUTPUT_TYPES), (
        "docs/events.md and netclaw/outputs.py name different events"
    )
    for event, (_, bit, payload) in documented.items():
        cls = outputs.OUTPUT_TYPES[event]
        assert bit == ("always" if cls.bit is None else cls.bit.name), f"{event}: filter bit"
        fields = [f.strip() for f in payload.strip("`").split(",")]
        wire = {"from_": "from"}
        expected = {
            wire.get(name, name) + ("?" if name in cls.omit_if_none else "")
            for name in (f.name for f in dataclasses.fields(cls))
            if name != "session_id"
        }
        assert set(fields) == expected, f"{event}: the payload is {sorted(expected)}"


def test_the_filters_the_events_page_names_are_the_filters() -> None:
    names = {row[0].strip("`") for row in table_after("docs/events.md", "filters table")}
    assert names == {name.lower() for name in outputs.OutputFilter.__members__} - {"none"}
    for name in names:
        assert outputs.OutputFilter.parse(name)


# -- docs/chat-commands.md ----------------------------------------------------------------------


def command_of(text: str) -> str | None:
    """The command a message is, read as the gateway reads it: ``/prompt`` (which takes
    arguments) first, then the commands that are the whole message."""
    if parse_prompt(text) is not None:
        return "prompt"
    command = parse_command(text)
    return command.name if command is not None else None


def test_the_chat_commands_page_matches_the_parser() -> None:
    rows = table_after("docs/chat-commands.md", "commands table")
    canonical = set()
    for command, also, *_ in rows:
        # The command, then the arguments it takes, if any: `/prompt [server[:name]] [args…]`.
        name = command.strip("`").split()[0].removeprefix("/")
        canonical.add(name)
        for spelling in [command, *code_spans(also)]:
            word = spelling.strip("`").split()[0].removeprefix("/")
            for text in (f"/{word}", f"!{word}", f"/{word.upper()}", f"  /{word} "):
                assert command_of(text) == name, f"{text!r} should be /{name}"
    assert canonical == set(typing.get_args(Command)), "docs/chat-commands.md and netclaw/commands.py differ"
    assert command_of("/status please") is None
    assert command_of('/prompt docs:greet "Ann Lee" style=formal') == "prompt"


# -- docs/architecture.md -----------------------------------------------------------------------


def layers_contracts() -> dict[str, list[str]]:
    """Each layers contract of pyproject.toml: its container → its layers, top first, each
    module named in full (``netclaw.daemon | netclaw.client``; ``|`` independent siblings,
    ``:`` siblings that may import each other)."""
    config = tomllib.loads(read("pyproject.toml"))["tool"]["importlinter"]["contracts"]
    found = {}
    for contract in config:
        if contract["type"] != "layers":
            continue
        [container] = contract["containers"]  # one table per container
        found[container] = [
            _in_full(container, layer.replace("|", " | ").replace(":", " : ").split())
            for layer in contract["layers"]
        ]
    return found


def _in_full(container: str, words: list[str]) -> str:
    """A layer's words with each module named in full (``_idle`` → ``netclaw.sessions._core.activities.idle``)."""
    return " ".join(
        w if w in ("|", ":") or w.startswith(f"{container}.") else f"{container}.{w}" for w in words
    )


def children(container: str) -> set[str]:
    """The modules and packages directly inside ``container`` (dotted, in full)."""
    folder = REPO.joinpath(*container.split("."))
    found = {f"{container}.{p.stem}" for p in folder.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    return found | {f"{container}.{p.name}" for p in folder.iterdir() if (p / "__init__.py").exists()}


def test_every_layers_contract_has_its_table() -> None:
    contracts = layers_contracts()
    assert "netclaw" in contracts, "pyproject.toml has no layers contract for netclaw"
    doc = read("docs/architecture.md")
    missing = [c for c in contracts if f"<!-- layers table: {c} (" not in doc]
    assert not missing, f"docs/architecture.md has no layers table for {missing}"


@pytest.mark.parametrize("container", sorted(layers_contracts()))
def test_the_layers_table_is_the_import_contract(container: str) -> None:
    layers = layers_contracts()[container]
    rows = table_after("docs/architecture.md", f"layers table: {container} (")
    # The netclaw table names modules in full, the others by their name in the package.
    documented = [_in_full(container, row[1].replace("`", "").split()) for row in rows if row[0].isdigit()]
    assert documented == layers, f"docs/architecture.md's {container} layers differ from pyproject.toml's"
    named = {m for layer in layers for m in re.split(r"[ :|]+", layer) if m}
    outside = {m for m in children(container) if not any(m == n or m.startswith(n + ".") for n in named)}
    listed = {span for row in rows if not row[0].isdigit() for span in code_spans(row[1])}
    assert listed == outside, f"modules in no layer: {sorted(outside)}; the page lists {sorted(listed)}"


def test_the_architecture_page_names_every_module() -> None:
    doc = read("docs/architecture.md")
    missing = []
    for root in ("netclaw", "adapters"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.stem in ("__init__", "__main__"):
                continue
            rel = path.relative_to(REPO)
            dotted = ".".join(rel.with_suffix("").parts)
            spellings = (f"{path.stem}.py", f"`{path.stem}`", dotted, f"{rel.parent.name}/{path.stem}")
            if not any(s in doc for s in spellings):
                missing.append(str(rel))
    assert not missing, "docs/architecture.md does not say where these live: " + ", ".join(missing)
