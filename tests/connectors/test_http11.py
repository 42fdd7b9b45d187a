"""The asyncio HTTP/1.1 client against scripted servers on 127.0.0.1: keep-alive and the pool,
the kept-alive race, framing (chunked, read to close), timeouts, TLS and proxies."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator

import pytest
import trustme

from asyncio_lookup.connectors.http11 import ConnectionClosed, ProtocolViolation
from tests.connectors.scripted import Handler, R, Scripted, W, answer, client, keep_alive

Policy = asyncio.AbstractEventLoopPolicy

# the loop-policy fixture is the way to run one module on both loops (pytest-asyncio 1.x keeps
# it, deprecated, until its loop-factories hook can be scoped to one module)
pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy"')


@pytest.fixture
def event_loop_policy(both_loops: Policy) -> Policy:
    return both_loops


def silent_on(path: bytes) -> Handler:
    """A connection whose first request never gets an answer when it asks for ``path``, and
    is kept alive otherwise."""

    async def handler(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        if head is not None and path in head:
            await asyncio.sleep(5)
            return
        writer.write(answer())
        await keep_alive(reader, writer, s)

    return handler


async def test_requests_reuse_one_kept_alive_connection(scripted) -> None:
    server = await scripted(keep_alive)
    c = client()
    try:
        for i in range(5):
            status, headers, body = await c.fetch("GET", f"http://127.0.0.1:{server.port}/c/{i}")
            assert (status, body, headers["content-length"]) == (200, b'{"ok": true}', "12")
    finally:
        await c.close()
    assert server.connections == 1
    assert server.request_lines == [b"GET /c/%d HTTP/1.1" % i for i in range(5)]


async def test_the_pool_never_opens_more_than_max_connections(scripted) -> None:
    async def slow(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            await asyncio.sleep(0.01)
            writer.write(answer())

    server = await scripted(slow)
    c = client(max_connections=3)
    try:
        url = f"http://127.0.0.1:{server.port}/x"
        answers = await asyncio.gather(*(c.fetch("GET", url) for _ in range(30)))
    finally:
        await c.close()
    assert [a[0] for a in answers] == [200] * 30
    assert server.connections == 3 and server.most_open == 3


async def test_a_kept_alive_connection_closed_by_the_server_is_retried_once(scripted) -> None:
    async def one_per_connection(reader: R, writer: W, s: Scripted) -> None:
        # answers one request, then reads the next and closes without answering: the race
        # of a server's keep-alive timeout with a request on its way
        await s.read_request(reader)
        writer.write(answer())
        await writer.drain()
        await s.read_request(reader)

    server = await scripted(one_per_connection)
    c = client(max_connections=1)
    try:
        url = f"http://127.0.0.1:{server.port}/x"
        for _ in range(3):
            assert (await c.fetch("GET", url))[0] == 200
    finally:
        await c.close()
    assert server.connections == 3


async def test_the_resend_goes_out_on_a_new_connection_not_another_idle_one(scripted) -> None:
    """The resend after a kept-alive connection closed took another idle connection, which the
    server was closing as well (the same keep-alive timeout): the request failed."""

    async def one_per_connection(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(answer())
        await writer.drain()
        await s.read_request(reader)  # the next request on it: closed unanswered

    server = await scripted(one_per_connection)
    c = client(max_connections=2)
    try:
        url = f"http://127.0.0.1:{server.port}/x"
        first = await asyncio.gather(c.fetch("GET", url), c.fetch("GET", url))
        assert [a[0] for a in first] == [200, 200] and server.connections == 2
        assert (await c.fetch("GET", url))[0] == 200
    finally:
        await c.close()
    assert server.connections == 3  # the two idle ones, then one new: not the other idle one


def _duplicating_server() -> tuple[socket.socket, list[int]]:
    """A server in a thread of its own (it must run while the client's loop is busy) that
    answers every request with its path, and the first one twice, 20 ms apart."""
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                connections.append(1)
                threading.Thread(target=answer_all, args=(conn,), daemon=True).start()

    def answer_all(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(4096)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                path = head.split(b" ")[1]
                conn.sendall(answer(path))
                if path == b"/first" and len(connections) == 1:
                    time.sleep(0.02)
                    conn.sendall(answer(path))

    threading.Thread(target=serve, daemon=True).start()
    return listener, connections


async def test_an_answer_that_came_while_idle_is_never_the_next_requests() -> None:
    """The loop had not read the duplicate when the next request took the connection, so it
    read it as that request's answer: GET /next returned /first's body."""
    listener, connections = _duplicating_server()
    port = listener.getsockname()[1]
    c = client(max_connections=1)
    try:
        assert (await c.fetch("GET", f"http://127.0.0.1:{port}/first"))[2] == b"/first"
        time.sleep(0.1)  # the task's own work: the loop reads nothing meanwhile
        assert (await c.fetch("GET", f"http://127.0.0.1:{port}/next"))[2] == b"/next"
    finally:
        await c.close()
        listener.close()
    assert len(connections) == 2  # the first one was not trusted again


async def test_a_connection_kept_alive_on_a_descriptor_past_1023_is_reused(scripted) -> None:
    """select() refuses descriptors from 1024 on: every idle connection was taken for one
    holding unread bytes and closed, and each request paid a new connection."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    server = await scripted(keep_alive)
    c = client()
    try:
        for i in range(5):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/c/{i}")
            await asyncio.sleep(0.005)  # idle long enough to be checked for unread bytes
    finally:
        await c.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server.connections == 1


def test_a_client_used_on_a_second_loop_starts_afresh() -> None:
    """asyncio.run twice with one client: the first loop's connections were aborted on the
    closed loop (RuntimeError: Event loop is closed)."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    c = client()

    async def fetch() -> int:
        return (await c.fetch("GET", f"http://127.0.0.1:{server.server_port}/c/1"))[0]

    try:
        assert asyncio.run(fetch()) == 200
        assert asyncio.run(fetch()) == 200
    finally:
        server.shutdown()
        server.server_close()


async def test_a_new_connection_closed_before_the_answer_resends_a_get_once(scripted) -> None:
    async def hang_up_once(reader: R, writer: W, s: Scripted) -> None:
        # the first connection closes unanswered (hypercorn past its keep-alive timeout on a
        # request it has not read yet), the second answers
        await s.read_request(reader)
        if s.connections > 1:
            writer.write(answer())
            await writer.drain()

    server = await scripted(hang_up_once)
    c = client()
    try:
        assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}/x"))[0] == 200
    finally:
        await c.close()
    assert server.connections == 2


async def test_a_new_connection_closed_before_the_answer_is_an_error(scripted) -> None:
    async def hang_up(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)

    server = await scripted(hang_up)
    c = client()
    try:
        with pytest.raises(ConnectionClosed):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/x")
        assert server.connections == 2, "a GET is sent once more, not twice"
        with pytest.raises(ConnectionClosed):
            await c.fetch("POST", f"http://127.0.0.1:{server.port}/x", b"{}")
    finally:
        await c.close()
    assert server.connections == 3, "a POST on a new connection is not resent"


async def test_framing_chunked_read_to_close_and_connection_close(scripted) -> None:
    async def framed(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        if b"/chunked" in head:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for part in (b'{"a":', b" 1", b"}"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await s.read_request(reader)  # kept alive: the next request may come here
        elif b"/to-close" in head:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        else:
            writer.write(answer(b"closing", b"Connection: close\r\n"))

    server = await scripted(framed)
    c = client()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert (await c.fetch("GET", base + "/chunked"))[2] == b'{"a": 1}'
        assert (await c.fetch("GET", base + "/to-close"))[2] == b"until the end"
        assert (await c.fetch("GET", base + "/close"))[2] == b"closing"
        assert (await c.fetch("GET", base + "/close"))[2] == b"closing"
    finally:
        await c.close()
    assert server.connections == 4  # the chunked one was reused by nobody: the rest closed


async def test_post_sends_the_body_with_its_length(scripted) -> None:
    seen: list[bytes] = []

    async def echo(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        seen.append(head)
        body = await reader.readexactly(length)
        writer.write(answer(body))
        await writer.drain()

    server = await scripted(echo)
    c = client()
    try:
        status, _, body = await c.fetch("POST", f"http://127.0.0.1:{server.port}/b", b'{"k": [1]}')
    finally:
        await c.close()
    assert (status, body) == (200, b'{"k": [1]}')
    assert b"Content-Type: application/json" in seen[0] and b"Host: 127.0.0.1:" in seen[0]


async def test_a_timeout_aborts_the_request_and_frees_its_connection(scripted) -> None:
    server = await scripted(silent_on(b"/slow"))
    c = client(max_connections=1, timeout=0.2)
    try:
        base = f"http://127.0.0.1:{server.port}"
        with pytest.raises(TimeoutError):
            await c.fetch("GET", base + "/slow")
        assert (await c.fetch("GET", base + "/fast"))[0] == 200, "the slot was freed"
    finally:
        await c.close()


async def test_a_cancelled_request_frees_its_connection(scripted) -> None:
    server = await scripted(silent_on(b"/never"))
    c = client(max_connections=1)
    try:
        base = f"http://127.0.0.1:{server.port}"
        task = asyncio.ensure_future(c.fetch("GET", base + "/never"))
        waiting = asyncio.ensure_future(c.fetch("GET", base + "/ok"))  # waits for the slot
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await asyncio.wait_for(waiting, 2))[0] == 200
    finally:
        await c.close()


async def test_an_unreadable_answer_is_a_protocol_violation(scripted) -> None:
    async def garbage(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)

    server = await scripted(garbage)
    c = client()
    try:
        with pytest.raises(ProtocolViolation):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/x")
    finally:
        await c.close()


# -- TLS and proxies ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_server(authority: trustme.CA) -> AsyncIterator[Scripted]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    server = await Scripted(keep_alive).start(context)
    yield server
    await server.close()


def trusting(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return context


async def test_tls_verifies_the_server(tls_server: Scripted, authority: trustme.CA) -> None:
    c = client(ssl_context=trusting(authority))
    try:
        for _ in range(3):
            assert (await c.fetch("GET", f"https://localhost:{tls_server.port}/x"))[0] == 200
    finally:
        await c.close()
    assert tls_server.connections == 1
    untrusting = client()
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            await untrusting.fetch("GET", f"https://localhost:{tls_server.port}/x")
    finally:
        await untrusting.close()


async def test_tls_trusts_ssl_cert_file(
    tls_server: Scripted, authority: trustme.CA, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    c = client()  # the default context reads the environment
    try:
        assert (await c.fetch("GET", f"https://localhost:{tls_server.port}/x"))[0] == 200
    finally:
        await c.close()


class Proxy:
    """A forward proxy: absolute-form requests answered with the line it saw; CONNECT tunnels."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.heads: list[bytes] = []

    async def __call__(self, reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        self.heads.append(head)
        line = head.split(b"\r\n", 1)[0]
        self.lines.append(line)
        if not line.startswith(b"CONNECT "):
            writer.write(answer(line))
            await writer.drain()
            return
        port = line.split()[1].rsplit(b":", 1)[1]  # "localhost" is 127.0.0.1 here
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_proxies_from_the_environment(
    scripted, tls_server: Scripted, authority: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = Proxy()
    proxy_server = await scripted(proxy)
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{proxy_server.port}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy_server.port}")
    monkeypatch.setenv("NO_PROXY", "direct.example")
    c = client(ssl_context=trusting(authority))
    try:
        status, _, body = await c.fetch("GET", "http://service.example:8080/c/1?x=2")
        assert (status, body) == (200, b"GET http://service.example:8080/c/1?x=2 HTTP/1.1")
        assert b"Proxy-Authorization: Basic dXNlcjpwQHNz\r\n" in proxy.heads[0]
        assert (await c.fetch("GET", f"https://localhost:{tls_server.port}/y"))[0] == 200
        assert proxy.lines[1] == b"CONNECT localhost:%d HTTP/1.1" % tls_server.port
        assert tls_server.request_lines == [b"GET /y HTTP/1.1"], "origin-form inside the tunnel"
        with pytest.raises(OSError):  # NO_PROXY: straight to a host that does not resolve
            await c.fetch("GET", "http://direct.example/c/1")
        assert len(proxy.lines) == 2
    finally:
        await c.close()
