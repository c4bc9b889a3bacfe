"""Secret shapes found and replaced (pure): vendor tokens through detect-secrets' plugins,
the shapes added here, only the value of a ``password=`` pair, the daemon's own secrets by
value; ordinary output — hashes, ids, paths, ``PWD=``, code, the corpus of real command
output in ``redact_corpus/`` — left alone; files masked in place, tool-call arguments
still JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.messages import PriorMessage
from netclaw.security import redact as redaction
from netclaw.security.redact import (
    HIDDEN,
    KNOWN,
    Scrubber,
    mask,
    redact,
    redact_arguments,
    redact_identity,
    redact_known,
    redact_prior,
    scrub,
    scrub_bytes,
)

CORPUS = Path(__file__).parent / "redact_corpus" / "ordinary_output.txt"
GITHUB = "ghp_" + "a" * 36
SLACK = "xoxb-123456789012-1234567890123-" + "x" * 24

CASES = [
    ("key sk-ant-api03-" + "a1B2" * 10 + " ok", "key [redacted: Anthropic Key] ok"),
    ("OPENAI=sk-proj-" + "Ab3" * 15, "OPENAI=[redacted: OpenAI Key]"),
    (SLACK, "[redacted: Slack Token]"),
    ("xapp-1-A0123ABCD-1234567890-" + "ab12" * 8, "[redacted: Slack Token]"),
    (GITHUB, "[redacted: GitHub Token]"),
    ("github_pat_11" + "A" * 30, "[redacted: GitHub Token]"),
    ("id AKIAIOSFODNN7EXAMPLE", "id [redacted: AWS Access Key]"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nafter",
        "[redacted: Private Key]\nafter",
    ),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl... cut", "[redacted: Private Key]"),
    ("db password=hunter22 done", "db password=[redacted: Secret Keyword] done"),
    ('{"api_key": "abcd1234efgh"}', '{"api_key": "[redacted: Secret Keyword]"}'),
    ("postgres://bob:s3cr3tpass@db/x", "postgres://bob:[redacted: Basic Auth Credentials]@db/x"),
    ('{"token":"abc123def"}', '{"token":"[redacted: Secret Keyword]"}'),
    # Shapes a shell session or a config file shows.
    (f"export GITHUB_TOKEN={GITHUB}", "export GITHUB_TOKEN=[redacted: GitHub Token]"),
    ("DB_PASSWORD=s3cr3t!pass", "DB_PASSWORD=[redacted: Secret Keyword]"),
    ("  password: 'Tr0ub4dor&3'", "  password: '[redacted: Secret Keyword]'"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = [redacted: Secret Keyword]",
    ),
    (
        "git push https://oauth2:glpat-Ab12Cd34Ef56Gh78Ij90@gitlab.example.com/x.git",
        "git push https://oauth2:[redacted: Basic Auth Credentials]@gitlab.example.com/x.git",
    ),
    ("token glpat-Ab12Cd34Ef56Gh78Ij90kl done", "token [redacted: GitLab Token] done"),
    (
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl",
        "Authorization: Bearer [redacted: JSON Web Token]",
    ),
    # A secret found in context goes wherever it is repeated.
    (
        "password=hunter2222 and later hunter2222",
        "password=[redacted: Secret Keyword] and later [redacted: Secret Keyword]",
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_secret_shapes_are_replaced(text: str, expected: str) -> None:
    done = redact(text)
    assert done.text == expected and done.changed


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f2a9c1e5b7d4f6a8c0e2b4d6f8a0c2e4b6d8f0a and uuid 123e4567-e89b-12d3-a456-426614174000",
        "What is a good password? The secret to success is practice.",
        "see https://example.com/a/b?c=d and sk-learn docs",
        "PWD=/tmp/foo",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text).text == text and not redact(text).changed


def corpus_lines() -> list[str]:
    return [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if not line.startswith("# ")]


def test_ordinary_command_output_comes_through_unchanged() -> None:
    """Real output of git, ls, env, ps, pip, docker, npm, sha256sum and friends, and
    hand-picked lines of logs, code and config: nothing in it is a secret."""
    text = CORPUS.read_text(encoding="utf-8")
    whole = redact(text)
    changed = [f"{line!r} became {redact(line).text!r}" for line in text.splitlines() if redact(line).changed]
    assert not changed, "\n".join(changed)
    assert whole.text == text and not whole.changed  # as one text too (lines side by side)


@pytest.mark.parametrize(
    "line",
    [
        "PWD=/tmp/foo",
        "OLDPWD=/home/dev/project",
        'declare -x PWD="/home/dev/project"',
        "Enter password:\n-rw-------  1 dev dev   44 Nov 28 16:37 control.token",
        "def login(user: str, password: str) -> bool:",
        'api_key = os.environ["OPENAI_API_KEY"]',
        "password: ${POSTGRES_PASSWORD}",
        "passwd: password updated successfully",
        'password: "********"',
        "speaker=token:intern role=member",
    ],
)
def test_the_corpus_holds_what_was_once_taken_for_a_secret(line: str) -> None:
    assert line in CORPUS.read_text(encoding="utf-8")


def _all_texts() -> list[str]:
    return [text for text, _ in CASES] + corpus_lines()


def test_redacting_twice_changes_nothing_more() -> None:
    for text in _all_texts():
        once = redact(text).text
        assert redact(once).text == once, text


def test_the_literal_hints_skip_only_patterns_that_could_not_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern runs only on a text holding one of its hints: without the hints every
    text is redacted exactly the same."""
    texts = [*_all_texts(), CORPUS.read_text(encoding="utf-8")]
    hinted = [redact(t) for t in texts]
    monkeypatch.setattr(redaction, "SHAPES", tuple(replace(s, hints=()) for s in redaction.SHAPES))
    assert [redact(t) for t in texts] == hinted


