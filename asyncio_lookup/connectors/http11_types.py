"""The HTTP/1.1 client's plain types: its limits and its own connection errors.

Kept apart from the compiled modules (:mod:`asyncio_lookup._native`): mypyc compiles no
subclass of a built-in exception, and a compiled frozen dataclass does not pickle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What the client reads of one answer at most. The header defaults follow h11 and
    aiohttp (a header block of tens of KiB at most); the body's bounds a lookup's memory."""

    max_header_bytes: int = 64 * 1024
    max_headers: int = 128
    max_body_size: int = 64 * 1024 * 1024


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the answer was complete."""

    def __init__(self, message: str, *, before_answer: bool) -> None:
        super().__init__(message)
        self.before_answer = before_answer


class ProtocolViolation(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read, or not an answer to the
    request in flight."""
