"""The conformance servers (started once for the package, all at once, stopped by process
group), the clients under test, and lookup helpers.

``server`` is parametrized indirectly with names from :data:`servers.SERVERS`; ``client`` runs
every test with the project's client (``asyncio``) and aiohttp, the reference. Node's server
runs where ``node`` is on PATH: without it its cases skip, except with ``CI=true``, where they
fail.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.lookup.functions import AsyncLookupFunction
from tests.connectors.conformance.servers import IN_CI, NODE, PY, SERVERS, Server, free_port

CLIENTS = ("asyncio", "aiohttp")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
#: the pytest-timeout of every conformance test: a hung lookup fails its test, not the run
TEST_TIMEOUT = 30


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the machine's environment; the proxy tests set their own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(params=CLIENTS, ids=[f"{c}_client" for c in CLIENTS])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- certificates ------------------------------------------------------------------------------


class Certificates:
    """A test CA (trusted through ``SSL_CERT_FILE`` by :meth:`trust`) and the server certificates
    of the TLS cases, written to ``directory``."""

    CASES = ("good", "wrong-host", "expired", "self-signed", "other-ca")

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = directory / "root-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        # a second CA, trusted through SSL_CERT_FILE only (see test_tls_and_proxies)
        self.other_ca = trustme.CA()
        self.other_ca_file = directory / "other-root-ca.pem"
        self.other_ca.cert_pem.write_to_path(str(self.other_ca_file))
        now = datetime.datetime.now(datetime.UTC)
        leaves = {
            "good": self.ca.issue_cert("localhost", "127.0.0.1"),
            "wrong-host": self.ca.issue_cert("elsewhere.example"),
            "expired": self.ca.issue_cert(
                "localhost",
                "127.0.0.1",
                not_before=now - datetime.timedelta(days=30),
                not_after=now - datetime.timedelta(days=1),
            ),
            "other-ca": self.other_ca.issue_cert("localhost", "127.0.0.1"),
        }
        self.files: dict[str, tuple[Path, Path]] = {}
        for case, leaf in leaves.items():
            cert, key = directory / f"{case}.pem", directory / f"{case}.key"
            leaf.cert_chain_pems[0].write_to_path(str(cert))
            leaf.private_key_pem.write_to_path(str(key))
            self.files[case] = (cert, key)
        self.files["self-signed"] = _self_signed(directory)

    def trust(self, monkeypatch: pytest.MonkeyPatch, ca_file: Path | None = None) -> None:
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file or self.ca_file))
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for localhost signed by its own key (no CA at all)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "self-signed.pem", directory / "self-signed.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


# -- the fleet -----------------------------------------------------------------------------------


class Fleet:
    """Every server of the suite, started at once (their start-ups overlap: about 1 s in all):
    the matrix servers, aiohttp.web over TLS with one port per certificate case, and two
    proxy.py forward proxies (one asking for credentials)."""

    PROXY_USER = "user:secret"

    def __init__(self, directory: Path) -> None:
        self.certificates = Certificates(directory)
        self.servers = {
            name: Server(name, argv)
            for name, (argv, _) in SERVERS.items()
            if name != "node" or NODE
        }
        self.tls_ports = {case: free_port() for case in Certificates.CASES}
        others = [case for case in self.tls_ports if case != "good"]

        def tls_argv(_: int) -> list[str]:
            return [
                PY,
                "aiohttp_app.py",
                *(
                    str(part)
                    for case, (cert, key) in self.certificates.files.items()
                    for part in (cert, key, self.tls_ports[case])
                ),
            ]

        def tls_moved(server: Server) -> None:
            self.tls_ports.update(
                {"good": server.port, **dict(zip(others, server.more_ports, strict=True))}
            )

        self.tls = Server(
            "aiohttp-tls",
            tls_argv,
            port=self.tls_ports["good"],
            tls=True,
            more_ports=tuple(self.tls_ports[case] for case in others),
            moved=tls_moved,
        )
        cert, key = (str(f) for f in self.certificates.files["good"])
        self.tls_servers = {"aiohttp-tls": self.tls}
        for name, argv in {
            "uvicorn-h11-tls": lambda port: [
                *SERVERS["uvicorn-h11"][0](port),
                "--ssl-certfile",
                cert,
                "--ssl-keyfile",
                key,
            ],
            "stdlib-1.0-tls": lambda port: [*SERVERS["stdlib-1.0"][0](port), cert, key],
            "stdlib-1.1-tls": lambda port: [*SERVERS["stdlib-1.1"][0](port), cert, key],
            "node-tls": lambda port: [*SERVERS["node"][0](port), cert, key],
        }.items():
            if name != "node-tls" or NODE:
                self.tls_servers[name] = Server(name, argv, tls=True)
        self.proxy = Server("proxy.py", _proxy([]))
        self.auth_proxy = Server("proxy.py-auth", _proxy(["--basic-auth", self.PROXY_USER]))
        self.everything = [
            *self.servers.values(),
            *self.tls_servers.values(),
            self.proxy,
            self.auth_proxy,
        ]
        atexit.register(self.stop)  # should a run be cut short past the fixture's teardown
        for server in self.everything:
            server.start()
        self.ready: set[str] = set()

    def get(self, name: str) -> Server:
        """The server ``name``, listening (waited for at its first use)."""
        server = next((s for s in self.everything if s.name == name), None)
        if server is None and name.startswith("node") and not NODE:
            if IN_CI:
                pytest.fail("node is not on PATH (CI=true: Node's server must be tested)")
            pytest.skip("node is not on PATH")
        assert server is not None, f"no server {name!r}"
        if name not in self.ready:
            server.wait_ready()
            self.ready.add(name)
        return server

    def stop(self) -> None:
        for server in self.everything:
            server.stop(grace=1.0)


def _proxy(extra: list[str]) -> Any:
    return lambda port: [
        PY,
        "-m",
        "proxy",
        "--hostname",
        "127.0.0.1",
        "--port",
        str(port),
        "--num-workers",
        "1",
        "--num-acceptors",
        "1",
        "--log-level",
        "INFO",
        *extra,
    ]


@pytest.fixture(scope="package")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Started at this package's first test, stopped after its last (not kept for the rest of
    a full run)."""
    fleet = Fleet(tmp_path_factory.mktemp("conformance"))
    yield fleet
    fleet.stop()


@pytest.fixture
def server(request: pytest.FixtureRequest, fleet: Fleet) -> Server:
    """The server named by the test's ``server`` parameter, listening."""
    return fleet.get(request.param)


# -- lookups -------------------------------------------------------------------------------------


@asynccontextmanager
async def lookup_function(
    url: str, client: str, **options: Any
) -> AsyncIterator[AsyncLookupFunction]:
    """An opened point-lookup function of ``HttpConnector(url, client=client, **options)``."""
    fn = HttpConnector(url, client=client, **options).async_lookup_function()
    await fn.open()
    try:
        yield fn
    finally:
        await fn.close()


async def lookup(fn: AsyncLookupFunction, key: Any, within: float = 10.0) -> list[dict[str, Any]]:
    """One point lookup; a lookup that takes longer than ``within`` seconds fails the test."""
    return [dict(r) for r in await asyncio.wait_for(fn.async_lookup((key,)), within)]


def assert_own_row(rows: list[dict[str, Any]], key: Any, server: Server) -> dict[str, Any]:
    """``rows`` is one row: ``key``'s, from ``server``."""
    assert len(rows) == 1, f"{key!r}: expected its one row, got {rows!r}"[:500]
    row = rows[0]
    assert (row.get("id"), row.get("server")) == (key, server.name), f"{key!r} got {row!r}"[:500]
    return row
