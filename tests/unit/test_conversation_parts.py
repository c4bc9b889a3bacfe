"""The pure parts of conversations as people have them: files classified and stored, what
the model reads of a user message (speaker, earlier thread, files), Slack mrkdwn, memory
scopes by place, and the migration that places existing memories."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.chat import split_message
from adapters.slack._format import no_pings, to_mrkdwn
from netclaw import attachments
from netclaw.attachments import IncomingFile, classify, safe_name
from netclaw.config import ChannelAccess, Settings
from netclaw.errors import InvalidInput
from netclaw.messages import ChatMessage, PriorMessage, bounded_prior, model_text, prior_block
from netclaw.persistence import NewMemory, SqliteMemoryStore, load_migrations, prepare_database
from netclaw.persistence._migrations import apply_migrations
from netclaw.security.policy import (
    Place,
    audience_of,
    default_scope,
    dm_audience,
    recall_allowed,
    recall_scope,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16

# -- files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mime", "data", "kind"),
    [
        ("app.log", "", b"line\n", "text"),
        ("data.csv", "text/csv", b"a,b\n", "text"),
        ("Dockerfile", "application/octet-stream", b"FROM x\n", "text"),
        ("x.json", "application/json; charset=utf-8", b"{}", "text"),
        ("shot.png", "image/png", PNG, "image"),
        ("shot.jpg", "text/plain", b"\xff\xd8\xff" + b"\x00" * 8, "image"),  # the bytes decide
        ("fake.png", "image/png", b"not really a png", "other"),  # nor a declared type alone
        ("notes.txt", "text/plain", b"\xff\xfe\x00bad", "other"),  # not UTF-8, has NULs
        ("a.zip", "application/zip", b"PK\x03\x04", "other"),
    ],
)
def test_files_are_classified_by_name_type_and_bytes(name: str, mime: str, data: bytes, kind: str) -> None:
    assert classify(IncomingFile(name, mime, data))[0] == kind


def test_a_long_text_file_is_cut_and_says_so() -> None:
    kind, _, text, truncated = classify(
        IncomingFile("big.log", "text/plain", b"x" * (attachments.MAX_TEXT_CHARS + 5))
    )
    assert kind == "text" and truncated and text is not None and len(text) == attachments.MAX_TEXT_CHARS


def test_names_are_made_safe() -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\Users\\me\\report.pdf") == "report.pdf"
    assert safe_name("a\x00b<c>.txt") == "a_b_c_.txt"
    assert safe_name("...") == "file"


def test_storing_twice_writes_one_file_in_the_sessions_folder(tmp_path: Path) -> None:
    files = [IncomingFile("r.csv", "text/csv", b"a,b\n")]
    first = attachments.store(tmp_path, "slack:C1:1.2", files)
    again = attachments.store(tmp_path, "slack:C1:1.2", files)
    assert first == again
    [stored] = first
    assert Path(stored.path).read_bytes() == b"a,b\n" and Path(stored.path).stat().st_mode & 0o777 == 0o600
    assert Path(stored.path).parent == attachments.folder_of(tmp_path, "slack:C1:1.2")
    assert len(list(Path(stored.path).parent.iterdir())) == 1
    attachments.erase(tmp_path, "slack:C1:1.2")
    assert not Path(stored.path).exists()


GITHUB = "ghp_" + "a" * 36


def test_no_stored_file_holds_a_secret_the_scanner_knows(tmp_path: Path) -> None:
    """A text file is kept redacted (as the model reads it), any other file masked in place
    (same length, so it keeps its structure), a name redacted; the kinds say what went."""
    text = f"deploy with token {GITHUB}\n".encode() + b"x" * attachments.MAX_TEXT_CHARS
    pdf = b"%PDF-1.4\n1 0 obj << /Author (" + GITHUB.encode() + b") >> endobj\n\x00\xff trailer"
    stored = attachments.save(
        tmp_path,
        "api:s",
        [
            IncomingFile("notes.txt", "text/plain", text),
            IncomingFile("report.pdf", "application/pdf", pdf),
            IncomingFile(f"{GITHUB}.log", "text/plain", b"nothing secret"),
        ],
    )
    note, report, named = stored.files
    kept = Path(note.path).read_bytes()
    assert GITHUB.encode() not in kept and kept.startswith(b"deploy with token [redacted: GitHub Token]\n")
    assert note.size == len(kept) and note.truncated and note.text is not None
    assert note.text.startswith("deploy with token [redacted: GitHub Token]")
    masked = Path(report.path).read_bytes()
    assert len(masked) == len(pdf) == report.size and GITHUB.encode() not in masked
    assert masked == pdf.replace(GITHUB.encode(), b"*" * len(GITHUB))
    assert GITHUB not in named.name and GITHUB not in named.path and named.name.endswith(".log")
    assert stored.redacted == ("GitHub Token",)
    assert not [p for p in Path(note.path).parent.iterdir() if GITHUB.encode() in p.read_bytes()]


def test_a_file_without_secrets_is_stored_as_it_came(tmp_path: Path) -> None:
    data = PNG + b"IEND password" + bytes(range(256))
    stored = attachments.save(tmp_path, "s", [IncomingFile("s.png", "image/png", data)])
    assert Path(stored.files[0].path).read_bytes() == data and stored.redacted == ()


def test_limits_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"'empty\.txt' is empty") as refused:
        attachments.store(tmp_path, "s", [IncomingFile("empty.txt", "text/plain", b"")])
    assert refused.value.field == "files[0]"
    with pytest.raises(InvalidInput, match="at most 10 files"):
        attachments.store(tmp_path, "s", [IncomingFile(f"{i}", "text/plain", b"x") for i in range(11)])


# -- what the model reads -----------------------------------------------------------------------


def test_a_plain_message_is_its_content() -> None:
    message = ChatMessage("u1", "user", "hello", 0.0)
    assert model_text(message) is message.content


def test_speaker_earlier_thread_and_files_in_order(tmp_path: Path) -> None:
    [log, image] = attachments.store(
        tmp_path, "s", [IncomingFile("a.log", "text/plain", b"boom"), IncomingFile("s.png", "image/png", PNG)]
    )
    prior = prior_block(
        [PriorMessage("U1", "Alice", "it broke"), PriorMessage("U2", "", "again")], left_out=2
    )
    message = ChatMessage(
        "u1", "user", "why?", 0.0, user="U3", user_name="Carol", prior=prior, files=(log, image)
    )
    assert model_text(message) == (
        "[Earlier in this conversation, before you were addressed:]\n(2 earlier messages left out)\n"
        "[Alice] it broke\n[U2] again\n[End of the earlier messages.]\n\n"
        "[Carol] why?\n\n[attached file a.log (text/plain, 4 bytes)]\nboom\n[end of a.log]\n\n"
        "[attached image s.png (image/png, 24 bytes); this model cannot see images]"
    )
    assert "shown below" in model_text(message, vision=True)
    # The journaled form round-trips exactly.
    assert ChatMessage.from_dict(message.to_dict()) == message


def test_the_newest_earlier_messages_are_kept_within_both_bounds() -> None:
    prior = [PriorMessage("U1", "A", f"message number {i}") for i in range(6)]
    kept, left_out = bounded_prior(prior, max_messages=3, max_tokens=1000, count=len)
    assert [m.text[-1] for m in kept] == ["3", "4", "5"] and left_out == 3
    kept, left_out = bounded_prior(prior, max_messages=3, max_tokens=40, count=len)  # 20 a message
    assert [m.text[-1] for m in kept] == ["4", "5"] and left_out == 4
    assert bounded_prior(prior, max_messages=0, max_tokens=1000, count=len) == ([], 6)


# -- Slack mrkdwn -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("*it* and _it_", "_it_ and _it_"),
        ("~~gone~~", "~gone~"),
        ("# Heading", "*Heading*"),
        ("## **Bold** heading", "*Bold heading*"),
        ("- one\n  * two", "• one\n  • two"),
        ("[site](https://x.test/a?b=1&c=2)", "<https://x.test/a?b=1&amp;c=2|site>"),
        ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
        ("`**not bold**` **bold**", "`**not bold**` *bold*"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("<!channel> <@U1>", "&lt;!channel&gt; &lt;@U1&gt;"),
        ("> quoted", "> quoted"),
        ("2*3*4 and snake_case_name", "2*3*4 and snake_case_name"),
        ("```python\nx = **1** < 2\n```", "```\nx = **1** &lt; 2\n```"),
    ],
)
def test_markdown_becomes_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


@given(st.text(alphabet=st.sampled_from("ab <>&@!|[]()*_~`#-\n:/"), max_size=200))
def test_no_control_sequence_but_our_links_reaches_slack(markdown: str) -> None:
    converted = to_mrkdwn(markdown)
    # Every "<" Slack sees opens a link we made from [label](http…) — never a ping or a forgery.
    for match in re.finditer("<", converted):
        assert converted.startswith(("<http", "<mailto:"), match.start())


def test_code_fences_stay_intact_across_split_pieces() -> None:
    text = "intro\n\n```py\n" + "\n".join(f"line_{i} = **{i}**" for i in range(200)) + "\n```\nafter **bold**"
    pieces = [to_mrkdwn(p) for p in split_message(text, 600)]
    assert len(pieces) > 3
    for piece in pieces:
        assert piece.count("```") % 2 == 0
    assert all("**" in p for p in pieces[1:-1])  # code keeps its asterisks
    assert pieces[-1].endswith("after *bold*")


def test_streamed_markdown_cannot_ping() -> None:
    assert "<!channel>" not in no_pings("hey <!channel> <@U1> <#C1>")
    assert no_pings("a < b") == "a < b"


# -- memory by place ----------------------------------------------------------------------------------


def test_default_scopes_follow_the_session_id() -> None:
    assert default_scope("slack:C1:123.4") == "slack:C1"
    assert default_scope("slack:D9:123.4") == "slack:D9"  # one person's DM channel
    assert default_scope("discord:4000") == "discord:4000"
    assert default_scope("webhook:gh:abc") == "webhook:gh"
    assert default_scope("cli:main") is None and default_scope("notes") is None


def test_a_dm_is_team_only_when_an_allowlist_vetted_the_sender() -> None:
    assert dm_audience(ChannelAccess(users=["U1"])) == "team"
    assert dm_audience(ChannelAccess()) == "public"
    settings = Settings()
    assert audience_of("slack:D1:1.0", settings, Place("slack:D1", "public")) == "public"
    assert audience_of("slack:C1:1.0", settings, Place("slack:C1")) == "team"


def test_memory_scope_per_audience() -> None:
    place = Place("discord:100")
    assert recall_scope("discord:4000", "team", Settings(), place) == "discord:100"
    wide = Settings(audiences={"team": {"memory_scope": "audience"}})  # type: ignore[dict-item]
    assert recall_scope("discord:4000", "team", wide, place) is None
    off = Settings(audiences={"team": {"memory_scope": "none"}})  # type: ignore[dict-item]
    assert not recall_allowed("team", off)


async def test_search_keeps_to_the_scope_and_audience_wide_memories(tmp_path: Path) -> None:
    path = tmp_path / "netclaw.db"
    prepare_database(path)
    store = await SqliteMemoryStore(path).open()
    try:
        await store.add(
            [NewMemory("deploys happen on tuesday")],
            session_id="slack:C1:1",
            audience="team",
            scope="slack:C1",
        )
        await store.add([NewMemory("deploys freeze in december")], session_id="cli:x", audience="team")
        await store.add(
            [NewMemory("deploys need two approvals")],
            session_id="slack:C2:1",
            audience="team",
            scope="slack:C2",
        )
        found = {m.text for m in await store.search("deploys", audience="team", scope="slack:C1")}
        assert found == {"deploys happen on tuesday", "deploys freeze in december"}
        assert len(await store.search("deploys", audience="team")) == 3
    finally:
        await store.close()


def test_the_migration_places_existing_memories_it_can(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    before = [m for m in load_migrations() if m.version < 9]
    apply_migrations(conn, before)
    for session in ("slack:C1:123.4", "webhook:gh:abc", "discord:4000", "cli:main"):
        conn.execute(
            "INSERT INTO memories (text, kind, session_id, audience, created, norm) VALUES (?, 'fact', ?, 'team', 0, ?)",
            (f"from {session}", session, session),
        )
    conn.commit()
    apply_migrations(conn, load_migrations())
    placed = dict(conn.execute("SELECT session_id, scope FROM memories").fetchall())
    assert placed == {
        "slack:C1:123.4": "slack:C1",
        "webhook:gh:abc": "webhook:gh",
        "discord:4000": None,  # the thread's channel is not in its id: audience-wide
        "cli:main": None,
    }
