"""Masking of passwords and tokens in URLs, DSNs, headers and messages.

Every ``repr``, log line and error message a connector writes goes through these helpers,
so a secret from the configuration never reaches a log or a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"

_SECRET_PARAM = re.compile(r"pass|secret|token|key|auth|signature|sig$", re.IGNORECASE)
# libpq keyword/value DSN: password=secret or password='se cret'
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_SENSITIVE_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}


def mask_url(url: str) -> str:
    """``url`` with its password and secret-looking query parameters replaced by ``***``."""
    if "://" not in url:
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
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
                [(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in pairs], safe="*"
            )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparsable url>"


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers with credential-carrying values replaced by ``***``."""
    return {
        k: MASK if k.lower() in _SENSITIVE_HEADERS or _SECRET_PARAM.search(k) else v
        for k, v in headers.items()
    }


def url_secrets(url: str) -> list[str]:
    """The secret strings inside ``url`` (password, secret query values), for :func:`redact`."""
    if "://" not in url:
        return [s for s in (m.group(2).strip("'") for m in _KEYWORD_PASSWORD.finditer(url)) if s]
    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        found += [
            v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(k)
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