def test_every_detect_secrets_pattern_has_its_reading() -> None:
    """After an upgrade of detect-secrets a new pattern still runs (whole, always), but its
    hints and the group holding its secret are to be written down in netclaw/security/redact.py."""
    patterns = [p.pattern for plugin in redaction.PLUGINS for p in plugin.denylist]
    assert [p for p in patterns if p not in redaction.PLUGIN_READING] == []


def test_every_occurrence_goes_and_kinds_are_listed_once() -> None:
    token = "ghp_" + "b" * 36
    done = redact(f"{token} and again {token}")
    assert done.text == "[redacted: GitHub Token] and again [redacted: GitHub Token]"
    assert done.kinds == ("GitHub Token",)


def test_the_prior_conversation_loses_secrets_in_its_names_too() -> None:
    prior = [PriorMessage("U1", "Ana", "hi"), PriorMessage(GITHUB, f"bob {SLACK}", f"use {GITHUB}")]
    done, kinds = redact_prior(prior)
    assert done[0] is prior[0]
    assert GITHUB not in str(done) and SLACK not in str(done)
    assert kinds == ("GitHub Token", "Slack Token")


def test_an_identity_with_a_secret_becomes_the_same_digest_each_time() -> None:
    first, again = redact_identity(f"idem:{GITHUB}"), redact_identity(f"idem:{GITHUB}")
    assert first == again and first.changed and GITHUB not in first.text
    assert redact_identity(f"idem:{'ghp_' + 'c' * 36}").text != first.text
    assert redact_identity("idem:abc") == redaction.Redacted("idem:abc")


# -- the daemon's own secrets ---------------------------------------------------------------------


@pytest.fixture
def known() -> Iterator[str]:
    value = "nctl-Zk3q8Rw1Yp0aBc"  # no shape: found only because it is known
    holder = object()
    KNOWN.hold(holder, [value, "short"])
    try:
        yield value
    finally:
        KNOWN.release(holder)


def test_a_known_secret_is_redacted_whatever_its_shape(known: str) -> None:
    done = redact(f"the token is {known}.")
    assert done.text == "the token is [redacted: Daemon Secret]." and done.kinds == ("Daemon Secret",)
    assert redact("a short word").text == "a short word"  # too short to be held
    assert (
        redact_known(f"x {known} password=hunter22").text == "x [redacted: Daemon Secret] password=hunter22"
    )


