"""Secrets out of transcripts, requests and answers: one mechanism, two kinds of secret.

- **Secret shapes** (:func:`redact`): well-known token shapes in any text become
  ``[redacted: <kind>]``. The vendor shapes come from Yelp's ``detect-secrets`` (its regex
  plugins: AWS, GitHub, GitLab, Slack, Discord, OpenAI, Stripe, npm, PyPI, SendGrid, Twilio,
  JWTs, basic auth in URLs, …). Added here, for shapes it does not know or that need the
  whole span: current OpenAI and Anthropic keys, Slack app tokens, GitHub fine-grained
  tokens, Google API keys, whole private-key blocks, and ``password=…``-style pairs (only
  the value goes, and only a value that could be one: not a path, a ``$VARIABLE``, a mask
  like ``****``, or code such as ``os.environ["KEY"]`` or ``password: str)``).
- **Known secrets** (:class:`Scrubber`, :data:`KNOWN`): the daemon's own secret values —
  the control token and every value a ``*_env`` key of the config names. A running daemon
  tells :data:`KNOWN` (``hold``); :func:`redact` replaces them as ``[redacted: Daemon
  Secret]``, and :func:`scrub` / :func:`scrub_bytes` replace them as ``[hidden]``, a
  substring check per secret, cheap enough for every provider request body and every API
  answer (the last line of defence).

Where it is applied (each the one place for its input): the gateway redacts every
incoming message, its sender's names and ids and the earlier conversation that comes with
it before it is admitted; :mod:`netclaw.attachments` stores files without the secrets it
finds (:func:`redact` for text files, :func:`mask` for the others); the tool registry
redacts every result; the session core redacts the arguments of the tool calls a model
writes (:func:`redact_arguments`) before they are recorded, shown, asked about or run —
given the known secrets by its env (``known``), as it reads nothing process-wide. The
HTTP providers scrub each request body, the control API each answer and SSE event. What
is journaled, sent to a provider and shown by ``sessions show`` is then the redacted text;
the secret itself is kept nowhere.

Its limits: a secret in no known shape (a random password said in prose) passes; a
``password: …`` pair may take an ordinary word after the keyword, and one written
``password:value`` (no space, no quotes: read as a name like ``token:ci``) passes; a
secret inside a compressed or UTF-16 file is not seen; a known secret split across two
streamed text deltas passes the stream (the model never receives one to repeat).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

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

from netclaw.config import Settings
from netclaw.config.credentials import read_secret
from netclaw.errors import ConfigError
from netclaw.messages import PriorMessage

PLACEHOLDER = "[redacted: {kind}]"
KNOWN_KIND = "Daemon Secret"  # the control token, a secret the config names
HIDDEN = "[hidden]"  # what scrubbing leaves of a known secret
MIN_SECRET_CHARS = 6  # a shorter known value would be replaced inside ordinary words
MASK = ord("*")  # what a secret's bytes become in a file that is not text

# Regex plugins only: no entropy guesses (hashes and ids are everywhere in chat), no
# keyword plugin (its value pattern runs to the end of a line of prose).
PLUGINS: tuple[RegexBasedDetector, ...] = (
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
_KEYWORD = "Secret Keyword"


@dataclass(frozen=True, slots=True)
class _Shape:
    """A secret shape: ``pattern``'s group ``group`` (``"value"`` for the keyword pairs).

    ``hints``: literals of which at least one occurs in every match — the pattern runs only
    on a text holding one (a substring search is a hundred times cheaper than a pattern's
    scan); ``folded``: the hints are lower case and looked for in the lower-cased text.
    No hints: the pattern always runs."""

    kind: str
    pattern: re.Pattern[str]
    group: int | str = 0
    hints: tuple[str, ...] = ()
    folded: bool = False
    plugin: bool = False  # detect-secrets': its matches trimmed, and never shorter than 8


_GH = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
_OWN: tuple[_Shape, ...] = (
    _Shape(
        "Private Key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        hints=("PRIVATE KEY",),
    ),
    _Shape("Anthropic Key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), hints=("sk-ant-",)),
    _Shape("OpenAI Key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}"), hints=("sk-",)),
    _Shape("Slack Token", re.compile(r"\bxapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"), hints=("xapp-",)),
    _Shape("Slack Token", re.compile(r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}"), hints=("xox",)),
    _Shape("GitHub Token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), hints=("github_pat_",)),
    _Shape("GitHub Token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), hints=_GH),
    _Shape("Google API Key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), hints=("AIza",)),
    # detect-secrets' JWT pattern stops before the signature: the whole token goes.
    _Shape(
        "JSON Web Token",
        re.compile(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
        hints=("eyJ",),
    ),
    _Shape(
        "Discord Bot Token",
        re.compile(r"\b[MNO][A-Za-z\d_\-]{23,27}\.[A-Za-z\d_\-]{6}\.[A-Za-z\d_\-]{27,40}"),
    ),
    _Shape(
        _KEYWORD,
        # The separator's spaces stay on its line: "Enter password:\n<next line>" is no pair.
        # A bare colon needs a space or a quote after it: "token:ci" (a speaker), "secrets:read"
        # (a scope) are names; "token: abc", "token":"abc" are pairs.
        re.compile(
            rf"(?i)(?<![A-Za-z0-9])(?:{_KEYWORDS})(?:[\"'\]]{{0,2}})"
            r"(?:[ \t]*(?::=|=>|=)[ \t]*|[ \t]*:(?:[ \t]+|(?=[\"'])))"
            r"([\"']?)(?P<value>[^\s\"',;`<>]{4,})\1"
        ),
        "value",
        hints=("pass", "pwd", "secret", "key", "token"),
        folded=True,
    ),
)

# How each detect-secrets pattern is read: the literals every match holds (see _Shape), and
# the group that is the secret (0: the whole match). A pattern missing here (after an
# upgrade of detect-secrets) always runs and counts whole.
PLUGIN_READING: dict[str, tuple[tuple[str, ...], bool, int]] = {
    r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}": (("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), False, 0),
    r"aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]": (
        ("aws",),
        True,
        1,
    ),
    r'(?:\s|=|:|"|^)AKC[a-zA-Z0-9]{10,}(?:\s|"|$)': (("AKC",), False, 0),
    r'(?:\s|=|:|"|^)AP[\dABCDEF][a-zA-Z0-9]{8,}(?:\s|"|$)': (("AP",), False, 0),
    r"AccountKey=[a-zA-Z0-9+\/=]{88}": (("AccountKey=",), False, 0),
    r"://[^:/\?\#\[\]@!\$\&'\(\)\*\+,;=\s]+:([^:/\?\#\[\]@!\$\&'\(\)\*\+,;=\s]+)@": (("://",), False, 1),
    r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}": ((), False, 0),
    r"(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}": (_GH, False, 0),
    r"(glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,50}(?!\w)": (
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"),
        False,
        0,
    ),
    r"GR1348941[A-Za-z0-9_\-]{20,50}(?!\w)": (("GR1348941",), False, 0),
    r"glcbt-([0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}(?!\w)": (("glcbt-",), False, 0),
    r"glimt-[A-Za-z0-9_\-]{25}(?!\w)": (("glimt-",), False, 0),
    r"glptt-[A-Za-z0-9_\-]{40}(?!\w)": (("glptt-",), False, 0),
    r"glagent-[A-Za-z0-9_\-]{50,1024}(?!\w)": (("glagent-",), False, 0),
    r"gloas-[A-Za-z0-9_\-]{64}(?!\w)": (("gloas-",), False, 0),
    r"eyJ[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*?": (("eyJ",), False, 0),
    r"[0-9a-z]{32}-us[0-9]{1,2}": (("-us",), False, 0),
    r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": ((":_authToken=",), False, 1),
    r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}": (("T3BlbkFJ",), False, 0),
    r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9-_]{70,}": (("pypi-AgEIcHlwaS5vcmc",), False, 0),
    r"pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9-_]{70,}": (("pypi-AgENdGVzdC5weXBpLm9yZw",), False, 0),
    r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}": (("SG.",), False, 0),
    r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+": (("xox",), True, 0),
    r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+": (
        ("hooks.slack.com",),
        True,
        0,
    ),
    r"sq0csp-[0-9A-Za-z\\\-_]{43}": (("sq0csp-",), False, 0),
    r"(?:r|s)k_live_[0-9a-zA-Z]{24}": (("k_live_",), False, 0),
    r"AC[a-z0-9]{32}": (("AC",), False, 0),
    r"SK[a-z0-9]{32}": (("SK",), False, 0),
}


def _plugin_shapes() -> tuple[_Shape, ...]:
    shapes = []
    for plugin in PLUGINS:
        for pattern in plugin.denylist:
            hints, folded, group = PLUGIN_READING.get(pattern.pattern, ((), False, 0))
            shapes.append(_Shape(str(plugin.secret_type), pattern, group, hints, folded, plugin=True))
    return tuple(shapes)


SHAPES: tuple[_Shape, ...] = (*_OWN, *_plugin_shapes())


def _any_of(hints: set[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(h) for h in sorted(hints, key=len, reverse=True)) or r"(?!)")


# Most text holds none of the shapes' hints (every message and name on the way in is
# scanned): one C-speed search for any of them, instead of a check per shape. Only when
# one is present do the shapes with hints run (each checking its own, as before).
_ANY_HINT = _any_of({h for shape in SHAPES if not shape.folded for h in shape.hints})
_ANY_FOLDED_HINT = _any_of({h for shape in SHAPES if shape.folded for h in shape.hints})
_HINTLESS = tuple(shape for shape in SHAPES if not shape.hints)

# What follows ``password=`` (or ``token:``…) without being a secret.
_NOT_SECRET_WORDS = frozenset(
    "none null nil true false undefined empty required optional string str bytes int bool any "
    "object await new self this yes no on off default redacted hidden masked secret secrets "
    "password passwd passphrase pwd token tokens key apikey".split()
)
_PATH = re.compile(r"(?:/|~/|\.\.?/)")
_REFERENCE = re.compile(r"(?:\$[A-Za-z_{(]|%[A-Za-z_]\w*%|\{|\[|\(|![A-Za-z]+$)")
_CODE = re.compile(
    r"[A-Za-z_][\w.]*[(\[]"  # a call or a subscript: get_token(), os.environ[
    r"|[A-Za-z_]+(?:\.[A-Za-z_]+)+[;,)]*$"  # a dotted name: settings.SECRET_KEY, process.env.KEY
    r"|[A-Za-z_]+\)[,;:]?$"  # the end of a signature: password: str)
)


def _could_be_secret(value: str) -> bool:
    """Whether the value of a ``keyword=value`` pair may be a secret (a real one is
    replaced; a path, a reference, a mask or code is ordinary output)."""
    if _PATH.match(value) or _REFERENCE.match(value) or _CODE.match(value):
        return False
    bare = value.rstrip(",;:)")
    if len(set(bare)) <= 1:  # ****, xxxxxxxx
        return False
    word = bare.lower()
    if word in _NOT_SECRET_WORDS:
        return False
    # An identifier naming a secret rather than holding one: POSTGRES_PASSWORD, auth_token.
    return not (
        re.fullmatch(r"[A-Za-z_]+", bare) and any(k in word for k in ("pass", "secret", "token", "key"))
    )


# -- known secrets -------------------------------------------------------------------------------


class Scrubber:
    """Known secret values, replaced wherever they appear: a substring check per secret, so
    it can run on every request body and every answer."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self.secrets: tuple[str, ...] = tuple(
            sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        )
        # As a secret appears in a JSON body: raw, escaped, escaped to ASCII.
        encoded = []
        for secret in self.secrets:
            forms = {secret.encode(), json.dumps(secret, ensure_ascii=False)[1:-1].encode()}
            forms.add(json.dumps(secret)[1:-1].encode())
            encoded.extend(sorted(forms, key=len, reverse=True))
        self._encoded = tuple(encoded)
        self.longest = max(map(len, encoded), default=0)  # bytes of the longest form

    def occurs(self, data: bytes, start: int = 0, end: int | None = None) -> bool:
        """Whether a known secret lies wholly within ``data[start:end]`` (no copy made)."""
        stop = len(data) if end is None else end
        return any(data.find(secret, start, stop) != -1 for secret in self._encoded)

    @classmethod
    def of(cls, settings: Settings, token: str) -> Scrubber:
        """The control token and every secret the config names (reads files: not on the loop)."""
        return cls(known_values(settings, token))

    def scrub(self, text: str, replacement: str = HIDDEN) -> str:
        """``text`` with every known secret replaced (the same object when none occurs)."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, replacement)
        return text

    def scrub_bytes(self, data: bytes) -> bytes:
        """``data`` (UTF-8, JSON or not) with every known secret replaced by ``[hidden]``
        (the same object when none occurs)."""
        for secret in self._encoded:
            if secret in data:
                data = data.replace(secret, HIDDEN.encode())
        return data

    def spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        for secret in self.secrets:
            start = text.find(secret)
            while start != -1:
                yield start, start + len(secret), KNOWN_KIND
                start = text.find(secret, start + len(secret))


def secret_names(settings: Settings) -> Iterator[str]:
    """Every variable the config names as holding a secret (``*_env`` keys and the values
    of ``*_env`` maps)."""

    def walk(value: Any, key: str) -> Iterator[str]:
        if isinstance(value, dict):
            for k, v in value.items():
                if str(k).endswith("_env") and isinstance(v, dict):
                    yield from (str(name) for name in v.values() if isinstance(name, str))
                else:
                    yield from walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                yield from walk(v, key)
        elif isinstance(value, str) and key.endswith("_env"):
            yield value

    yield from walk(settings.model_dump(mode="json"), "")


_PLAIN_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^@\s]*", re.IGNORECASE)


def could_be_secret_value(value: str) -> bool:
    """Whether a value a ``*_env`` key names may be a secret. An MCP server's ``env_env``
    also passes plain settings (a directory, ``production``, a server's URL): replacing
    those wherever they appear would blank ordinary text."""
    return (
        len(value) >= 8
        and not any(c.isspace() for c in value)
        and not _PATH.match(value)
        and not value.startswith("~")
        and not _PLAIN_URL.fullmatch(value)
        and not value.isalpha()
    )


def known_values(settings: Settings, token: str) -> list[str]:
    """The control token and the value of every secret the config names that could be
    one (:func:`could_be_secret_value`; reads files)."""
    found = [token]
    for name in secret_names(settings):
        try:
            value = read_secret(name)
        except ConfigError:
            continue  # an unreadable secret file: nothing of it can be shown either
        if value and could_be_secret_value(value):
            found.append(value)
    return found


class KnownSecrets:
    """The daemon's own secret values, as each running daemon tells them (a test process
    may run several); every redaction and every scrub reads the current set. Swapped
    whole, so readers on any thread need no lock."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self.scrubber = Scrubber(())

    def hold(self, holder: object, values: Iterable[str]) -> None:
        """``holder``'s secrets are ``values`` from now on (again on a reload)."""
        with self._lock:
            self._held[id(holder)] = tuple(values)
            self.scrubber = Scrubber(v for held in self._held.values() for v in held)

    def release(self, holder: object) -> None:
        with self._lock:
            self._held.pop(id(holder), None)
            self.scrubber = Scrubber(v for held in self._held.values() for v in held)


