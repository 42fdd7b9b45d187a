"""KeyTemplate: composite keys format unambiguously, and parser() reads them back."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.connectors.http_urls import encode_value, split_before_decoding
from asyncio_lookup.connectors.keys import KeyTemplate, key_text
from asyncio_lookup.errors import ConfigurationError, DataFormatError


def test_adjacent_placeholders_are_refused_on_construction() -> None:
    for template in ("T:{a}{b}", "{a}{b}", "{a}{a}", "T:{a}:{b}{c}"):
        with pytest.raises(ConfigurationError, match="key_template") as info:
            KeyTemplate(template, "key_template")
        assert template in str(info.value) and "adjacent" in str(info.value)
    with pytest.raises(ConfigurationError, match="'url'"):
        KeyTemplate("http://h/c/{a}{b}", "url")
    KeyTemplate("T:{a}:{a}", "key_template")  # the same field twice, separated: fine


def test_separator_in_a_value_is_refused_for_that_key() -> None:
    t = KeyTemplate("T:{a}:{b}", "key_template")
    with pytest.raises(DataFormatError) as info:
        t.format({"a": "x:y", "b": "z"}, str)
    message = str(info.value)
    assert "'x:y'" in message and "T:{a}:{b}" in message and "':'" in message
    assert "separator" in message
    assert t.format({"a": "x", "b": "y:z"}, str) == "T:x:y:z"  # the last value may hold it
    assert t.parser().match("T:x:y:z").groupdict() == {"a": "x", "b": "y:z"}
    # adjacent placeholders used to give one key for (1, 23) and (12, 3): now refused on the driver
    with pytest.raises(ConfigurationError):
        KeyTemplate("T:{a}{b}", "key_template")
    one = KeyTemplate("T:{a}", "key_template")  # one placeholder: any value
    assert one.format({"a": "x:y}"}, str) == "T:x:y}"
    assert one.parser().match("T:x:y}").groupdict() == {"a": "x:y}"}


def test_http_values_a_decoding_server_would_read_alike_are_refused() -> None:
    def url(template: str, **values: Any) -> str:
        t = KeyTemplate(template, "url")
        return t.format(values, encode_value, split_before_decoding(t))

    with pytest.raises(DataFormatError, match="'-'"):
        url("http://svc/c/{a}-{b}", a="x-y", b="z")
    assert url("http://svc/c/{a}-{b}", a="x", b="y-z") == "http://svc/c/x-y-z"
    # '.' and ':' are encoded, but a server decodes before it reads them: ('x.y', 'z') and
    # ('x', 'y.z') both arrived as /c/x.y.z
    with pytest.raises(DataFormatError, match=r"'\.'"):
        url("http://svc/c/{a}.{b}", a="1.5", b=2)
    with pytest.raises(DataFormatError, match="':'"):
        url("http://svc/q?id={a}:{b}", a="x:y", b="z")
    # '/' between path segments: WSGI and ASGI servers decode the path before they route it,
    # so ('x/y', 'z') and ('x', 'y/z') both arrived as /c/x/y/z
    with pytest.raises(DataFormatError, match="'/'"):
        url("http://svc/c/{a}/{b}", a="x/y", b="z")
    assert url("http://svc/c/{a}/{b}", a="x", b="y/z") == "http://svc/c/x/y%2Fz"
    # split before decoding ('&' between query pairs, read raw everywhere): encoded is safe
    assert url("http://svc/c?a={a}&b={b}", a="x&b=y", b="z") == "http://svc/c?a=x%26b%3Dy&b=z"


def _as_decoded(url: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """What a server reads: the path decoded, then split into segments (WSGI's PATH_INFO,
    ASGI's path); query pairs split on the raw text, then decoded."""
    parts = urlsplit(url)
    segments = tuple(unquote(parts.path).split("/"))
    pairs = tuple(
        (unquote(name), unquote(value))
        for name, _, value in (pair.partition("=") for pair in parts.query.split("&"))
    )
    return segments, pairs


_URL_TEMPLATES = (
    "http://svc/k/{a}.{b}",
    "http://svc/k/{a}:{b}",
    "http://svc/k/{a}/{b}",
    "http://svc/k/{a}-{b}.json",
    "http://svc/q?id={a}:{b}",
    "http://svc/q?a={a}&b={b}",
    "http://svc/k/{a}?b={b}",
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_URL_TEMPLATES),
    st.text("xy.:/&=-?#% ", max_size=4),
    st.text("xy.:/&=-?#% ", max_size=4),
)
def test_two_keys_never_reach_a_decoding_server_as_one(template: str, a: str, b: str) -> None:
    """Against (a, b): every key that splits the same text at another separator."""
    t = KeyTemplate(template, "url")
    split = split_before_decoding(t)
    ((_, separator),) = t.separators
    joined = a + separator + b
    rivals = [
        (joined[:i], joined[i + 1 :])
        for i, char in enumerate(joined)
        if char == separator and i != len(a)
    ]
    try:
        mine = _as_decoded(t.format({"a": a, "b": b}, encode_value, split))
    except DataFormatError:
        return
    for rival_a, rival_b in rivals:
        try:
            theirs = _as_decoded(t.format({"a": rival_a, "b": rival_b}, encode_value, split))
        except DataFormatError:
            continue
        assert mine != theirs, ((a, b), (rival_a, rival_b))


