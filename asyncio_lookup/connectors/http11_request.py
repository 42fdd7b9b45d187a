"""What the asyncio HTTP/1.1 client puts on the wire besides the method: an origin's address
and pre-built header block (``Host``, the client's headers, a proxy's credentials), request
targets as RFC 3986 allows them, and header lines that cannot inject others."""

from __future__ import annotations

import base64
import re
import urllib.request
from collections.abc import Mapping
from urllib.parse import quote, unquote, urlsplit

USER_AGENT = "asyncio-lookup"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SAFE_TARGET = "/?&=%:@!$'()*+,;~-._[]"
_ILLEGAL = re.compile(r"[^A-Za-z0-9/?&=%:@!$'()*+,;~\-._\[\]]")
PLAIN_TARGET = re.compile(r"[A-Za-z0-9/?&=:@!$'()*+,;~\-._\[\]]*")  # legal, no "%" nor "#"
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class Origin:
    """Where the requests for one ``scheme://authority`` go, and their pre-built header block."""

    __slots__ = (
        "absolute",
        "address",
        "authority",
        "host",
        "port",
        "proxy",
        "tail",
        "tail_end",
        "tls",
        "url_prefix",
    )

    def __init__(
        self, scheme: str, authority: str, headers: bytes, proxies: Mapping[str, str]
    ) -> None:
        parts = urlsplit(f"{scheme}://{authority}")
        if not parts.hostname:
            raise ValueError(f"no host in {scheme}://{authority}")
        self.host = parts.hostname
        self.port = parts.port or (443 if scheme == "https" else 80)
        self.tls = scheme == "https"
        self.authority = authority.rpartition("@")[2]
        self.proxy: tuple[str, int, bytes] | None = None
        self.absolute = ""  # the prefix of an absolute-form target (http:// through a proxy)
        proxy_headers = b""
        proxy_url = proxies.get(scheme)
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if proxy_url and not bypass(self.host, proxies):
            proxy = urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
            authorization = b""
            if proxy.username is not None:
                credentials = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
                token = base64.b64encode(credentials.encode()).decode()
                authorization = f"Proxy-Authorization: Basic {token}\r\n".encode("latin-1")
            self.proxy = (proxy.hostname or "127.0.0.1", proxy.port or 80, authorization)
            if not self.tls:
                self.absolute = f"{scheme}://{self.authority}"
                proxy_headers = authorization
        self.address = (self.proxy[0], self.proxy[1]) if self.proxy else (self.host, self.port)
        host = b"Host: " + self.authority.encode("idna" if not authority.isascii() else "ascii")
        if (b"\r\n" + headers).lower().find(b"\r\nhost:") >= 0:
            host = b""  # the caller's Host header names the virtual host, as in curl -H
        self.tail = host + (b"\r\n" if host else b"") + headers + proxy_headers
        self.tail_end = self.tail + b"\r\n"  # the end of a request without a body
        self.url_prefix = ""  # "scheme://authority/" as the client's URLs spell it


def request_target(target: str) -> str:
    """``target`` as RFC 3986 allows it on the wire: what is already legal is kept (a valid
    ``%XX`` too); anything else is percent-encoded (UTF-8). Control characters are refused
    (:class:`ValueError`): they could end the request line and start a header."""
    if PLAIN_TARGET.fullmatch(target):
        return target  # the common case: nothing to check further
    if CONTROL.search(target):
        raise ValueError(f"a control character in the URL {target!r}")
    if _ILLEGAL.search(target):
        target = quote(target, safe=_SAFE_TARGET)
    if "%" in target:
        target = _STRAY_PERCENT.sub("%25", target)
    return target


def header_block(headers: Mapping[str, str]) -> bytes:
    """Request header lines; refuses (:class:`ValueError`) names that are not tokens and
    values with control characters (CR/LF would inject headers)."""
    lines = []
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if CONTROL.search(value):
            raise ValueError(f"a control character in the value of header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


__all__ = ["CONTROL", "PLAIN_TARGET", "USER_AGENT", "Origin", "header_block", "request_target"]
