"""The fuzz corpus: every route of :mod:`tests.fuzz.routes`, its valid request spoiled one
part at a time, deterministically (the same cases on every run, so a failure names a
case that can be sent again).

Shapes, for every route:

- path segments and query values with control characters (raw and percent-encoded
  newlines, NUL, ESC, DEL, NEL, U+2028), invalid percent-encoding and UTF-8, dot-dot,
  an encoded slash, 300 characters;
- headers the route reads (and the listener's own: Authorization, Content-Type,
  Content-Encoding, Content-Length, Transfer-Encoding, Expect) with the same
  characters, bare CR and LF, obs-fold, non-UTF-8 bytes, "²" for digits, 9 KB values;
- every body field replaced with NaN, ±Infinity, 1e400, 400-digit integers, -1, -0.0,
  9e18, 2⁶³, booleans, null, wrong types, empty/blank/100 000-character strings,
  strings with control characters, lone surrogates, deep nesting; fields left out and
  unknown fields added;
- whole bodies that are not JSON objects, truncated, not UTF-8, BOM-prefixed,
  nested past the recursion limit, gzip-bombed or broken gzip;
- framing: chunked, chunked with a broken size, both Content-Length and chunked,
  negative and doubled Content-Length, ``Expect: 100-continue`` answered and hung up on,
  an unknown ``Expect``, upgrades (websocket, h2c), pipelining; request lines in
  HTTP/1.0, HTTP/2.0 and junk versions, absolute-form and ``*`` targets, 10 KB targets,
  unknown and lower-case methods; header lines without a colon, with NUL in the name,
  bare LF line ends;
- hang-ups: mid-head, after the head, mid-body, right after the request, and (for the
  event stream) right after the answer's head.

``python -m tests.fuzz.corpus`` prints the number of cases per route.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Literal

from tests.fuzz.routes import ROUTES, Route

Framing = Literal[
    "length",  # Content-Length and the whole body; the answer is read
    "chunked",  # Transfer-Encoding: chunked, in small chunks
    "expect",  # Expect: 100-continue, the body after the interim answer
    "raw",  # ``body`` is sent exactly as given (the head's framing is the case's own)
    "pipelined",  # the request twice in one write; the first answer is read
    "hangup_head",  # half the request head, then the connection is closed
    "hangup_after_head",  # the whole head, then closed before the body
    "hangup_body",  # the head and half the body, then closed
    "hangup_expect",  # Expect: 100-continue, closed without sending the body
    "hangup_request",  # the whole request, closed without reading the answer
    "hangup_answer",  # the whole request, closed after the answer's status line
]
HANGUPS = frozenset(
    {"hangup_head", "hangup_after_head", "hangup_body", "hangup_expect", "hangup_request", "hangup_answer"}
)


@dataclass(frozen=True)
class Case:
    name: str  # the route and what was spoiled
    route: Route
    method: str
    target: str  # the request target as sent (percent-encoding included)
    headers: tuple[tuple[str, bytes], ...]  # besides Host and the framing; None-valued auth below
    body: bytes = b""
    framing: Framing = "length"
    auth: bool = True  # send the route's valid credentials (unless ``headers`` has its own)
    refuse: bool = False  # the answer must be a 4xx (an identifier with a control character)
    baseline: bool = False  # the valid request: its answer must be one of ``route.answers``
    signed_over: bytes | None = None  # the body an HMAC route's signature covers, when not ``body``
    head_edit: tuple[bytes, bytes] | None = None  # (old, new): replaced once in the request head

    @property
    def hangup(self) -> bool:
        return self.framing in HANGUPS


# -- the shapes ---------------------------------------------------------------------------------

CONTROL_SUFFIXES = ("%0A", "%0D%0A", "%0A2026-01-01 00:00:00,000 INFO netclaw.gateway: forged", "%00")
CONTROL_SUFFIXES += ("%09", "%1B%5B31m", "%7F", "%C2%85", "%E2%80%A8", "%0B", "%0C")
# (suffix or whole value, whether it carries a control character)
SEGMENTS: tuple[tuple[str, bool], ...] = (
    *((f"{{v}}{s}", True) for s in CONTROL_SUFFIXES),
    ("%0A{v}", True),
    ("{v}\x01", True),  # raw, not encoded: the request line itself is malformed
    ("{v}%FF", False),
    ("%C0%AF", False),
    ("%2e%2e", False),
    ("..", False),
    ("a%2Fb", False),
    ("{v}%20x", False),
    ("%", False),
    ("%zz", False),
    ("%C3%A9", False),
    ("x" * 300, False),
    ("-leading-dash", False),
    ("%C2%B2", False),
)
QUERY_VALUES: tuple[tuple[str, bool], ...] = (
    *((f"{{v}}{s}", True) for s in CONTROL_SUFFIXES[:6]),
    ("%0A", True),
    ("", False),
    ("%FF", False),
    ("%zz", False),
    ("x" * 5000, False),
    ("NaN", False),
    ("-1", False),
    ("9" * 400, False),
    ("2026-13-45T99:99", False),
    ("%C2%B2", False),
)
HEADER_VALUES: tuple[bytes, ...] = (
    b"a\x01b",
    b"a\x00b",
    b"a\x7fb",
    b"a\tb",
    b"a%0Ab",
    b"%0D%0AX-Injected: 1",
    b"a\rb",
    b"a\nb",
    b"a\r\n b",  # obs-fold
    b"\xff\xfe",
    "²".encode(),
    "\u2028".encode(),
    b"\xc2\x85",
    b"",
    b"   ",
    b"x" * 9000,
)
# Raw JSON text for a field's value.
FIELD_VALUES: tuple[str, ...] = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1" + "0" * 400,
    "-1" + "0" * 400,
    "0",
    "-1",
    "-0.0",
    "1.5",
    "1e308",
    "9e18",
    "9223372036854775808",
    "true",
    "false",
    "null",
    '""',
    '"   "',
    json.dumps("x" * 100_000),
    '"\\n"',
    '"a\\u0000b"',
    '"cli:fuzz\\n"',
    '"x%0A"',
    '"\\u2028\\u0085\\u001b[31m"',
    '"\\ud800"',
    '"2099-13-45T25:61"',
    json.dumps("9" * 400),
    "[]",
    "{}",
    "[1, 2]",
    '{"a": 1}',
    "[" * 60 + "]" * 60,
    '"Mars/Base"',
    '"../../etc/passwd"',
    '"0 9 * * * *"',
)
BODIES: tuple[tuple[str, bytes], ...] = (
    ("empty", b""),
    ("null", b"null"),
    ("array", b"[]"),
    ("string", b'"text"'),
    ("not json", b"not json"),
    ("open brace", b"{"),
    ("not utf-8", b'{"text": "\xff\xfe"}'),
    ("bom", b"\xef\xbb\xbf{}"),
    ("nested past the limit", b"[" * 5000 + b"]" * 5000),
    ("int past the digit limit", b'{"n": ' + b"9" * 4400 + b"}"),
    ("duplicate keys", b'{"text": 1, "text": "x"}'),
    ("nul", b"\x00"),
)
HOSTILE_IDS = ("cli:fuzz%0A", "cli:fuzz%0D%0Aforged", "%00", "cli:fuzz%E2%80%A8")


def _spoiled(valid: str, shape: str) -> str:
    return shape.replace("{v}", valid)


def _json_with(body: dict[str, Any], path: tuple[str, ...], raw: str | None) -> bytes:
    """``body`` with the field at ``path`` set to the raw JSON text ``raw`` (None: left out)."""
    marker = "\u0000MARK\u0000"
    doc = json.loads(json.dumps(body))
    node = doc
    for step in path[:-1]:
        node = node[step]
    if raw is None:
        del node[path[-1]]
        return json.dumps(doc).encode()
    node[path[-1]] = marker
    return json.dumps(doc).replace(json.dumps(marker), raw).encode("utf-8", "surrogatepass")


def _fields(body: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field of ``body``, nested objects' fields too."""
    found = []
    for key, value in body.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found += _fields(value, (*prefix, key))
    return found