def test_repeated_field_is_checked_at_every_place_but_the_last() -> None:
    t = KeyTemplate("{a}-{b}/{a}.{c}", "key_template")
    assert t.format({"a": "x", "b": "y", "c": "z.w"}, str) == "x-y/x.z.w"
    for bad in ({"a": "x.1", "b": "y", "c": "z"}, {"a": "x-1", "b": "y", "c": "z"}):
        with pytest.raises(DataFormatError):
            t.format(bad, str)
    p = t.parser()
    assert p.match("x-y/x.z.w").groupdict() == {"a": "x", "b": "y", "c": "z.w"}
    assert p.match("x.1-y/x.1.z") is None  # could not have been written


def test_negative_zero_is_written_as_zero() -> None:
    assert key_text(-0.0) == key_text(0.0) == "0.0"
    assert [key_text(v) for v in (1.5, -1.5, 0, "-0.0", float("nan"))] == [
        "1.5",
        "-1.5",
        "0",
        "-0.0",
        "nan",
    ]


@pytest.mark.parametrize("value", [b"ab", bytearray(b"ab"), memoryview(b"ab")])
def test_a_binary_key_is_an_error_for_its_key_not_the_text_of_its_repr(value: object) -> None:
    # str(b"ab") is "b'ab'": Redis read t:b'ab', HTTP sent /c/b%27ab%27, both silent misses
    with pytest.raises(DataFormatError, match="binary"):
        KeyTemplate("t:{id}", "key_template").format({"id": value}, key_text)


def test_template_pickles_with_its_parser() -> None:
    t = KeyTemplate("o:{cid}:{oid}", "key_template")
    t.parser()
    copy = pickle.loads(pickle.dumps(t))
    assert copy.parser().match("o:1:x:y").groupdict() == {"cid": "1", "oid": "x:y"}


def test_escaped_braces_are_literal_text() -> None:
    """A Redis Cluster hash tag ('{customer}:42') needs '{{customer}}:{id}': escaped braces
    failed with a bare ValueError from zip()."""
    t = KeyTemplate("{{customer}}:{id}", "key_template")
    assert t.format({"id": 42}, str) == "{customer}:42"
    assert t.glob() == "{customer}:*"
    assert t.parser().fullmatch("{customer}:42").groupdict() == {"id": "42"}
    t = KeyTemplate("c{{{a}}}:{b}", "key_template")
    assert t.format({"a": "x", "b": "y"}, str) == "c{x}:y"
    assert t.parser().fullmatch("c{x}:y").groupdict() == {"a": "x", "b": "y"}
    with pytest.raises(DataFormatError):
        t.format({"a": "x}", "b": "y"}, str)  # '}' is the separator after {a}


