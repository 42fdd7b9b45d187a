"""The HTTP connector's settings checked on the driver, and its URLs: the key template (values
percent-encoded with nothing kept safe, so a key can never add a path segment, a query, a
fragment, a header or change the host), fixed batch and scan URLs, status sets, headers."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from asyncio_lookup.connectors._secrets import mask_url
from asyncio_lookup.connectors.http11_request import header_block
from asyncio_lookup.connectors.keys import KeyTemplate, key_text
from asyncio_lookup.errors import ConfigurationError

_MARK = "\x00placeholder\x00"


def encode_value(value: Any) -> str:
    """A key value as an opaque path/query piece: every reserved character and dot encoded."""
    if type(value) is int:
        return str(value)  # digits and "-" only: nothing to encode
    return quote(key_text(value), safe="").replace(".", "%2E")


def path_fields(template: KeyTemplate) -> frozenset[str]:
    """The template's placeholders in the URL's path (not its query)."""
    pieces = [template.literals[0]]
    for n, literal in enumerate(template.literals[1:]):
        pieces += (f"\x00{n}\x00", literal)  # a mark per placeholder, formatted unchecked
    path = urlsplit("".join(pieces)).path
    return frozenset(f for n, f in enumerate(template.fields) if f"\x00{n}\x00" in path)


def split_before_decoding(template: KeyTemplate) -> frozenset[str]:
    """Placeholders whose separator a server splits on before it decodes: ``/`` after a path
    placeholder, ``&`` or ``=`` after a query one (any other separator, ``.`` or ``:`` say,
    is read in the decoded text, so a value must not hold it even percent-encoded)."""
    in_path = path_fields(template)
    return frozenset(
        field
        for field, separator in template.separators
        if separator in ("/" if field in in_path else "&=")
    )


def url_template(url: str, option: str) -> tuple[KeyTemplate, tuple[str, str] | None]:
    """The URL template without userinfo (returned apart as basic auth), validated."""
    template = KeyTemplate(url, option)
    probe = urlsplit(_MARK.join(template.literals))  # every placeholder a mark
    if probe.scheme not in ("http", "https") or not probe.hostname:
        raise ConfigurationError(option, mask_url(url), "an http:// or https:// URL with a host")
    if _MARK in probe.scheme + probe.netloc + probe.fragment:
        raise ConfigurationError(
            option,
            mask_url(url),
            "placeholders in the path or query only",
            "a key must not choose the host, port, credentials or fragment",
        )
    credentials = None
    if probe.username is not None:
        credentials = (probe.username, probe.password or "")
        parts = urlsplit(url)
        hostport = parts.netloc.rpartition("@")[2]
        url = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
        template = KeyTemplate(url, option)
    return template, credentials


def status_set(option: str, statuses: Collection[int]) -> frozenset[int]:
    if isinstance(statuses, (str, bytes)) or not all(
        type(s) is int and 100 <= s <= 599 for s in statuses
    ):
        raise ConfigurationError(option, statuses, "HTTP status codes (integers 100-599)")
    return frozenset(statuses)


def fixed_url(url: str | None, option: str) -> str | None:
    """A batch or scan URL: validated like the template, with no placeholders."""
    if url is not None and url_template(url, option)[0].fields:
        raise ConfigurationError(option, mask_url(url), "a URL without placeholders")
    return url


def check_headers(option: str, headers: dict[str, str], shown: Any) -> None:
    """Refuse on the driver what would break a request's header block (CR/LF injection)."""
    try:
        header_block(headers)
    except (ValueError, AttributeError, TypeError) as error:
        raise ConfigurationError(
            option,
            shown,
            "header names that are HTTP tokens and string values without "
            "control characters (CR, LF, ...)",
            str(error),
        ) from error
