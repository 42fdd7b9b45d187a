"""HTTP content codings (RFC 9110 §8.4), decoded the same way by every client.

``gzip`` (every member of a multi-member body) and ``deflate`` always (zlib; ``deflate`` as
zlib-wrapped or raw, as servers send both); ``br`` where ``brotli`` or ``brotlicffi`` 1.2+ is
installed and ``zstd`` (every frame) where ``zstandard`` is: what :data:`ACCEPT_ENCODING`
advertises is exactly what :func:`decode` reads. Decoding is bounded: a body that inflates past
``limit`` bytes is refused, never held whole; a truncated stream is refused, never cut short.
"""

from __future__ import annotations

import contextlib
import importlib
import zlib
from collections.abc import Callable, Sized
from typing import Any, TypeVar

from asyncio_lookup.connectors.http_client import UnreadableResponse

Decoder = Callable[[bytes, int], bytes]
S = TypeVar("S", bound=Sized)


def _zlib(wbits: int, members: bool = False) -> Decoder:
    """A zlib decoder; with ``members``, one member after another (gzip, RFC 1952 §2.2)."""

    def decode(data: bytes, limit: int) -> bytes:
        out = b""
        while True:
            inflater = zlib.decompressobj(wbits)
            out = _bounded(out + inflater.decompress(data, limit + 1 - len(out)), limit)
            if not inflater.eof:
                raise zlib.error("incomplete or truncated stream")
            data = inflater.unused_data
            if not members or not data.strip(b"\x00"):  # zero padding after the last member
                return out

    return decode


_gzip = _zlib(16 + zlib.MAX_WBITS, members=True)
_zlib_wrapped = _zlib(zlib.MAX_WBITS)
_raw_deflate = _zlib(-zlib.MAX_WBITS)


def _deflate(data: bytes, limit: int) -> bytes:
    try:  # RFC 9110's deflate is zlib-wrapped; some servers send it raw
        return _zlib_wrapped(data, limit)
    except zlib.error:
        return _raw_deflate(data, limit)


def _brotli(module: Any) -> Decoder | None:
    """A bounded ``br`` decoder; None for a brotli too old to bound its output (< 1.2)."""
    if not hasattr(module.Decompressor(), "can_accept_more_data"):
        return None

    def decode(data: bytes, limit: int) -> bytes:
        inflater = module.Decompressor()
        out: bytes = inflater.process(data, output_buffer_limit=limit + 1)
        _bounded(out, limit)
        if not inflater.is_finished():
            raise ValueError("incomplete or truncated stream")
        return out

    return decode


_ZSTD_MAX_RATIO = 1 << 15  # a zstd block inflates at most 128 KiB from 4 bytes


def _zstd(module: Any) -> Decoder:
    """A ``zstd`` decoder of every frame (RFC 8878 §3); each step is fed only as much input as
    can inflate to the room left under ``limit`` (plus at most 8 MiB)."""

    def decode(data: bytes, limit: int) -> bytes:
        out = bytearray()
        start = 0
        while start < len(data):  # one frame a turn
            frame = module.ZstdDecompressor().decompressobj()
            while not frame.eof:
                if start >= len(data):
                    raise ValueError("incomplete or truncated frame")
                step = max(256, (limit + 1 - len(out)) // _ZSTD_MAX_RATIO)
                chunk = data[start : start + step]
                out += frame.decompress(chunk)
                start += len(chunk)
                _bounded(out, limit)
            start -= len(frame.unused_data)
        return bytes(out)

    return decode


def _first_module(*names: str) -> Any:
    """The first of ``names`` that imports, else None."""
    for name in names:
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    return None


def _optional_decoders() -> dict[str, Decoder]:
    found: dict[str, Decoder] = {}
    brotli = _first_module("brotli", "brotlicffi")
    br = _brotli(brotli) if brotli is not None else None
    if br is not None:
        found["br"] = br
    zstandard = _first_module("zstandard")
    if zstandard is not None:
        found["zstd"] = _zstd(zstandard)
    return found


def _over(limit: int) -> UnreadableResponse:
    return UnreadableResponse(f"the decoded body is over max_body_size={limit:,} bytes")


def _bounded(out: S, limit: int) -> S:
    if len(out) > limit:
        raise _over(limit)
    return out


DECODERS: dict[str, Decoder] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    **_optional_decoders(),
}
ACCEPT_ENCODING = ", ".join(c for c in ("gzip", "deflate", "br", "zstd") if c in DECODERS)


def with_accept_encoding(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with ``Accept-Encoding:`` :data:`ACCEPT_ENCODING` unless they name one:
    what a client that leaves decoding to :func:`decode` advertises."""
    if any(name.lower() == "accept-encoding" for name in headers):
        return headers
    return {"Accept-Encoding": ACCEPT_ENCODING, **headers}


def decode(codings: bytes | str, body: bytes, limit: int) -> bytes:
    """``body`` with the codings of a ``Content-Encoding`` value undone (the last applied
    first); raises :class:`UnreadableResponse` for a coding this client does not know or a
    body it cannot inflate. An empty body (a 204, 304 or ``HEAD`` answer's) stays empty."""
    if not body:
        return body
    if isinstance(codings, bytes):
        codings = codings.decode("latin-1")
    names = [c.strip().lower() for c in codings.split(",")]
    for name in reversed(names):
        if name in ("", "identity"):
            continue
        decoder = DECODERS.get(name)
        if decoder is None:
            raise UnreadableResponse(
                f"Content-Encoding {name!r} is not one this client decodes "
                f"({ACCEPT_ENCODING}, identity)"
            )
        try:
            body = decoder(body, limit)
        except UnreadableResponse:
            raise
        except Exception as error:  # zlib.error, brotli.error, zstd.ZstdError, truncation
            raise UnreadableResponse(f"the {name} body does not decode: {error}") from error
    return body


__all__ = ["ACCEPT_ENCODING", "DECODERS", "UnreadableResponse", "decode", "with_accept_encoding"]