KNOWN = KnownSecrets()


def scrub(text: str) -> str:
    """``text`` without the daemon's own secrets (``[hidden]``): the last line of defence."""
    return KNOWN.scrubber.scrub(text)


def scrub_bytes(data: bytes) -> bytes:
    """:func:`scrub` for a UTF-8 (or JSON) body, without decoding it."""
    return KNOWN.scrubber.scrub_bytes(data)


# -- finding and replacing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Redacted:
    """``text`` with every secret found replaced; ``kinds``: what was found (in order, once each)."""

    text: str
    kinds: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.kinds)


_AROUND = " \t\r\n\"'=:"


def _spans(text: str, known: Scrubber) -> Iterator[tuple[int, int, str]]:
    """``(start, end, kind)`` of every secret in ``text``, overlapping and unordered."""
    yield from known.spans(text)
    folded: str | None = None
    shapes = SHAPES
    if _ANY_HINT.search(text) is None:
        folded = text.lower()
        if _ANY_FOLDED_HINT.search(folded) is None:
            shapes = _HINTLESS
    for shape in shapes:
        if shape.hints:
            if shape.folded:
                folded = text.lower() if folded is None else folded
                present = any(hint in folded for hint in shape.hints)
            else:
                present = any(hint in text for hint in shape.hints)
            if not present:
                continue
        for match in shape.pattern.finditer(text):
            start, end = match.span(shape.group)
            if shape.plugin:
                # Some patterns take the space or quote around a token: the secret is inside.
                value = match.group(shape.group)
                start += len(value) - len(value.lstrip(_AROUND))
                end -= len(value) - len(value.rstrip(_AROUND))
                if end - start < 8:  # a too-short "secret" would blank ordinary text everywhere
                    continue
            elif shape.kind == _KEYWORD and not _could_be_secret(match["value"]):
                continue
            yield start, end, shape.kind