# -- the corpus ---------------------------------------------------------------------------------


def route_cases(route: Route) -> list[Case]:
    """Every case for one route."""
    target = _target(route.path(), route.query)
    body = json.dumps(route.bodies[0]).encode() if route.bodies else b""
    valid = Case(f"{route.name}: valid", route, route.method, target, _headers(route), body, baseline=True)
    cases = [valid]
    cases += _segment_cases(route, valid)
    cases += _query_cases(route, valid)
    cases += _header_cases(route, valid)
    cases += _body_cases(route, valid)
    cases += _framing_cases(route, valid)
    cases += [
        replace(valid, name=f"{route.name}: no credentials", auth=False, baseline=False),
        replace(valid, name=f"{route.name}: HEAD", method="HEAD", baseline=False),
        replace(valid, name=f"{route.name}: PATCH", method="PATCH", baseline=False),
    ]
    return cases


def _target(path: str, query: dict[str, str]) -> str:
    return path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def _headers(route: Route) -> tuple[tuple[str, bytes], ...]:
    headers = [(k, v.encode()) for k, v in route.headers.items()]
    if route.bodies:
        headers.append(("Content-Type", b"application/json"))
    return tuple(headers)


def _segment_cases(route: Route, valid: Case) -> list[Case]:
    cases = []
    for key, value in route.segments.items():
        for shape, control in SEGMENTS:
            spoiled = _spoiled(value, shape)
            cases.append(
                replace(
                    valid,
                    name=f"{route.name}: {{{key}}}={spoiled[:60]!r}",
                    target=_target(route.path({key: spoiled}), route.query),
                    refuse=control,
                    baseline=False,
                )
            )
    return cases