def test_scrubbing_finds_a_known_secret_as_text_and_in_json(known: str) -> None:
    assert scrub(f"a {known} b") == f"a {HIDDEN} b"
    body = json.dumps({"messages": [{"content": f"x{known}y"}]}).encode()
    assert known.encode() not in scrub_bytes(body) and HIDDEN.encode() in scrub_bytes(body)
    plain = b'{"content": "nothing here"}'
    assert scrub_bytes(plain) is plain  # nothing found: the same object, no copy


def test_a_secret_needing_json_escapes_is_scrubbed_as_json_writes_it() -> None:
    scrubber = Scrubber(['pa"ss\\wörd-123'])
    for body in (
        json.dumps({"x": 'pa"ss\\wörd-123'}),
        json.dumps({"x": 'pa"ss\\wörd-123'}, ensure_ascii=False),
    ):
        assert b"ss" not in scrubber.scrub_bytes(body.encode())


def test_a_released_daemon_s_secrets_are_no_longer_known(known: str) -> None:
    holder = object()
    KNOWN.hold(holder, ["other-secret-value"])
    KNOWN.release(holder)
    assert redact("other-secret-value").text == "other-secret-value"
    assert redact(known).changed  # the other holder's still are


# -- files and tool calls -------------------------------------------------------------------------


def test_a_binary_file_is_masked_in_place() -> None:
    data = (
        b"%PDF-1.7\n\x00\x01\x02 obj << /Key (" + GITHUB.encode() + b") >> \xff\xfe password=hunter22\n\x00"
    )
    masked, kinds = mask(data)
    assert len(masked) == len(data) and GITHUB.encode() not in masked and b"hunter22" not in masked
    assert masked.replace(b"*", b"") == data.replace(GITHUB.encode(), b"").replace(b"hunter22", b"")
    assert kinds == ("GitHub Token", "Secret Keyword")
    plain = bytes(range(256)) * 4
    assert mask(plain) == (plain, ())


def test_tool_call_arguments_stay_json_and_lose_their_secrets() -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"
    arguments = json.dumps({"path": "k", "content": f"{key}\nuser=me", "env": {"T": GITHUB}, "n": 3})
    done = redact_arguments(arguments)
    parsed = json.loads(done.text)
    assert parsed == {
        "path": "k",
        "content": "[redacted: Private Key]\nuser=me",
        "env": {"T": "[redacted: GitHub Token]"},
        "n": 3,
    }
    assert done.kinds == ("Private Key", "GitHub Token")
    plain = '{"command":  "git log -n 3"}'
    assert redact_arguments(plain).text is plain  # untouched: not even re-serialised
    assert redact_arguments(f"not json {GITHUB}").text == "not json [redacted: GitHub Token]"


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("sk-one-two-three", True),
        ("hunter2hunter2", True),
        ("postgresql://netclaw:pw@db/netclaw", True),
        ("/tmp/pytest-of-root/markers", False),  # an MCP server's env_env passes a directory
        ("production", False),
        ("https://gitlab.example.com", False),
        ("short1", False),
        ("two words1", False),
    ],
)
def test_only_a_value_that_could_be_a_secret_is_known_by_its_name(value: str, secret: bool) -> None:
    assert redaction.could_be_secret_value(value) is secret


_HINTS = sorted({h for shape in redaction.SHAPES for h in shape.hints})
_PIECES = st.one_of(
    st.sampled_from(_HINTS),
    st.sampled_from([h.upper() for h in _HINTS] + [h.title() for h in _HINTS]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-=.:/ \"'", max_size=40),
    st.sampled_from(
        ["password=hunter2hunter2", "AKIAIOSFODNN7EXAMPLE", "ghp_" + "a1" * 18, "xoxb-" + "1" * 30]
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=8).map("".join))
def test_the_one_search_for_hints_finds_whatever_every_shape_would(text: str) -> None:
    # The reference: every shape runs, as if some hint were always present.
    always = re.compile("")
    found = redact(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redaction, "_ANY_HINT", always)
        assert redact(text) == found
