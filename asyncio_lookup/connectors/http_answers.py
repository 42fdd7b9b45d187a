"""Reading the HTTP connector's answers: ``Retry-After``, rows at a dotted path, the next page
of a scan (a body field or the ``Link: rel="next"`` header) and pagination loops."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

from asyncio_lookup.connectors._secrets import mask_url
from asyncio_lookup.errors import DataFormatError


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now (delta-seconds or an HTTP-date); ``None`` if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def dig(body: Any, path: str | None) -> Any:
    if not path:
        return body
    for part in path.split("."):
        if not isinstance(body, dict):
            return None
        body = body.get(part)
    return body


def check_loop(url: str, seen: set[str]) -> None:
    if url in seen:
        raise DataFormatError(f"scan: page {mask_url(url)!r} was already read (pagination loop)")
    seen.add(url)


def link_next(link: str, current: str) -> str | None:
    for part in link.split(","):
        target, *params = part.split(";")
        if any(p.strip().replace('"', "").lower() == "rel=next" for p in params):
            return urljoin(current, target.strip().strip("<>"))
    return None
