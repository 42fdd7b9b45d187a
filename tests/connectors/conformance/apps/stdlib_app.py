"""The spec on Python's ``http.server``: ``python stdlib_app.py PORT HTTP/1.0|HTTP/1.1 [CERT KEY]``
(with a certificate and key: HTTPS).

A ``ThreadingHTTPServer`` with a ``BaseHTTPRequestHandler``. ``HTTP/1.0``: every answer ends
the connection, and an answer without a length is read to the close. ``HTTP/1.1``: kept alive,
idle connections closed after 1 s (the handler's socket timeout), 1xx answers written with
``send_response_only`` before the final one, chunked framing by hand.
"""

from __future__ import annotations

import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import spec


class Handler(BaseHTTPRequestHandler):
    timeout = 1.0  # an idle kept-alive connection is closed after this
    disable_nagle_algorithm = True  # head and body are two writes: no delayed-ACK stall

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.serve()

    def do_POST(self) -> None:
        self.serve()

    def do_HEAD(self) -> None:
        self.serve()

    def serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        a = spec.answer(self.command, self.path, headers, body)
        if a.delay:
            time.sleep(a.delay)
        http11 = self.protocol_version == "HTTP/1.1"
        if http11:
            for code, fields in a.interim:
                self.send_response_only(code, spec.REASONS[code])
                for name, value in fields:
                    self.send_header(name, value)
                self.end_headers()
        self.send_response(a.status, spec.REASONS.get(a.status))
        for name, value in a.headers:
            self.send_header(name, value)
        chunked = a.chunks is not None and http11
        if a.length is not None:
            self.send_header("Content-Length", str(a.length))
        elif chunked:
            self.send_header("Transfer-Encoding", "chunked")
            if a.trailers:
                self.send_header("Trailer", ", ".join(k for k, _ in a.trailers))
        elif (a.chunks is None and not a.no_length) and a.status not in (204, 304):
            self.send_header("Content-Length", str(len(a.body)))
        if a.close or a.no_length or (a.chunks is not None and not http11):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return
        for piece in a.chunks or [a.body]:
            if chunked:
                piece = b"%x\r\n%s\r\n" % (len(piece), piece)
            self.wfile.write(piece)
            self.wfile.flush()
        if chunked:
            trailers = "".join(f"{k}: {v}\r\n" for k, v in a.trailers).encode("latin-1")
            self.wfile.write(b"0\r\n" + trailers + b"\r\n")
        if a.ghost and self.protocol_version == "HTTP/1.1":
            time.sleep(0.05)
            self.wfile.write(a.ghost)


def main(port: int, version: str, cert: str | None = None, key: str | None = None) -> None:
    Handler.protocol_version = version
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if cert and key:  # HTTPS: every accepted connection wrapped (handshake in its thread)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:5])
