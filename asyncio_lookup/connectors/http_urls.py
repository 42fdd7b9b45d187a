"""The HTTP connector's settings checked on the driver, and its URLs: the key template (values
percent-encoded with nothing kept safe, so a key can never add a path segment, a query, a
fragment, a header or change the host), fixed batch and scan URLs, status sets, headers."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from asyncio_lookup.connectors._secrets import mask_url
from asyncio_lookup.connectors.http11_request import CONTROL, header_block
from asyncio_lookup.connectors.keys import KeyTemplate, key_text
from asyncio_lookup.errors import ConfigurationError, DataFormatError

Credentials = tuple[str, str]

_MARK = "\x00placeholder\x00"


def encode_value(value: Any) -> str:
    """A key value as an opaque path/query piece: every reserved character and dot encoded."""
    if type(value) is int:
        return str(value)  # digits and "-" only: nothing to encode
    return quote(utf8_text(value), safe="").replace(".", "%2E")


def utf8_text(value: Any) -> str:
    """``key_text(value)``; a :class:`DataFormatError` (for this key) when it is not valid
    Unicode text (a lone surrogate), which no request can carry."""
    text = key_text(value)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as error:
            raise DataFormatError(
                f"key value {text!r} is not valid Unicode text ({error.reason}): "
                "it cannot be sent in an HTTP request"
            ) from None
    return text


def path_fields(template: KeyTemplate) -> frozenset[str]:
    """The template's placeholders in the URL's path (not its query)."""
    pieces = [template.literals[0]]
    for n, literal in enumerate(template.literals[1:]):
        pieces += (f"\x00{n}\x00", literal)  # a mark per placeholder, formatted unchecked
    path = urlsplit("".join(pieces)).path
    return frozenset(f for n, f in enumerate(template.fields) if f"\x00{n}\x00" in path)


def split_before_decoding(template: KeyTemplate) -> frozenset[str]:
    """Placeholders whose separator every server splits on before it decodes: ``&`` or ``=``
    after a query placeholder (WSGI and ASGI hand the query over raw). Any other separator is
    read in the decoded text, so a value must not hold it even percent-encoded: ``.`` or
    ``:``, and ``/`` after a path placeholder, since WSGI's ``PATH_INFO`` and ASGI's ``path``
    are decoded before routing (Flask, Django and FastAPI read ``a%2Fb`` as ``a/b``)."""
    in_path = path_fields(template)
    return frozenset(
        field
        for field, separator in template.separators
        if field not in in_path and separator in "&="
    )


def decoded_separators(template: KeyTemplate) -> dict[str, str]:
    """Placeholders whose separator a server reads as another character: ``+`` after a query
    placeholder is a space once decoded (``?id={a}+{b}``: ``('x y', 'z')`` and
    ``('x', 'y z')`` both read ``x y z``)."""
    in_path = path_fields(template)
    return {
        field: " "
        for field, separator in template.separators
        if field not in in_path and separator == "+"
    }


def url_template(url: str, option: str) -> tuple[KeyTemplate, Credentials | None]:
    """The URL template without userinfo (returned apart, percent-decoded, as basic auth),
    validated."""
    if not isinstance(url, str):
        raise ConfigurationError(option, url, "an http:// or https:// URL (text)")
    control = CONTROL.search(url)
    if control:  # urlsplit() drops CR, LF and tab; a client refuses every request with them
        raise ConfigurationError(
            option,
            mask_url(url),
            "a URL without control characters",
            f"{control.group()!r} at offset {control.start()}",
        )
    scheme, colon, rest = url.partition(":")
    if colon and scheme.lower() in ("http", "https"):
        url = scheme.lower() + colon + rest  # the clients compare schemes in lower case
    template = KeyTemplate(url, option)
    try:
        probe = urlsplit(_MARK.join(template.literals))  # every placeholder a mark
    except ValueError as error:  # "Invalid IPv6 URL"
        raise ConfigurationError(
            option, mask_url(url), "an http:// or https:// URL with a host", str(error)
        ) from None
    if not url.startswith(("http://", "https://")) or not probe.hostname:
        raise ConfigurationError(option, mask_url(url), "an http:// or https:// URL with a host")
    if any(c.isspace() for c in probe.netloc):  # every request would fail
        raise ConfigurationError(
            option, mask_url(url), "an http:// or https:// URL with a host", "a space in the host"
        )
    if _MARK in probe.scheme + probe.netloc + probe.fragment:
        raise ConfigurationError(
            option,
            mask_url(url),
            "placeholders in the path or query only",
            "a key must not choose the host, port, credentials or fragment",
        )
    try:
        probe.port  # noqa: B018 -- raises for a port that is not a number in 0-65535
    except ValueError as error:
        raise ConfigurationError(
            option, mask_url(url), "an http:// or https:// URL with a port in 1-65535", str(error)
        ) from None
    if probe.port == 0:
        raise ConfigurationError(
            option, mask_url(url), "an http:// or https:// URL with a port in 1-65535"
        )
    if probe.username is None:
        return template, None
    credentials = (unquote(probe.username), unquote(probe.password or ""))
    return KeyTemplate(_without_userinfo(url), option), credentials


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))


def status_set(option: str, statuses: Collection[int]) -> frozenset[int]:
    if (
        not isinstance(statuses, Collection)
        or isinstance(statuses, (str, bytes))
        or not all(type(s) is int and 100 <= s <= 599 for s in statuses)
    ):
        raise ConfigurationError(option, statuses, "HTTP status codes (integers 100-599)")
    return frozenset(statuses)


def fixed_url(url: str | None, option: str) -> tuple[str | None, Credentials | None]:
    """A batch or scan URL: validated like the template, with no placeholders; without its
    userinfo, returned apart as basic auth (as :func:`url_template` does)."""
    if url is None:
        return None, None
    template, credentials = url_template(url, option)
    if template.fields:
        raise ConfigurationError(option, mask_url(url), "a URL without placeholders")
    return (url if credentials is None else _without_userinfo(url)), credentials


def one_credentials(**given: Credentials | None) -> Credentials | None:
    """The credentials of the URLs that carry some; they must agree (one connector sends one
    ``Authorization``)."""
    found = {option: c for option, c in given.items() if c is not None}
    if len(set(found.values())) > 1:
        raise ConfigurationError(
            "url / batch_url / scan_url",
            {option: f"{c[0]}:***" for option, c in found.items()},
            "the same user:password in every URL that has one (or basic_auth)",
            "the connector sends one Authorization header with every request",
        )
    return next(iter(found.values()), None)


# Fields that frame a request or its connection: the clients write them; a second
# Content-Length made the server read the next request's first bytes as this one's body.
FRAMING_HEADERS = frozenset(
    ("content-length", "transfer-encoding", "te", "trailer", "upgrade", "connection", "keep-alive")
)


def check_headers(option: str, headers: dict[str, str], shown: Any) -> None:
    """Refuse on the driver what would break a request's header block (CR/LF injection) or its
    framing (:data:`FRAMING_HEADERS`), and a second ``Host``."""
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
    names = [name.lower() for name in headers]
    framing = sorted({name for name in headers if name.lower() in FRAMING_HEADERS})
    if framing:
        raise ConfigurationError(
            option,
            shown,
            "headers other than " + ", ".join(sorted(FRAMING_HEADERS)),
            f"{framing} frame the request or its connection, which the HTTP client does",
        )
    if names.count("host") > 1:
        raise ConfigurationError(option, shown, "at most one Host header")
