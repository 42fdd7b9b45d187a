"""HTTP content codings (RFC 9110 §8.4) the asyncio client decodes.

``gzip`` and ``deflate`` always (zlib; ``deflate`` as zlib-wrapped or raw, as servers send
both); ``br`` where ``brotli`` or ``brotlicffi`` is installed and ``zstd`` where ``zstandard``
is: what :data:`ACCEPT_ENCODING` advertises is exactly what :func:`decode` reads. Decoding is
bounded: a body that inflates past ``limit`` bytes is refused, never held whole.
"""

from __future__ import annotations

import contextlib
import importlib
import zlib
from collections.abc import Callable
from typing import Any

from asyncio_lookup.connectors.http_client import UnreadableResponse


def _zlib(wbits: int) -> Callable[[bytes, int], bytes]:
    def decode(data: bytes, limit: int) -> bytes:
        inflater = zlib.decompressobj(wbits)
        out = _bounded(inflater.decompress(data, limit + 1), limit)
        if not inflater.eof:
            raise zlib.error("incomplete or truncated stream")
        return out

    return decode


_gzip = _zlib(16 + zlib.MAX_WBITS)
_zlib_wrapped = _zlib(zlib.MAX_WBITS)
_raw_deflate = _zlib(-zlib.MAX_WBITS)


def _deflate(data: bytes, limit: int) -> bytes:
    try:  # RFC 9110's deflate is zlib-wrapped; some servers send it raw
        return _zlib_wrapped(data, limit)
    except zlib.error:
        return _raw_deflate(data, limit)


def _first_module(*names: str) -> Any:
    """The first of ``names`` that imports, else None."""
    for name in names:
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    return None


def _optional_decoders() -> dict[str, Callable[[bytes, int], bytes]]:
    found: dict[str, Callable[[bytes, int], bytes]] = {}
    brotli = _first_module("brotli", "brotlicffi")
    if brotli is not None:
        found["br"] = lambda data, limit: _bounded(brotli.decompress(data), limit)
    zstandard = _first_module("zstandard")
    if zstandard is not None:
        found["zstd"] = lambda data, limit: _bounded(
            zstandard.ZstdDecompressor().decompressobj().decompress(data), limit
        )
    return found


def _bounded(out: bytes, limit: int) -> bytes:
    if len(out) > limit:
        raise UnreadableResponse(f"the decoded body is over max_body_size={limit:,} bytes")
    return out


DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    **_optional_decoders(),
}
ACCEPT_ENCODING = ", ".join(c for c in ("gzip", "deflate", "br", "zstd") if c in DECODERS)


def decode(codings: bytes, body: bytes, limit: int) -> bytes:
    """``body`` with the codings of a ``Content-Encoding`` value undone (the last applied
    first); raises :class:`UnreadableResponse` for a coding this client does not know or a
    body it cannot inflate."""
    names = [c.strip().lower() for c in codings.decode("latin-1").split(",")]
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
        except Exception as error:  # zlib.error, brotli.error, zstd.ZstdError
            raise UnreadableResponse(f"the {name} body does not decode: {error}") from error
    return body


__all__ = ["ACCEPT_ENCODING", "DECODERS", "UnreadableResponse", "decode"]
