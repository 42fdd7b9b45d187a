"""The benchmark harness's latency server speaks correct HTTP/1.1 over raw sockets: pipelined
requests answered in order whatever their delays, requests split across reads, bodies by
Content-Length, ``Connection: close``, malformed input."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httptools
import pytest

from benchmarks.servers import LatencyServer, Profile


class Responses:
    """Collects the responses parsed from a byte stream."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, dict[bytes, bytes], bytes]] = []
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self.headers, self.body))
        self.headers, self.body = {}, b""


@pytest.fixture(scope="module")
def server() -> Iterator[LatencyServer]:
    with LatencyServer(n_customers=1_000) as running:
        yield running


@pytest.fixture(autouse=True)
def plain(server: LatencyServer) -> None:
    server.configure(Profile())


def exchange(
    server: LatencyServer, chunks: list[bytes], expect: int
) -> tuple[list[tuple[int, dict[bytes, bytes], bytes]], bool]:
    """Send ``chunks`` (one write each), read ``expect`` responses; whether the server closed."""
    responses = Responses()
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for chunk in chunks:
            sock.sendall(chunk)
        closed = False
        while len(responses.done) < expect:
            data = sock.recv(65536)
            if not data:
                closed = True
                break
            responses.parser.feed_data(data)
        if not closed:
            sock.settimeout(0.2)
            try:
                closed = sock.recv(1) == b""
            except TimeoutError:
                closed = False
    return responses.done, closed


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: test", *headers, "", ""]
    return "\r\n".join(lines).encode()


def body_of(response: tuple[int, dict[bytes, bytes], bytes]) -> Any:
    return json.loads(response[2])


def test_pipelined_requests_are_answered_in_order_despite_tail_latency(
    server: LatencyServer,
) -> None:
    server.configure(Profile(latency=0.001, tail_latency=0.05, tail_fraction=0.5, seed=3))
    ids = list(range(40))
    done, closed = exchange(server, [b"".join(get(f"/customers/{i}") for i in ids)], len(ids))
    assert [body_of(r)["id"] for r in done] == ids
    assert not closed
    assert server.stats()["point_calls"] == len(ids)
    assert server.stats()["max_in_flight"] > 1  # the requests overlapped


def test_requests_split_across_reads_and_joined_in_one(server: LatencyServer) -> None:
    stream = get("/customers/7") + get("/customers/8") + get("/customers/9")
    chunks = [stream[i : i + 5] for i in range(0, len(stream), 5)]
    done, _ = exchange(server, chunks, 3)
    assert [body_of(r)["id"] for r in done] == [7, 8, 9]


def test_post_body_by_content_length_split_across_reads(server: LatencyServer) -> None:
    body = json.dumps({"keys": [{"id": 1}, {"id": 2}, {"id": 5_000}]}).encode()
    head = (
        b"POST /customers:batchGet HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    done, _ = exchange(server, [head, body[:10], body[10:] + get("/customers/3")], 2)
    assert [row["id"] for row in body_of(done[0])] == [1, 2]
    assert body_of(done[1])["id"] == 3
    stats = server.stats()
    assert (stats["batch_keys"], stats["found"], stats["misses"]) == (3, 3, 1)


def test_connection_close_is_honoured(server: LatencyServer) -> None:
    done, closed = exchange(
        server, [get("/customers/1", "Connection: close") + get("/customers/2")], 1
    )
    assert done[0][1][b"connection"] == b"close"
    assert closed
    assert server.stats()["point_calls"] == 1  # nothing read after the close


def test_malformed_request_answers_400_and_closes(server: LatencyServer) -> None:
    done, closed = exchange(server, [get("/customers/1") + b"NONSENSE\r\n\r\n"], 2)
    assert [status for status, _, _ in done] == [200, 400]
    assert closed


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (get("/nowhere"), 404),
        (get("/customers/1/2"), 404),
        (get("/customers/5000"), 404),
        (get("/customers/%35"), 200),
    ],
)
def test_paths(server: LatencyServer, request_bytes: bytes, status: int) -> None:
    done, _ = exchange(server, [request_bytes + get("/customers/4")], 2)
    assert [s for s, _, _ in done] == [status, 200]
    assert body_of(done[1])["id"] == 4


def test_head_is_not_served_and_has_no_body(server: LatencyServer) -> None:
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"HEAD /customers/1 HTTP/1.1\r\nHost: test\r\n\r\n")
        head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 404 ") and head.endswith(b"\r\n\r\n")
        sock.sendall(get("/customers/2"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_scan_pages_follow_next(server: LatencyServer) -> None:
    seen: list[int] = []
    path: str | None = "/customers?offset=0&limit=300"
    while path is not None:
        (page,), _ = exchange(server, [get(path)], 1)
        rows = body_of(page)
        seen += [row["id"] for row in rows["rows"]]
        path = rows["next"] and rows["next"].removeprefix(server.base_url)
    assert seen == list(range(1_000))
    assert server.stats()["scan_calls"] == 4


def test_throttle_and_errors(server: LatencyServer) -> None:
    server.configure(Profile(throttle_rate=1.0, retry_after=2))
    (throttled,), _ = exchange(server, [get("/customers/1")], 1)
    assert (throttled[0], throttled[1][b"retry-after"]) == (429, b"2")
    server.configure(Profile(error_rate=1.0))
    (failed,), _ = exchange(server, [get("/customers?ids=1,2")], 1)
    assert failed[0] == 503
    assert server.stats() == {
        "requests": 1,
        "batch_calls": 1,
        "batch_keys": 2,
        "errors": 1,
        "max_in_flight": 1,
    }


def test_late_customers_miss_first(server: LatencyServer) -> None:
    server.configure(Profile(late_fraction=1.0, late_misses=2))
    done, _ = exchange(server, [get("/customers/9")] * 3, 3)
    assert [status for status, _, _ in done] == [404, 404, 200]
    assert server.stats()["late_misses"] == 2