# -- properties ------------------------------------------------------------------------------

CHARS = "x:-/a"  # separators and value characters overlap on purpose


@st.composite
def templates(draw: st.DrawFn) -> KeyTemplate:
    def literal(min_size: int) -> str:  # with literal braces, written escaped
        text = draw(st.text(CHARS + "{}", min_size=min_size, max_size=2))
        return text.replace("{", "{{").replace("}", "}}")

    n = draw(st.integers(2, 4))
    fields = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    text = literal(0)
    for i, field in enumerate(fields):
        text += "{" + field + "}" + literal(0 if i == n - 1 else 1)
    return KeyTemplate(text, "key_template")


def value_dicts(t: KeyTemplate) -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries({f: st.text(CHARS, max_size=4) for f in dict.fromkeys(t.fields)})


def splits(t: KeyTemplate, s: str) -> Iterator[dict[str, str]]:
    """Every assignment of values whose plain formatting (no check) is ``s``."""

    def go(i: int, pos: int, values: dict[str, str]) -> Iterator[dict[str, str]]:
        if i == len(t.fields):
            if pos == len(s):
                yield values
            return
        field, literal = t.fields[i], t.literals[i + 1]
        for end in range(pos, len(s) + 1):
            if s.startswith(literal, end):
                value = s[pos:end]
                if values.get(field, value) == value:
                    yield from go(i + 1, end + len(literal), {**values, field: value})

    if s.startswith(t.literals[0]):
        yield from go(0, len(t.literals[0]), {})


def formatted(t: KeyTemplate, values: dict[str, Any], encode: Any = str) -> str | None:
    try:
        return t.format(values, encode)
    except DataFormatError:
        return None


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_accepted_keys_never_collide_and_parse_back(data: st.DataObject) -> None:
    t = data.draw(templates())
    values = data.draw(value_dicts(t))
    s = formatted(t, values)
    if s is None:
        return
    # of all the value assignments that write the same text, only this one is accepted
    accepted = [v for v in splits(t, s) if formatted(t, v) is not None]
    assert accepted == [values]
    match = t.parser().match(s)
    assert match is not None and match.groupdict() == values


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_parser_accepts_only_what_format_writes(data: st.DataObject) -> None:
    t = data.draw(templates())
    s = data.draw(st.text(CHARS, max_size=12))
    match = t.parser().match(s)
    if match is not None:
        assert formatted(t, match.groupdict()) == s
    else:
        assert all(formatted(t, v) is None for v in splits(t, s))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_http_encoded_keys_never_collide(data: st.DataObject) -> None:
    t = data.draw(templates())
    url = KeyTemplate("http://svc/" + t.template, "url")
    values = data.draw(value_dicts(t))
    s = formatted(url, values, encode_value)
    if s is None:
        return
    decoded = [{f: unquote(v) for f, v in split.items()} for split in splits(url, s)]
    assert [v for v in decoded if formatted(url, v, encode_value) == s] == [values]


def test_a_decimal_is_written_in_plain_digits_at_its_scale() -> None:
    """str() wrote a DECIMAL(38, 18) zero as 0E-18 and 1e-7 as 1.00000000000E-7: names no one
    writes (Spark's CAST(d AS STRING) and PostgreSQL give plain digits), so every such key
    missed."""
    values = ["0E-18", "1.00000000000E-7", "1.500000000000000000", "1E+1", "-0.00", "-2.5"]
    assert [key_text(Decimal(v)) for v in values] == [
        "0.000000000000000000",
        "0.000000100000000000",
        "1.500000000000000000",
        "10",
        "0.00",
        "-2.5",
    ]
    assert key_text(Decimal("NaN")) == "NaN"