def _merged(text: str, known: Scrubber) -> tuple[list[tuple[int, int, str]], tuple[str, ...]]:
    """The secrets' spans, sorted and merged where they overlap; the kinds found."""
    found = list(_spans(text, known))
    # A secret found in context (``password=…``, ``aws_secret = "…"``) goes everywhere it
    # is repeated, too (a short value would take ordinary words with it).
    values = {text[start:end]: kind for start, end, kind in found if end - start >= 8}
    for value, kind in values.items():
        at = text.find(value)
        while at != -1:
            found.append((at, at + len(value), kind))
            at = text.find(value, at + len(value))
    merged: list[tuple[int, int, str]] = []
    kinds: list[str] = []
    for start, end, kind in sorted(found, key=lambda s: (s[0], -s[1])):
        if merged and start < merged[-1][1]:  # overlaps the previous one: extend it
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end, merged[-1][2])
            continue
        merged.append((start, end, kind))
        if kind not in kinds:
            kinds.append(kind)
    return merged, tuple(kinds)


def redact(text: str, known: Scrubber | None = None) -> Redacted:
    """Every secret in ``text`` (a known one or a secret-shaped span) replaced by
    ``[redacted: <kind>]``. ``known``: the known secrets to look for (the daemon's,
    :data:`KNOWN`, unless given: the pure session core passes them in)."""
    if not text:
        return Redacted(text)
    spans, kinds = _merged(text, KNOWN.scrubber if known is None else known)
    if not spans:
        return Redacted(text)
    out: list[str] = []
    at = 0
    for start, end, kind in spans:
        out.append(text[at:start])
        out.append(PLACEHOLDER.format(kind=kind))
        at = end
    out.append(text[at:])
    return Redacted("".join(out), kinds)


