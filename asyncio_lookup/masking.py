"""Masking of passwords and tokens in URLs, DSNs and free text, for every layer: the connectors
(:mod:`asyncio_lookup.connectors._secrets`) and the runtime's failure causes."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

SECRET_PARAM = re.compile(r"pass|secret|token|key|auth|signature|sig$", re.IGNORECASE)
# libpq keyword/value DSN: password=secret or password='se cret'
KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with its password and secret-looking query parameters replaced by ``***``."""
    if "://" not in url:
        return KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user, has_password, _ = userinfo.partition(":")
            netloc = f"{user}:{MASK}@{hostport}" if has_password else f"{user}@{hostport}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode(
                [(k, MASK if SECRET_PARAM.search(k) else v) for k, v in pairs], safe="*"
            )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparsable url>"


_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def mask_text(text: str) -> str:
    """``text`` with each URL masked (:func:`mask_url`) and ``password=`` values masked."""
    text = _URL.sub(lambda m: mask_url(m.group(0)), text)
    return KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
