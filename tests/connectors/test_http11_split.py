"""The client's fast path for URLs on the last origin splits exactly as the full parse does."""

from __future__ import annotations

import pytest

from asyncio_lookup.connectors.http11 import Http11Client

LAST = "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    "url",
    [
        f"{LAST}/customers/7",
        f"{LAST}/customers/7?x=1&y=2",
        f"{LAST}/",
        f"{LAST}//double/slash",
        f"{LAST}/a b",
        f"{LAST}/caf\u00e9",
        f"{LAST}/with#fragment",
        f"{LAST}/ok%20already",
        f"{LAST}/stray%zz",
        f"{LAST}?query-without-path",
        f"{LAST}#fragment-without-path",
        f"{LAST}",
        "http://127.0.0.1:8081/another/port",
        "https://127.0.0.1:8080/another/scheme",
        "http://user@127.0.0.1:8080/credentials",
        "http://127.0.0.1:8080@evil.example/userinfo-trick",
    ],
)
def test_the_fast_path_splits_as_the_full_parse(url: str) -> None:
    client = Http11Client(4, 5.0, {})
    client._split(f"{LAST}/first")  # LAST is now the last origin
    fast_origin, fast_target = client._split(url)
    slow_origin, slow_target = client._split_slowly(url)
    assert fast_origin is slow_origin
    assert fast_target == slow_target


@pytest.mark.parametrize("tail", ["/a\r\nX-Injected: 1", "/a\nb", "/a\x00", "/a\tb"])
def test_the_fast_path_refuses_control_characters_too(tail: str) -> None:
    client = Http11Client(4, 5.0, {})
    client._split(f"{LAST}/first")
    with pytest.raises(ValueError, match="control character"):
        client._split(LAST + tail)


def test_the_last_origin_follows_the_urls() -> None:
    client = Http11Client(4, 5.0, {})
    a, _ = client._split("http://a.example/x")
    b, _ = client._split("http://b.example/x")
    assert client._split("http://b.example/y") == (b, "/y")
    assert client._split("http://a.example/y") == (a, "/y")
    assert a is not b
