"""A small keep-alive connection pool over the standard library's ``http.client``.

The sync lookup path needs a blocking client; urllib3/requests are not dependencies of this
project and aiohttp has no sync API, so this keeps at most ``max_idle`` idle connections per
origin and sends the request target exactly as given (no re-quoting, no path normalisation).
"""

from __future__ import annotations

import http.client
import ssl
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class HttpPool:
    """Blocking HTTP/1.1 requests reusing connections; one instance per lookup function."""

    def __init__(self, timeout: float, max_idle: int = 4) -> None:
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._ssl = ssl.create_default_context()

    def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname or "", parts.port or _default_port(parts.scheme))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn, reused = self._acquire(origin)
        try:
            try:
                response = self._send(conn, method, target, body, headers)
            except _STALE:
                conn.close()
                if not reused:
                    raise
                # the server closed an idle keep-alive connection: one fresh attempt
                conn = self._connect(origin)
                response = self._send(conn, method, target, body, headers)
        except BaseException:
            conn.close()
            raise
        if response.headers.get("Connection", "").lower() == "close":
            conn.close()
        else:
            self._release(origin, conn)
        return response

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> Response:
        conn.request(method, target, body=body, headers=headers)
        raw = conn.getresponse()
        data = raw.read()
        if raw.will_close:
            conn.close()
        return Response(raw.status, raw.headers, data)

    def _acquire(self, origin: tuple[str, str, int]) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(origin)
            if idle:
                return idle.pop(), True
        return self._connect(origin), False

    def _release(self, origin: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        if conn.sock is None:
            return
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection:
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._ssl)
        return http.client.HTTPConnection(host, port, timeout=self.timeout)


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