_PRINTABLE_RUN = re.compile(rb"[\t\n\r\x20-\x7e]{8,}")


def mask(data: bytes) -> tuple[bytes, tuple[str, ...]]:
    """A file that is not text with each secret's bytes overwritten by ``*`` — the same
    length, so offsets, sizes and the file's structure survive (a PDF's cross-reference
    table, an archive's directory) — and the kinds found. Only runs of printable ASCII are
    read: every shape is ASCII, and the rest of a binary file is not worth a scan."""
    out: bytearray | None = None
    kinds: list[str] = []
    for run in _PRINTABLE_RUN.finditer(data):
        spans, found = _merged(run.group().decode("ascii"), KNOWN.scrubber)
        if not spans:
            continue
        if out is None:
            out = bytearray(data)
        for start, end, _kind in spans:
            out[run.start() + start : run.start() + end] = bytes([MASK]) * (end - start)
        kinds.extend(k for k in found if k not in kinds)
    return (data if out is None else bytes(out)), tuple(kinds)


def notice(kinds: Sequence[str]) -> str:
    """What the person who sent the secret is told."""
    return (
        f"I removed what looked like a secret ({', '.join(kinds)}) from your message before "
        "storing it or showing it to the model. If it is real, rotate it: it was sent over the chat."
    )


