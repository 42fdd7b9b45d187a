"""A scripted TCP server for the HTTP/1.1 client's tests (fixtures in conftest.py)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from asyncio_lookup.connectors.http11 import Http11Client

R, W = asyncio.StreamReader, asyncio.StreamWriter
Handler = Callable[[R, W, "Scripted"], Awaitable[None]]


class Scripted:
    """A TCP server whose connections run ``handler``; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.request_lines: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """The request head (a request without a body), or None at the end of input."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        self.request_lines.append(head.split(b"\r\n", 1)[0])
        return head

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def answer(body: bytes = b'{"ok": true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def keep_alive(reader: R, writer: W, s: Scripted) -> None:
    while await s.read_request(reader) is not None:
        writer.write(answer())
        await writer.drain()


def client(max_connections: int = 10, timeout: float = 5.0, **kw: object) -> Http11Client:
    return Http11Client(max_connections, timeout, {"Accept": "application/json"}, **kw)  # type: ignore[arg-type]
