"""Reading the HTTP connector's answers: ``Retry-After``, rows at a dotted path, the next page
of a scan (a body field or the ``Link: rel="next"`` header) and pagination loops."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

from asyncio_lookup.connectors._secrets import mask_url
from asyncio_lookup.errors import DataFormatError

MAX_RETRY_AFTER = 300.0
"""The longest ``Retry-After`` obeyed, in seconds; a longer one (or a later HTTP-date) is taken
as this (a typo or a hostile server must not stall a job for years)."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 §10.2.3: delta-seconds or an HTTP-date) as seconds from now,
    at most :data:`MAX_RETRY_AFTER`; ``None`` if absent or not either form."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value[:12]), MAX_RETRY_AFTER)  # 12 digits: already past the cap
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
    seconds = when - (time.time() if now is None else now)
    return min(max(0.0, seconds), MAX_RETRY_AFTER)


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name`` (a response may repeat it), whichever client read it."""
    getall = getattr(headers, "getall", None)  # every client's headers have it
    if getall is not None:
        try:
            return list(getall(name))
        except KeyError:  # aiohttp's, for a header not there
            return []
    found = headers.get(name)
    return [] if found is None else [found]


MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""What :func:`dig` returns for a path the body does not have."""


def dig(body: Any, path: str | None) -> Any:
    """The value at the dotted ``path`` in ``body``: ``None`` where the path meets a null,
    :data:`MISSING` where a field is absent or a step is not an object."""
    if not path:
        return body
    for part in path.split("."):
        if body is None:
            return None
        if not isinstance(body, dict) or part not in body:
            return MISSING
        body = body[part]
    return body


def missing_field(body: Any, path: str) -> str | None:
    """Where ``path`` leaves ``body`` (for an error), or None when the field is absent as an
    empty list is in proto3 JSON (Google APIs, gRPC gateways leave empty repeated fields out):
    missing from an object that holds no list under another name. An object holding one
    (``{"item": [...]}`` for ``items``) more likely names the rows otherwise: an error."""
    walked: list[str] = []
    for part in path.split("."):
        where = ".".join(walked) or "the body"
        if not isinstance(body, dict):
            return f"{where} is {type(body).__name__}, not an object"
        if part not in body:
            if not any(isinstance(value, list) for value in body.values()):
                return None
            return f"{where} has no field {part!r} (it has {sorted(body)[:20]})"
        walked.append(part)
        body = body[part]
    return None


def check_loop(url: str, seen: set[str]) -> None:
    if url in seen:
        raise DataFormatError(f"scan: page {mask_url(url)!r} was already read (pagination loop)")
    seen.add(url)


# a piece of a Link value: a <URI>, a quoted string (with \-escapes), or any other character
_PIECE = re.compile(r'<[^>]*>|"(?:[^"\\]|\\.)*"?|[^<"]', re.DOTALL)


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside ``<...>`` and quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    for piece in _PIECE.findall(text):
        if piece == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(piece)
    parts.append("".join(current))
    return parts


def _links(value: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``(target, {param: value})`` of each link-value of a ``Link`` field (RFC 8288 §3);
    parameter names lowercased, the first occurrence of each kept."""
    for link in _split(value, ","):
        target, *params = _split(link, ";")
        target = target.strip()
        if not (target.startswith("<") and target.endswith(">")):
            continue  # not a link-value (a stray comma, or garbage): skipped
        found: dict[str, str] = {}
        for param in params:
            name, _, text = param.partition("=")
            text = text.strip()
            if text.startswith('"'):
                text = re.sub(r"\\(.)", r"\1", text[1:].removesuffix('"'))
            found.setdefault(name.strip().lower(), text)
        yield target[1:-1].strip(), found


def link_next(links: str | list[str], current: str) -> str | None:
    """The target of the first link whose ``rel`` (a space-separated list of relation types,
    case-insensitive) holds ``next``, resolved against ``current``; ``links`` is a ``Link``
    value or all of a response's."""
    value = links if isinstance(links, str) else ", ".join(links)
    for target, params in _links(value):
        if "next" in params.get("rel", "").lower().split():
            return urljoin(current, target)
    return None
