"""What every conformance server answers, as one pure function: :func:`answer`.

Each Python app (ASGI, WSGI/Flask, aiohttp.web, http.server) turns a request into
``answer(method, target, headers, body)`` and writes the :class:`Answer` the way its framework
can; ``node_app.js`` implements the same table in JavaScript. The apps run as subprocesses with
this directory on ``sys.path`` (``import spec``); the tests import it to know what to expect.

Targets (``{key}`` is the raw, percent-encoded path remainder; the answer echoes it decoded, so
an answer for the wrong key is seen):

=======================  ===========================================================
``/item/{key}``          ``{"id": key, "server": ..., "injected": bool}``; a key
                         starting ``miss`` is a 404; ``HEAD``: the headers only
``/query?key=...``       the same, the key from the query (form-decoded)
``/status/{code}``       that status (3xx with a ``Location``, never followed)
``/early/{key}``         interim 1xx answers (100, 102, 103) before the item, GET or POST
``/gzip/{key}``          the item gzip-coded, asked or not (``/deflate/``: zlib;
                         ``/raw-deflate/``: deflate without the zlib wrapper;
                         ``/unknown-coding/``: ``x-unknown``, undecodable)
``/negotiate/{key}``     zstd or gzip when ``Accept-Encoding`` asks for them
``/chunked/{key}``       the item in three pieces without a length
``/to-close/{key}``      the item without a length, the connection closed after it
``/big/{key}``           a 5 MB item (``/big-chunked/``: in 1 MB pieces without a
                         length; ``/gzip-bomb/``: gzip-coded, about 5 KB on the wire);
                         ``?bytes=N``: N bytes instead of 5 MB
``/trailers/{key}``      chunked with a trailer field (``http.server``, Node; the
                         others send the chunks without it)
``/long-header/{key}``   the item and a 7,000-byte header (``/many-headers/``: 80
                         headers; ``/huge-header/``: a 1 MB header, which no client
                         should accept)
``/close/{key}``         the item with ``Connection: close``
``/ghost/{key}``         the item, then 50 ms later a second answer nobody asked for
                         (``{"id": "ghost"}``; http.server HTTP/1.1, aiohttp.web, Node)
``/never/{key}``         no answer for :data:`NEVER` seconds
``POST /echo/{key}``     ``{"id": key, "method": "POST", "body": <the JSON sent>}``
=======================  ===========================================================
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

try:
    import zstandard
except ImportError:  # pragma: no cover - the test environment has it
    zstandard = None

SERVER = os.environ.get("CONFORMANCE_SERVER", "?")
NEVER = 3.0  # seconds a /never/ answer waits (a client's timeout in the tests is 0.5 s)
BIG = 5_000_000
LONG_HEADER = 7_000  # under aiohttp's 8,190-byte field limit
MANY_HEADERS = 80  # under aiohttp's 128 headers
HUGE_HEADER = 1_000_000
LINK = "</style.css>; rel=preload; as=style"
INTERIM = [(100, []), (102, []), (103, [("Link", LINK)])]

Headers = list[tuple[str, str]]


@dataclass
class Answer:
    status: int = 200
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    chunks: list[bytes] | None = None  # sent in these pieces, without a Content-Length
    interim: list[tuple[int, Headers]] = field(default_factory=list)  # 1xx before the answer
    close: bool = False  # Connection: close
    no_length: bool = False  # no Content-Length; the connection closes after the body
    delay: float = 0.0  # seconds before answering
    length: int | None = None  # Content-Length of a HEAD answer (of the GET's body)
    trailers: Headers = field(default_factory=list)  # after a chunked body, where possible
    ghost: bytes = b""  # a second, unasked answer written 50 ms after this one (a broken server)


def item(key: str, headers: dict[str, str], **extra: object) -> dict[str, object]:
    return {"id": key, "server": SERVER, "injected": "x-injected" in headers, **extra}


def encode(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _json(value: object, status: int = 200, headers: Headers | None = None, **kw: Any) -> Answer:
    head = [("Content-Type", "application/json"), *(headers or [])]
    return Answer(status, head, encode(value), **kw)


def answer(method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
    """The answer to ``method target``; ``headers`` with lower-case names."""
    parts = urlsplit(target)
    route, _, raw_key = parts.path.lstrip("/").partition("/")
    key = unquote(raw_key, errors="strict")
    if route == "query":
        key = parse_qs(parts.query, keep_blank_values=True).get("key", [""])[0]
        route = "item"
    if route == "item":
        if key.startswith("miss"):
            return _json({"error": "no such key"}, status=404)
        out = _json(item(key, headers))
        if method == "HEAD":
            out.length, out.body = len(out.body), b""
        return out
    if route == "status":
        return status(int(raw_key))
    if route == "echo" and method == "POST":
        return _json(item(key, headers, method="POST", body=json.loads(body or b"null")))
    if route == "early":
        sent = json.loads(body) if body else None
        return _json(item(key, headers, method=method, body=sent), interim=list(INTERIM))
    data = encode(item(key, headers))
    if route == "negotiate":
        return negotiate(data, headers.get("accept-encoding", ""))
    if route == "gzip":
        return Answer(headers=[("Content-Encoding", "gzip")], body=gzip.compress(data))
    if route == "deflate":
        return Answer(headers=[("Content-Encoding", "deflate")], body=zlib.compress(data))
    if route == "raw-deflate":  # RFC 9110 says zlib-wrapped; some servers send it raw
        raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = raw.compress(data) + raw.flush()
        return Answer(headers=[("Content-Encoding", "deflate")], body=body)
    if route == "unknown-coding":
        return Answer(headers=[("Content-Encoding", "x-unknown")], body=b"\x00\x01 not decodable")
    if route == "chunked":
        third = len(data) // 3
        return Answer(chunks=[data[:third], data[third : 2 * third], data[2 * third :]])
    if route == "to-close":
        return Answer(body=data, no_length=True)
    size = int(parse_qs(parts.query).get("bytes", [str(BIG)])[0])
    if route == "big":
        return _json(item(key, headers, blob="x" * size))
    if route == "big-chunked":  # in 1 MB pieces, no length
        data = encode(item(key, headers, blob="x" * size))
        return Answer(chunks=[data[i : i + 1_000_000] for i in range(0, len(data), 1_000_000)])
    if route == "gzip-bomb":  # 5 MB that gzip makes about 5 KB
        body = gzip.compress(encode(item(key, headers, blob="x" * size)))
        return Answer(headers=[("Content-Encoding", "gzip")], body=body)
    if route == "trailers":  # chunked with a trailer field, where the server can send one
        return Answer(chunks=[data[:10], data[10:]], trailers=[("X-Checksum", "c0ffee")])
    if route == "long-header":
        return _json(item(key, headers), headers=[("X-Long", "l" * LONG_HEADER)])
    if route == "many-headers":
        many = [(f"X-Many-{i}", str(i)) for i in range(MANY_HEADERS)]
        return _json(item(key, headers), headers=many)
    if route == "huge-header":
        return _json(item(key, headers), headers=[("X-Huge", "h" * HUGE_HEADER)])
    if route == "ghost":
        ghost = encode(item("ghost", headers))
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        return _json(item(key, headers), ghost=head % len(ghost) + ghost)
    if route == "close":
        return _json(item(key, headers), close=True)
    if route == "never":
        return _json(item(key, headers), delay=NEVER)
    return _json({"error": f"no route {parts.path}"}, status=404)


def negotiate(data: bytes, accept_encoding: str) -> Answer:
    """The coding the client asks for: zstd (where ``zstandard`` is installed), else gzip, else
    none; the coding used is named in ``X-Coding``."""
    asked = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    coding, body = "identity", data
    if "zstd" in asked and zstandard is not None:
        coding, body = "zstd", zstandard.ZstdCompressor().compress(data)
    elif "gzip" in asked:
        coding, body = "gzip", gzip.compress(data)
    headers = [("Vary", "Accept-Encoding"), ("X-Coding", coding)]
    if coding != "identity":
        headers.append(("Content-Encoding", coding))
    return Answer(headers=headers, body=body)


def status(code: int) -> Answer:
    if code in (204, 304):
        return Answer(status=code)
    out = _json({"status": code}, status=code)
    if 300 <= code < 400:
        out.headers.append(("Location", "/item/redirected"))
    return out


REASONS = {
    100: "Continue",
    102: "Processing",
    103: "Early Hints",
    200: "OK",
    201: "Created",
    204: "No Content",
    301: "Moved Permanently",
    302: "Found",
    304: "Not Modified",
    400: "Bad Request",
    404: "Not Found",
    410: "Gone",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
