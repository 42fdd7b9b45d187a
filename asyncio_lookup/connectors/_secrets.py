"""Masking of passwords and tokens in URLs, DSNs, headers and messages.

Every ``repr``, log line and error message a connector writes goes through these helpers,
so a secret from the configuration never reaches a log or a traceback. URL masking itself is
:mod:`asyncio_lookup.masking` (the runtime's failure causes use it too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from asyncio_lookup.masking import KEYWORD_PASSWORD, MASK, SECRET_PARAM, mask_url

_SENSITIVE_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers with credential-carrying values replaced by ``***``."""
    return {
        k: MASK if k.lower() in _SENSITIVE_HEADERS or SECRET_PARAM.search(k) else v
        for k, v in headers.items()
    }


def url_secrets(url: str) -> list[str]:
    """The secret strings inside ``url`` (password, secret query values), for :func:`redact`."""
    if "://" not in url:
        return [s for s in (m.group(2).strip("'") for m in KEYWORD_PASSWORD.finditer(url)) if s]
    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        found += [
            v for k, v in parse_qsl(parts.query, keep_blank_values=True) if SECRET_PARAM.search(k)
        ]
    except ValueError:
        pass
    return [s for s in found if s]


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret (and its URL-quoted form) replaced."""
    from urllib.parse import quote

    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK).replace(quote(secret, safe=""), MASK)
    return text


_SHOWN = 300


def shown_url(url: str) -> str:
    """A request's URL as an error message names it: masked, and cut to 300 characters (a
    query batch's URL can be 10 KB, and every key of the batch carries the message)."""
    masked = mask_url(url)
    if len(masked) <= _SHOWN:
        return masked
    return f"{masked[:_SHOWN]}... ({len(masked):,} characters)"


__all__ = ["MASK", "mask_headers", "mask_url", "redact", "shown_url", "url_secrets"]


def identity_digest(kind: str, settings: Any) -> str:
    """A connector's ``cache_identity``: ``kind:`` and a SHA-256 of ``settings`` as sorted JSON
    (everything its answers depend on; a secret among them never shows, only the digest)."""
    text = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return f"{kind}:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
