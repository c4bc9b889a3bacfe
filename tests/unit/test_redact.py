"""Secret shapes found and replaced (pure): vendor tokens through detect-secrets' plugins,
the shapes added here, only the value of a ``password=`` pair, and ordinary text — hashes,
ids, prose about passwords — left alone."""

from __future__ import annotations

import pytest

from netclaw.redact import redact

CASES = [
    ("key sk-ant-api03-" + "a1B2" * 10 + " ok", "key [redacted: Anthropic Key] ok"),
    ("OPENAI=sk-proj-" + "Ab3" * 15, "OPENAI=[redacted: OpenAI Key]"),
    ("xoxb-123456789012-1234567890123-" + "x" * 24, "[redacted: Slack Token]"),
    ("xapp-1-A0123ABCD-1234567890-" + "ab12" * 8, "[redacted: Slack Token]"),
    ("ghp_" + "a" * 36, "[redacted: GitHub Token]"),
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
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text).text == text and not redact(text).changed


def test_every_occurrence_goes_and_kinds_are_listed_once() -> None:
    token = "ghp_" + "b" * 36
    done = redact(f"{token} and again {token}")
    assert done.text == "[redacted: GitHub Token] and again [redacted: GitHub Token]"
    assert done.kinds == ("GitHub Token",)