def _query_cases(route: Route, valid: Case) -> list[Case]:
    path = route.path()
    cases = []
    for key, value in route.query.items():
        for shape, control in QUERY_VALUES:
            spoiled = _spoiled(value, shape)
            cases.append(
                replace(
                    valid,
                    name=f"{route.name}: ?{key}={spoiled[:60]!r}",
                    target=_target(path, {**route.query, key: spoiled}),
                    refuse=control and key in route.ids,
                    baseline=False,
                )
            )
        doubled = _target(path, route.query) + f"&{key}=other"
        cases.append(replace(valid, name=f"{route.name}: ?{key} twice", target=doubled, baseline=False))
    cases.append(
        replace(
            valid, name=f"{route.name}: unknown query", target=_target(path, {**route.query, "x%0A": "1"})
        )
    )
    cases.append(replace(valid, name=f"{route.name}: bare ?", target=path + "?&&=&", baseline=False))
    return cases


def _header_cases(route: Route, valid: Case) -> list[Case]:
    names = ["Authorization", *route.headers]
    if route.bodies:
        names += ["Content-Type", "Content-Encoding"]
    if route.auth == "webhook_hmac":
        names += ["X-Netclaw-Timestamp", "X-Netclaw-Signature"]
    cases = []
    for name in names:
        for value in HEADER_VALUES:
            headers = (*tuple((k, v) for k, v in valid.headers if k != name), (name, value))
            cases.append(
                replace(valid, name=f"{route.name}: {name}: {value[:40]!r}", headers=headers, baseline=False)
            )
    return cases


