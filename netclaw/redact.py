"""Secrets out of transcripts: find well-known secret shapes in text and replace them.

Applied where text enters: to every incoming message (and the earlier conversation and
text files that come with it) in the gateway, before it is admitted, and to every tool
result where the registry builds it. What is journaled, sent to a provider and shown by
``sessions show`` is then the redacted text; the secret itself is kept nowhere.

The vendor token shapes come from Yelp's ``detect-secrets`` (its regex plugins: AWS,
GitHub, GitLab, Slack, Discord, OpenAI, Stripe, npm, PyPI, SendGrid, Twilio, JWTs, basic
auth in URLs, …). Added here, for shapes it does not know or that need the whole span:
current OpenAI and Anthropic keys, Slack app tokens, GitHub fine-grained tokens, Google API
keys, whole private-key blocks, and ``password=…``-style pairs (only the value goes).

Its limits: a secret in no known shape (a random password said in prose) passes; a
``password: …`` pair may take an ordinary word after the keyword.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from netclaw.messages import Attachment, PriorMessage

PLACEHOLDER = "[redacted: {kind}]"

# Regex plugins only: no entropy guesses (hashes and ids are everywhere in chat), no
# keyword plugin (its value pattern runs to the end of a line of prose).
_PLUGINS: tuple[RegexBasedDetector, ...] = (
    AWSKeyDetector(),
    ArtifactoryDetector(),
    AzureStorageKeyDetector(),
    BasicAuthDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    JwtTokenDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TwilioKeyDetector(),
)

_KEYWORDS = (
    r"password|passwd|passphrase|pwd|secret|client[_-]?secret|api[_-]?key|apikey|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key|auth[_-]?token|access[_-]?token|token"
)
# (kind, pattern, group holding the secret)
_OWN: tuple[tuple[str, re.Pattern[str], int], ...] = (
    (
        "Private Key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        0,
    ),
    ("Anthropic Key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), 0),
    ("OpenAI Key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}"), 0),
    ("Slack Token", re.compile(r"\bxapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"), 0),
    ("Slack Token", re.compile(r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}"), 0),
    ("GitHub Token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), 0),
    ("GitHub Token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), 0),
    ("Google API Key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), 0),
    (
        "Discord Bot Token",
        re.compile(r"\b[MNO][A-Za-z\d_\-]{23,27}\.[A-Za-z\d_\-]{6}\.[A-Za-z\d_\-]{27,40}"),
        0,
    ),
    (
        "Secret Keyword",
        re.compile(
            rf"(?i)(?<![A-Za-z0-9])(?:{_KEYWORDS})(?:[\"'\]]{{0,2}})\s*(?::=|=>|=|:)\s*"
            r"([\"']?)(?P<value>[^\s\"',;`<>]{4,})\1"
        ),
        -1,  # the named group "value"
    ),
)


@dataclass(frozen=True, slots=True)
class Redacted:
    """``text`` with every secret found replaced; ``kinds``: what was found (in order, once each)."""

    text: str
    kinds: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.kinds)


def _spans(text: str) -> Iterator[tuple[int, int, str]]:
    for kind, pattern, group in _OWN:
        for match in pattern.finditer(text):
            if group == -1:
                yield match.start("value"), match.end("value"), kind
            else:
                yield match.start(group), match.end(group), kind
    for plugin in _PLUGINS:
        for value in set(plugin.analyze_string(text)):
            if len(value) < 8:  # a too-short "secret" would blank ordinary text everywhere
                continue
            start = text.find(value)
            while start != -1:
                yield start, start + len(value), str(plugin.secret_type)
                start = text.find(value, start + len(value))


def redact(text: str) -> Redacted:
    """Every secret-shaped span of ``text`` replaced by ``[redacted: <kind>]``."""
    if not text:
        return Redacted(text)
    spans = sorted(_spans(text), key=lambda s: (s[0], -s[1]))
    if not spans:
        return Redacted(text)
    out: list[str] = []
    kinds: list[str] = []
    at = 0
    for start, end, kind in spans:
        if end <= at:
            continue  # inside a span already replaced
        if start < at:  # overlaps the previous one: extend it
            start = at
        else:
            out.append(text[at:start])
            out.append(PLACEHOLDER.format(kind=kind))
            if kind not in kinds:
                kinds.append(kind)
        at = end
    out.append(text[at:])
    return Redacted("".join(out), tuple(kinds))


def notice(kinds: Sequence[str]) -> str:
    """What the person who sent the secret is told."""
    return (
        f"I removed what looked like a secret ({', '.join(kinds)}) from your message before "
        "storing it or showing it to the model. If it is real, rotate it: it was sent over the chat."
    )


def _merge(kinds: list[str], more: Sequence[str]) -> None:
    kinds.extend(k for k in more if k not in kinds)


def redact_prior(prior: Sequence[PriorMessage]) -> tuple[tuple[PriorMessage, ...], tuple[str, ...]]:
    """The earlier conversation a message comes with, redacted."""
    kinds: list[str] = []
    out = []
    for message in prior:
        done = redact(message.text)
        _merge(kinds, done.kinds)
        out.append(replace(message, text=done.text) if done.changed else message)
    return tuple(out), tuple(kinds)


def redact_files(files: Sequence[Attachment]) -> tuple[tuple[Attachment, ...], tuple[str, ...]]:
    """Attached text files as the model gets them (``Attachment.text``), redacted."""
    kinds: list[str] = []
    out = []
    for file in files:
        done = redact(file.text or "")
        _merge(kinds, done.kinds)
        out.append(replace(file, text=done.text) if done.changed else file)
    return tuple(out), tuple(kinds)
