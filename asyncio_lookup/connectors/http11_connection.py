"""One HTTP/1.1 connection as an asyncio protocol: a request goes out, its one final answer
comes back through a future.

The response is parsed by llhttp (``httptools``, C). What RFC 9112 asks of a client reading
answers lives here, so no caller ever sees a half-read or a foreign answer:

- **Interim answers** (``1xx`` but ``101``: ``100 Continue``, ``102 Processing``, ``103 Early
  Hints``) are read and dropped; the final answer goes to the request that asked for it.
- **One answer per request:** bytes after the final answer are a :class:`ProtocolViolation`
  that closes the connection; the request in flight fails rather than take an answer that may
  be someone else's. Bytes that arrive when no request is in flight close the connection and
  are logged once per process: a server that answered a request twice may have handed each
  request since the one answered twice its predecessor's answer, when each next request was
  already in flight as the extra answer came (nothing in HTTP/1.1 tells them apart; an
  answer naming its key is checked by the HTTP connector's ``check_answer_keys``).
- **Lenient where RFC 9112 lets a client be**, as aiohttp is for responses: a folded header
  line (obs-fold) read as one, a bare LF ending a line, spaces after a chunk's size.
- **HEAD** answers end with their header block (their ``Content-Length`` announces no body).
- **Limits** (:class:`Limits`): the header block's size and count, the body's size (decoded
  too); over one, the request fails with :class:`UnreadableResponse`.
- **Trailers** of a chunked body are held to the header block's limits and dropped (RFC 9110
  §6.5.1): none changes the answer's headers, coding or keep-alive.
- **An answer without a length** (no ``Content-Length``, not chunked) ends at a clean close
  only; a reset fails it (:class:`ConnectionClosed`, ``before_answer=False``).
- **Content codings** are undone (:mod:`~asyncio_lookup.connectors.http_codings`).
- ``Keep-Alive: timeout=N`` is kept (the pool retires the connection before the server does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import httptools

from asyncio_lookup.connectors.http11_types import ConnectionClosed, Limits, ProtocolViolation
from asyncio_lookup.connectors.http_client import Fetched, UnreadableResponse
from asyncio_lookup.connectors.http_codings import decode

log = logging.getLogger(__name__)
_stray_answer_logged: list[bool] = []  # once per process: an answer no request asked for


def _response_parser(protocol: Any) -> httptools.HttpResponseParser:
    """llhttp for a response, with the leniencies aiohttp turns on for responses (RFC 9112
    §5.2: a client must read a folded header line; §2.2: it may take a bare LF as a line's
    end)."""
    parser = httptools.HttpResponseParser(protocol)
    parser.set_dangerous_leniencies(
        lenient_headers=True,
        lenient_optional_cr_before_lf=True,
        lenient_spaces_after_chunk_size=True,
    )
    return parser


class Headers(Mapping[str, str]):
    """A response's headers, read-only; names are case-insensitive (the last value wins)."""

    __slots__ = ("_by_name", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._by_name: dict[str, str] | None = None

    def _index(self) -> dict[str, str]:
        if self._by_name is None:
            self._by_name = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._raw}
        return self._by_name

    def __getitem__(self, name: str) -> str:
        return self._index()[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._index().get(name.lower(), default)

    def getall(self, name: str) -> list[str]:
        """Every value of ``name``, in the order received (a response may repeat a header)."""
        wanted = name.lower().encode("latin-1")
        return [v.decode("latin-1") for k, v in self._raw if k.lower() == wanted]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._index()

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())

    def __repr__(self) -> str:
        return f"Headers({self._index()!r})"


class IdleOwner(Protocol):
    """What a connection tells its pool: it closed while idle."""

    def lost_idle(self, connection: Http11Connection) -> None: ...


