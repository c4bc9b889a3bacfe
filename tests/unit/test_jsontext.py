"""netclaw's compact JSON (orjson, and json for what orjson refuses) writes the text json
wrote, and reads what json read, failing where json failed."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw import jsontext


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


VALUES: list[Any] = [
    {"message": {"id": "m_1", "role": "user", "content": 'Grüße, 東京 🙂\n\t"quoted"', "ts": 1700000000.123}},
    [1, -2, 3.5, True, False, None, "", {}, []],
    {"control": "\x00\x1f\x7f\u2028\u2029", "nested": [[[{"a": [1]}]]]},
    ("a", "tuple", 2),
]


@pytest.mark.parametrize("value", VALUES)
def test_it_writes_the_text_json_wrote(value: Any) -> None:
    assert jsontext.dumps(value) == compact(value)
    assert jsontext.dumps_bytes(value) == compact(value).encode()


@pytest.mark.parametrize(
    "value",
    [
        {"lone": "a\udc80b"},  # a lone surrogate: orjson refuses it
        {"big": 2**70},  # past 64 bits
        {1: "keyed by a number"},
    ],
)
def test_what_orjson_refuses_json_writes(value: Any) -> None:
    assert jsontext.dumps(value) == compact(value)
    try:
        want: bytes | type[Exception] = compact(value).encode()
    except UnicodeEncodeError:  # text with a lone surrogate is no UTF-8: refused as before
        want = UnicodeEncodeError
    if isinstance(want, bytes):
        assert jsontext.dumps_bytes(value) == want
    else:
        with pytest.raises(want):
            jsontext.dumps_bytes(value)


def test_what_neither_writes_is_refused_as_json_refused_it() -> None:
    with pytest.raises(TypeError):
        json.dumps({"x": object()})
    with pytest.raises(TypeError):
        jsontext.dumps({"x": object()})


def test_a_float_reads_back_the_same_and_nan_becomes_null() -> None:
    for x in (1e-05, 0.1, 1e16, 5e-324, 1700000000.123, -0.0):
        assert json.loads(jsontext.dumps(x)) == x
    assert jsontext.dumps([math.nan, math.inf]) == "[null,null]"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_value_is_written_as_json_wrote_it(value: Any) -> None:
    assert jsontext.dumps(value) == compact(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_text_reads_as_json_reads_it(value: Any) -> None:
    text = compact(value).encode("utf-8", "surrogatepass")
    assert jsontext.loads(text) == json.loads(text.decode("utf-8", "surrogatepass"))


EVENTS = [
    b'{"choices": [{"index": 0, "delta": {"content": "abc"}, "finish_reason": null}], "usage": null}',
    '{"delta": {"content": "Grüße, 東京 🙂"}}'.encode(),
    b'{"delta": {"content": "\\ud83d"}}',  # a lone surrogate's escape: orjson refuses, json reads
    b'{"value": NaN, "big": 1e400}',  # not JSON, but json reads it
    b'  {"padded": true}\n',
]


@pytest.mark.parametrize("payload", EVENTS)
def test_an_event_reads_as_json_reads_it(payload: bytes) -> None:
    got, want = jsontext.loads(payload), json.loads(payload.decode())
    assert repr(got) == repr(want)  # repr: NaN equals nothing, not even itself


@pytest.mark.parametrize(
    "payload", [b"{", b'{"a": 1,}', b"\xff\xfe{}", b"[" * 5000 + b"]" * 5000, b"data: {}"]
)
def test_what_json_refuses_loads_refuses(payload: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        json.loads(payload.decode())
    with pytest.raises((ValueError, RecursionError)):
        jsontext.loads(payload)


# -- loads_each: a recovery's thousands of journal payloads ---------------------------------

any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # of any size: json keeps each exact, and so must this
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_json, max_size=5))
def test_each_text_reads_as_json_reads_it(values: list[Any]) -> None:
    texts = [json.dumps(v, ensure_ascii=False) for v in values] + [compact(v) for v in values]
    got, want = jsontext.loads_each(texts), [json.loads(t) for t in texts]
    assert repr(got) == repr(want)  # repr: 1 and 1.0, or 0.0 and -0.0, are not the same value


def test_what_msgspec_refuses_json_reads_in_a_batch() -> None:
    texts = [
        '{"big": 123456789012345678901234567890, "neg": -9223372036854775809}',
        '{"lone": "\\ud83d"}',  # a lone surrogate's escape
        '{"raw": "a\udc80b"}',  # a lone surrogate itself, in the text
        '{"value": NaN, "huge": 1e400}',  # not JSON, but json reads it
        '{"ok": [1, 2.5, "x"]}',
    ]
    got = jsontext.loads_each(texts)
    assert repr(got) == repr([json.loads(t) for t in texts])
    assert got[0]["big"] == 123456789012345678901234567890 and isinstance(got[0]["big"], int)


@pytest.mark.parametrize(
    "broken", ["{", '{"a": 1,}', '{"a": 1} trailing', '"a\x01b"', "[" * 5000 + "]" * 5000]
)
def test_a_batch_with_a_text_json_refuses_fails_as_json_fails(broken: str) -> None:
    with pytest.raises((ValueError, RecursionError)):
        json.loads(broken)
    with pytest.raises((ValueError, RecursionError)):
        jsontext.loads_each(['{"fine": 1}', broken])


def test_a_payload_that_is_not_text_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        jsontext.loads_each(['{"fine": 1}', None])  # type: ignore[list-item]