def merge(kinds: Sequence[str], more: Sequence[str]) -> tuple[str, ...]:
    """``kinds`` and then the new ones of ``more``, each once."""
    return tuple(dict.fromkeys((*kinds, *more)))


def redact_known(text: str, known: Scrubber | None = None) -> Redacted:
    """Only the daemon's own secrets (``known``, else :data:`KNOWN`'s) replaced
    (``[redacted: Daemon Secret]``): for text a model wrote, where a ``password=`` in an
    example is no secret of anyone's."""
    scrubber = KNOWN.scrubber if known is None else known
    done = scrubber.scrub(text, PLACEHOLDER.format(kind=KNOWN_KIND))
    return Redacted(text) if done is text else Redacted(done, (KNOWN_KIND,))


def redact_prior(prior: Sequence[PriorMessage]) -> tuple[tuple[PriorMessage, ...], tuple[str, ...]]:
    """The earlier conversation a message comes with, redacted: its text and who said it."""
    kinds: tuple[str, ...] = ()
    out = []
    for message in prior:
        text, user, name = redact(message.text), redact(message.user), redact(message.user_name)
        kinds = merge(kinds, (*text.kinds, *user.kinds, *name.kinds))
        if text.changed or user.changed or name.changed:
            message = replace(message, text=text.text, user=user.text, user_name=name.text)
        out.append(message)
    return tuple(out), kinds


def redact_identity(identity: str) -> Redacted:
    """A replay identity (an idempotency key, an event id) that carries a secret becomes
    a digest of itself: still the same for the same input, so a retry is still known."""
    found = redact(identity)
    if not found.changed:
        return Redacted(identity)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:32]
    return Redacted(f"redacted-{digest}", found.kinds)


def redact_arguments(arguments: str, known: Scrubber | None = None) -> Redacted:
    """A tool call's arguments as a model wrote them (JSON text), redacted: each string in
    the object (keys too) on its own, so a secret written with JSON escapes is seen as its
    tool would read it and the result is still the JSON it was. Text that is not JSON is
    redacted as it is (the tool refuses it anyway). ``known``: as for :func:`redact`."""
    if not arguments:
        return Redacted(arguments)
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return redact(arguments, known)
    kinds: list[str] = []

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            done = redact(value, known)
            kinds.extend(k for k in done.kinds if k not in kinds)
            return done.text
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    cleaned = clean(parsed)
    if not kinds:
        return Redacted(arguments)
    return Redacted(json.dumps(cleaned, ensure_ascii=False), tuple(kinds))