def _body_cases(route: Route, valid: Case) -> list[Case]:
    cases = []
    for n, body in enumerate(route.bodies):
        encoded = json.dumps(body).encode()
        if n:
            cases.append(replace(valid, name=f"{route.name}: valid body {n}", body=encoded, baseline=True))
        for path in _fields(body):
            field = ".".join(path)
            control = path[-1] in route.id_fields
            for raw in FIELD_VALUES:
                cases.append(
                    replace(
                        valid,
                        name=f"{route.name}: body {n} {field}={raw[:40]}",
                        body=_json_with(body, path, raw),
                        refuse=control and ("\\n" in raw or "\\u0000" in raw or "\\u2028" in raw),
                        baseline=False,
                    )
                )
            cases.append(
                replace(
                    valid,
                    name=f"{route.name}: body {n} without {field}",
                    body=_json_with(body, path, None),
                    baseline=False,
                )
            )
        cases.append(
            replace(
                valid,
                name=f"{route.name}: body {n} with an unknown field",
                body=json.dumps({**body, "unknown\n": 1}).encode(),
                baseline=False,
            )
        )
    cases += [
        replace(valid, name=f"{route.name}: body {label}", body=raw, baseline=False) for label, raw in BODIES
    ]
    if route.bodies:
        encoded = json.dumps(route.bodies[0]).encode()
        gz = (("Content-Encoding", b"gzip"),)
        cases += [
            replace(
                valid,
                name=f"{route.name}: body truncated JSON",
                body=encoded[: len(encoded) // 2],
                baseline=False,
            ),
            replace(
                valid,
                name=f"{route.name}: gzip body",
                headers=valid.headers + gz,
                body=gzip.compress(encoded),
                signed_over=encoded,
            ),
            replace(
                valid,
                name=f"{route.name}: broken gzip",
                headers=valid.headers + gz,
                body=b"\x1f\x8b junk",
                baseline=False,
            ),
            replace(
                valid,
                name=f"{route.name}: gzip bomb",
                headers=valid.headers + gz,
                body=_gzip_bomb(),
                baseline=False,
            ),
        ]
    return cases


@functools.cache
def _gzip_bomb() -> bytes:
    """60 MB of spaces in 60 KB: past every body limit once inflated (messages take 48 MiB)."""
    return gzip.compress(b" " * 60_000_000, compresslevel=9)


def _framing_cases(route: Route, valid: Case) -> list[Case]:
    body = valid.body or b'{"text": "x"}'
    with_body = replace(valid, body=body, baseline=False)
    chunked = (("Transfer-Encoding", b"chunked"),)

    def raw_head(extra: tuple[tuple[str, bytes], ...], raw: bytes, label: str) -> Case:
        return replace(
            with_body,
            name=f"{route.name}: {label}",
            headers=with_body.headers + extra,
            body=raw,
            framing="raw",
        )

    cases = [replace(with_body, name=f"{route.name}: {f}", framing=f) for f in ("chunked", "expect")]
    cases += [replace(with_body, name=f"{route.name}: {f}", framing=f) for f in sorted(HANGUPS)]
    cases += [
        raw_head(chunked, b"zz\r\n" + body + b"\r\n0\r\n\r\n", "chunk size not hex"),
        raw_head(chunked, b"ffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n", "chunk size huge"),
        raw_head(chunked, b"%x;ext=1\r\n" % len(body) + body + b"\r\n0\r\n\r\n", "chunk extension"),
        raw_head(chunked, b"%x\r\n" % len(body) + body + b"XX0\r\n\r\n", "chunk without its CRLF"),
        raw_head(
            (*chunked, ("Content-Length", b"%d" % len(body))),
            b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n",
            "Content-Length and chunked",
        ),
        raw_head((("Content-Length", b"-1"),), body, "negative Content-Length"),
        raw_head((("Content-Length", b"+%d" % len(body)),), body, "Content-Length with a sign"),
        raw_head(
            (("Content-Length", b"%d" % len(body)), ("Content-Length", b"%d" % (len(body) + 1))),
            body,
            "two Content-Lengths",
        ),
        raw_head((("Content-Length", b"%d" % len(body)), ("Expect", b"bogus-thing")), body, "Expect: bogus"),
        raw_head(
            (("Content-Length", b"%d" % len(body)), ("Expect", b"100-continue\x01")), body, "Expect: ctl"
        ),
        raw_head(
            (("Transfer-Encoding", b"gzip, chunked"),), b"0\r\n\r\n", "Transfer-Encoding: gzip, chunked"
        ),
        raw_head((("Transfer-Encoding", b"identity"),), body, "Transfer-Encoding: identity"),
        raw_head(
            (("Connection", b"Upgrade"), ("Upgrade", b"websocket")), b"\x81\x85junk!", "Upgrade: websocket"
        ),
        raw_head((("Connection", b"Upgrade, HTTP2-Settings"), ("Upgrade", b"h2c")), b"PRI * HTTP/2.0", "h2c"),
        replace(with_body, name=f"{route.name}: pipelined", framing="pipelined"),
    ]
    request_line = f"{route.method} {valid.target} HTTP/1.1\r\n".encode()
    edits = {
        "HTTP/1.0": (b" HTTP/1.1\r\n", b" HTTP/1.0\r\n"),
        "HTTP/2.0": (b" HTTP/1.1\r\n", b" HTTP/2.0\r\n"),
        "HTTP/1.1 with junk": (b" HTTP/1.1\r\n", b" HTTP/1.1x\r\n"),
        "absolute-form target": (request_line, request_line.replace(b" /", b" http://127.0.0.1/", 1)),
        "asterisk target": (request_line, f"{route.method} * HTTP/1.1\r\n".encode()),
        "10 KB target": (
            request_line,
            request_line.replace(b" HTTP/1.1", b"?" + b"a" * 10_000 + b" HTTP/1.1"),
        ),
        "lower-case method": (
            request_line,
            request_line.replace(route.method.encode(), route.method.lower().encode(), 1),
        ),
        "unknown method": (request_line, request_line.replace(route.method.encode(), b"BREW", 1)),
        "header without a colon": (b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nNo colon here\r\n"),
        "NUL in a header name": (b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nX-\x00: 1\r\n"),
        "space before the colon": (b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nX-Space : 1\r\n"),
        "two Hosts": (b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nHost: other\r\n"),
        "LF line ends": (b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\nX-Bare: lf\n"),
    }
    cases += [
        replace(with_body, name=f"{route.name}: {label}", head_edit=edit) for label, edit in edits.items()
    ]
    return cases


def build_corpus() -> list[Case]:
    cases = [case for route in ROUTES for case in route_cases(route)]
    cases += _identifier_cases()
    return cases


def _identifier_cases() -> list[Case]:
    """A hostile session id in every route that takes one, as a path segment and as a
    query value, answered on the valid request otherwise: always a 4xx."""
    cases = []
    for route in ROUTES:
        for key in sorted(route.ids):
            for hostile in HOSTILE_IDS:
                if key in route.segments:
                    target = _target(route.path({key: hostile}), route.query)
                else:
                    target = _target(route.path(), {**route.query, key: hostile})
                body = json.dumps(route.bodies[0]).encode() if route.bodies else b""
                cases.append(
                    Case(
                        f"{route.name}: {key}={hostile!r}",
                        route,
                        route.method,
                        target,
                        _headers(route),
                        body,
                        refuse=True,
                    )
                )
    return cases


def by_route() -> dict[str, list[Case]]:
    grouped: dict[str, list[Case]] = {}
    for case in build_corpus():
        key = (
            f"{case.route.name} [{case.route.auth}]" if case.route.listener == "webhooks" else case.route.name
        )
        grouped.setdefault(key, []).append(case)
    return grouped


if __name__ == "__main__":
    counts = Counter({name: len(cases) for name, cases in by_route().items()})
    for name, count in sorted(counts.items()):
        print(f"{count:6d}  {name}")
    print(f"{sum(counts.values()):6d}  cases in all")
