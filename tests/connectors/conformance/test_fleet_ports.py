"""The conformance servers' own start: a port taken between picking and binding it."""

from __future__ import annotations

import socket

from tests.connectors.conformance.servers import SERVERS, Server


def test_a_port_taken_before_the_server_binds_it_is_picked_again() -> None:
    """A free port may become a client's ephemeral port before the server binds it (CI saw
    one fail 152 tests): the server is started again on another."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: as a client's port is
        port = taken.getsockname()[1]
        moved: list[int] = []
        server = Server(
            "stdlib-1.1", SERVERS["stdlib-1.1"][0], port=port, moved=lambda s: moved.append(s.port)
        )
        try:
            server.start().wait_ready()
            assert server.port != port and moved == [server.port]
            with socket.create_connection(("127.0.0.1", server.port), timeout=5):
                pass
        finally:
            server.stop()