class Http11Connection(asyncio.Protocol):
    """One kept-alive connection; answers the request in flight through ``waiter``."""

    def __init__(self, origin: Any, owner: IdleOwner, limits: Limits) -> None:
        self.origin = origin
        self.owner = owner
        self.limits = limits
        self.max_headers = limits.max_headers
        self.transport: asyncio.Transport | None = None
        self.parser = _response_parser(self)
        self.waiter: asyncio.Future[Fetched] | None = None
        self.head_only = False  # the request in flight is a HEAD
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.head_seen = 0  # bytes received while the header block is incomplete (then: of
        # the trailer section, as on_header counts it)
        self.trailers = 0  # trailer fields of the answer read
        self.coding: bytes | None = None  # the answer's Content-Encoding
        self.body: list[bytes] = []
        self.body_size = 0
        self.answer: Fetched | None = None  # the final answer, read, not yet handed over
        self.received = False  # a byte of the current answer has arrived
        self.headers_done = False  # the final answer's header block is read
        self.keep_alive: float | None = None  # the server's Keep-Alive: timeout=
        self.closed = False
        self.idle = False
        self.reused = False
        self.expires = 0.0  # when an idle connection is retired (the pool's clock)
        self.idle_since = 0.0  # when it was last put back idle (the pool's clock)
        self.fileno = -1  # its plain TCP socket's, to see bytes that came while idle
        self.tunnel: asyncio.Future[bytes] | None = None  # a proxy's answer to CONNECT
        self.tunnel_buffer = b""

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        # TLS: a readable socket may hold a session ticket, not an answer, so no check
        if sock is not None and transport.get_extra_info("sslcontext") is None:
            self.fileno = sock.fileno()

    def data_received(self, data: bytes) -> None:
        if self.tunnel is not None:
            self._tunnel_data(data)
            return
        waiter = self.waiter
        if waiter is None:
            self.abort()  # an answer nobody asked for: the connection can't be trusted
            if not _stray_answer_logged:
                _stray_answer_logged.append(True)
                log.warning(
                    "%s sent %d bytes no request asked for on an idle connection (closed): if "
                    "it answers some requests twice, each request sent on that connection "
                    "while such an extra answer was on its way read the answer before its own; "
                    "let the answers carry the key columns (check_answer_keys catches a row of "
                    "another key), and fix the server",
                    self.origin,
                    len(data),
                )
            return
        self.received = True
        if not self.headers_done:
            self.head_seen += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolViolation("the server switched protocols, never asked for"))
            return
        except httptools.HttpParserError as error:
            cause = error.__context__
            if isinstance(cause, (UnreadableResponse, ProtocolViolation)):
                self._fail(cause)
            elif self.parser.get_status_code() == 101:  # llhttp pauses on an upgrade
                self._fail(ProtocolViolation("the server switched protocols, never asked for"))
            else:
                self._fail(ProtocolViolation(f"unreadable HTTP answer: {error}"))
            return
        answer = self.answer
        if answer is not None:  # the final answer, complete: hand it over
            self.answer = self.waiter = None
            if self.closed:
                self.abort()
            if self.coding is not None:
                answer = self._decoded(answer, waiter)
            if answer is not None and not waiter.done():
                waiter.set_result(answer)
        elif self.headers_done:
            if self.head_only:
                self._hand_over_head()
        elif self.head_seen > self.limits.max_header_bytes:
            self._fail(self._too_large_head())  # one header line without an end

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.idle:
            self.idle = False
            self.owner.lost_idle(self)
        if self.tunnel is not None and not self.tunnel.done():
            self.tunnel.set_exception(ConnectionClosed("the proxy closed", before_answer=True))
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if exc is None and self.headers_done and self._reads_to_close():
            # an answer without a length ends at a clean close only: a reset (or any error)
            # may have cut it, and a cut body must not pass for the whole one
            status, headers = self.parser.get_status_code(), Headers(self.raw_headers)
            self.answer = (status, headers, self._body())
            self._hand_over()
            return
        reason = f": {exc}" if exc else ""
        self.waiter = None
        waiter.set_exception(
            ConnectionClosed(
                f"the server closed the connection{reason}", before_answer=not self.received
            )
        )

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.answer is not None:  # even its first bytes: else it could end on the next request
            raise ProtocolViolation(
                "the server sent bytes after its answer (a second answer to one request, or a "
                "body its status or length does not allow)"
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.headers_done:  # a trailer field of a chunked body
            self._trailer(name, value)
            return
        self.raw_headers.append((name, value))
        size = len(name)
        if size == 16 and name.lower() == b"content-encoding":
            # repeated lines are one list (RFC 9110 §5.3): "gzip" then "br" is "gzip, br"
            self.coding = value if self.coding is None else self.coding + b", " + value
        elif size == 10 and name.lower() == b"keep-alive":
            self.keep_alive = _keep_alive_timeout(value)

    def on_headers_complete(self) -> None:
        if len(self.raw_headers) > self.max_headers or (
            self.head_seen > self.limits.max_header_bytes
            and sum(len(k) + len(v) + 4 for k, v in self.raw_headers) > self.limits.max_header_bytes
        ):
            raise self._too_large_head()
        self.headers_done = True
        self.head_seen = self.trailers = 0  # from here on: the trailer section's size, count

    def _trailer(self, name: bytes, value: bytes) -> None:
        """A trailer field: held to the header block's limits and dropped (RFC 9110 §6.5.1:
        not merged into the headers, so none of them, ``Content-Encoding``, ``Keep-Alive``
        or ``Content-Length`` above all, changes how the answer is read)."""
        self.head_seen += len(name) + len(value) + 4
        self.trailers += 1
        if self.trailers > self.max_headers or self.head_seen > self.limits.max_header_bytes:
            raise UnreadableResponse(
                f"the trailer section is over {self.limits.max_header_bytes:,} bytes or "
                f"{self.limits.max_headers} fields"
            )

    def on_body(self, body: bytes) -> None:
        self.body_size += len(body)
        if self.body_size > self.limits.max_body_size:
            raise UnreadableResponse(
                f"the body is over max_body_size={self.limits.max_body_size:,} bytes"
            )
        self.body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 / 102 / 103 ... (a 101 stops the parser): the final follows
            self.headers_done = False
            self.raw_headers, self.head_seen, self.coding = [], 0, None
            return
        self.answer = (status, Headers(self.raw_headers), self._body())
        if not self.parser.should_keep_alive():
            self.closed = True  # after this answer: the connection is not reused

    # -- requests ----------------------------------------------------------------------------

    def send(
        self, request: bytes, loop: asyncio.AbstractEventLoop, head_only: bool = False
    ) -> asyncio.Future[Fetched]:
        self.waiter = waiter = loop.create_future()
        self.received = self.headers_done = False
        self.head_seen = 0
        self.head_only = head_only
        assert self.transport is not None
        self.transport.write(request)
        return waiter

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _hand_over(self) -> None:
        answer, self.answer = self.answer, None
        waiter, self.waiter = self.waiter, None
        if self.closed:
            self.abort()
        if waiter is None or waiter.done() or answer is None:
            return
        if self.coding is not None:
            answer = self._decoded(answer, waiter)
        if answer is not None:
            waiter.set_result(answer)

    def _decoded(self, answer: Fetched, waiter: asyncio.Future[Fetched]) -> Fetched | None:
        """``answer`` with its content coding undone; None when it failed ``waiter``."""
        coding, self.coding = self.coding, None
        assert coding is not None
        try:
            return answer[0], answer[1], decode(coding, answer[2], self.limits.max_body_size)
        except UnreadableResponse as error:
            if not waiter.done():
                waiter.set_exception(error)
            return None

    def _hand_over_head(self) -> None:
        """A HEAD's answer is its header block: a new parser for the next answer (llhttp would
        wait for the body its ``Content-Length`` announces)."""
        self.answer = (self.parser.get_status_code(), Headers(self.raw_headers), b"")
        keep_alive = self.parser.should_keep_alive()
        self.raw_headers, self.head_seen, self.coding = [], 0, None
        self.parser = _response_parser(self)
        if not keep_alive:
            self.closed = True
        self._hand_over()

    def _body(self) -> bytes:
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.raw_headers, self.body, self.body_size = [], [], 0
        return body

    def _too_large_head(self) -> UnreadableResponse:
        return UnreadableResponse(
            f"the response header block is over {self.limits.max_header_bytes:,} bytes or "
            f"{self.limits.max_headers} headers"
        )

    def _reads_to_close(self) -> bool:
        names = {k.lower() for k, _ in self.raw_headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _fail(self, error: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        self.answer = None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    # -- CONNECT through a proxy ---------------------------------------------------------------

    def _tunnel_data(self, data: bytes) -> None:
        assert self.tunnel is not None
        self.tunnel_buffer += data
        if b"\r\n\r\n" in self.tunnel_buffer and not self.tunnel.done():
            self.tunnel.set_result(self.tunnel_buffer)
        elif len(self.tunnel_buffer) > self.limits.max_header_bytes and not self.tunnel.done():
            self.tunnel.set_exception(self._too_large_head())


def _keep_alive_timeout(value: bytes) -> float | None:
    """``timeout=N`` of a ``Keep-Alive`` header (RFC 2068 §19.7.1), in seconds."""
    for part in value.split(b","):
        name, _, number = part.strip().partition(b"=")
        if name.strip().lower() == b"timeout":
            try:
                return max(0.0, float(number.strip()))
            except ValueError:
                return None
    return None


__all__ = [
    "ConnectionClosed",
    "Headers",
    "Http11Connection",
    "Limits",
    "ProtocolViolation",
    "UnreadableResponse",
]
