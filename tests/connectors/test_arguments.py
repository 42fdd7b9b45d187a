"""Every connector argument is range-checked at construction, naming the option and the value."""

from __future__ import annotations

from typing import Any

import pytest

from asyncio_lookup.connectors import (
    HttpConnector,
    InMemoryConnector,
    PostgresConnector,
    RedisConnector,
)
from asyncio_lookup.errors import ConfigurationError

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
HTTP = "http://127.0.0.1:9/c/{id}"


@pytest.mark.parametrize(
    ("build", "option", "value"),
    [
        (lambda v: RedisConnector(REDIS, "k:{id}", socket_timeout=v), "socket_timeout", -5),
        (lambda v: RedisConnector(REDIS, "k:{id}", socket_timeout=v), "socket_timeout", 0),
        (lambda v: RedisConnector(REDIS, "k:{id}", pool_timeout=v), "pool_timeout", -1),
        (lambda v: RedisConnector(REDIS, "k:{id}", max_connections=v), "max_connections", 0),
        (lambda v: RedisConnector(REDIS, "k:{id}", max_connections=v), "max_connections", 10**9),
        (lambda v: RedisConnector(REDIS, "k:{id}", max_connections=v), "max_connections", True),
        (lambda v: RedisConnector(REDIS, "k:{id}", scan_count=v), "scan_count", 0),
        (lambda v: RedisConnector(REDIS, "k:{id}", client_name=v), "client_name", ""),
        (lambda v: PostgresConnector(PG, "t", command_timeout=v), "command_timeout", -1),
        (lambda v: PostgresConnector(PG, "t", command_timeout=v), "command_timeout", 0),
        (lambda v: PostgresConnector(PG, "t", command_timeout=v), "command_timeout", "30"),
        (lambda v: PostgresConnector(PG, "t", connect_timeout=v), "connect_timeout", 0),
        (lambda v: PostgresConnector(PG, "t", connect_timeout=v), "connect_timeout", None),
        (
            lambda v: PostgresConnector(PG, "t", connect_timeout=v),
            "connect_timeout",
            float("inf"),
        ),
        (lambda v: PostgresConnector(PG, "t", pool_size=v), "pool_size", 0),
        (lambda v: PostgresConnector(PG, "t", pool_size=v), "pool_size", 100_000),
        (lambda v: PostgresConnector(PG, "t", pool_size=v), "pool_size", 2.5),
        (lambda v: PostgresConnector(PG, "t", scan_batch_size=v), "scan_batch_size", -3),
        (lambda v: PostgresConnector(PG, "t", application_name=v), "application_name", None),
        (lambda v: HttpConnector(HTTP, timeout=v), "timeout", 0),
        (lambda v: HttpConnector(HTTP, timeout=v), "timeout", float("nan")),
        (lambda v: HttpConnector(HTTP, max_connections=v), "max_connections", 0),
        (lambda v: HttpConnector(HTTP, max_connections=v), "max_connections", 10**6),
        (lambda v: HttpConnector(HTTP, batch_size=v), "batch_size", 0),
        (lambda v: HttpConnector(HTTP, batch_field=v), "batch_field", ""),
        (lambda v: HttpConnector(HTTP, miss_statuses=v), "miss_statuses", (404, 99)),
        (lambda v: HttpConnector(HTTP, transient_statuses=v), "transient_statuses", "503"),
        (lambda v: InMemoryConnector([], ["id"], latency=v), "latency", -0.1),
        # 100 years or more: a socket's timeout cannot hold it (OverflowError at the first call)
        (lambda v: RedisConnector(REDIS, "k:{id}", socket_timeout=v), "socket_timeout", 1e10),
        (lambda v: PostgresConnector(PG, "t", command_timeout=v), "command_timeout", 3.2e9),
        (lambda v: HttpConnector(HTTP, timeout=v), "timeout", 100 * 365 * 86400),
    ],
)
def test_out_of_range_arguments_are_rejected_at_construction(
    build: Any, option: str, value: Any
) -> None:
    with pytest.raises(ConfigurationError) as info:
        build(value)
    assert info.value.option == option
    assert info.value.value == value or (value != value and info.value.value != info.value.value)
    assert info.value.allowed


def test_limits_that_make_sense_are_accepted() -> None:
    RedisConnector(REDIS, "k:{id}", socket_timeout=None, pool_timeout=None, max_connections=1)
    PostgresConnector(PG, "t", command_timeout=None, connect_timeout=0.5, pool_size=1)
    HttpConnector(HTTP, timeout=0.05, max_connections=1, miss_statuses=(404, 410))
    InMemoryConnector([], ["id"], latency=0)


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        ("jdbc:postgresql://db:5432/x", "not a JDBC URL: drop the 'jdbc:' prefix"),
        ("mysql://u:pw@db/x", None),
    ],
)
def test_a_dsn_of_another_scheme_is_refused_without_its_credentials(
    dsn: str, reason: str | None
) -> None:
    with pytest.raises(ConfigurationError) as info:
        PostgresConnector(dsn, "t")
    assert info.value.option == "dsn" and info.value.reason == reason
    assert info.value.value == dsn.partition("://")[0] + "://..."  # no host, user or password
    assert "postgresql://" in info.value.allowed
    PostgresConnector("POSTGRES://db/x", "t")  # schemes are case-insensitive
    # a keyword DSN with "://" in a value is no URL, and its password is never shown
    libpq = "host=db dbname=x user=u password=hunter2 application_name=svc://x"
    assert PostgresConnector(libpq, "t").url.startswith("postgresql://u:hunter2@db/x?")


def test_a_url_with_a_control_character_is_refused_at_construction() -> None:
    for option, build in [
        ("url", lambda u: HttpConnector(u)),
        ("batch_url", lambda u: HttpConnector(HTTP, batch_url=u)),
        ("scan_url", lambda u: HttpConnector(HTTP, scan_url=u)),
    ]:
        for url, bad in [
            ("http://h/c\r\nX-Evil: 1/{id}", "\r"),
            ("http://h/c/{id}?a=\x00", "\x00"),
            ("http://h/c/\t{id}", "\t"),
        ]:
            if option != "url":
                url = url.replace("{id}", "x")
            with pytest.raises(ConfigurationError) as info:
                build(url)
            assert info.value.option == option
            assert info.value.reason == f"{bad!r} at offset {url.index(bad)}"


def test_a_libpq_dsn_is_rewritten_without_psycopg() -> None:
    from asyncio_lookup.connectors.postgres_connection import asyncpg_dsn, parse_libpq_dsn

    dsn = r"host=db port=5433 dbname=x user=bob password='p w\'x' sslmode=disable"
    assert parse_libpq_dsn(dsn)["password"] == "p w'x"
    assert asyncpg_dsn(dsn) == "postgresql://bob:p%20w%27x@db:5433/x?sslmode=disable"
    with pytest.raises(ConfigurationError, match="'dsn'"):
        PostgresConnector("host=db port", "t")
    # a socket directory in the URL's path was read as the database's name
    assert asyncpg_dsn("host=/run/pg port=5433 dbname=x user=bob sslmode=disable") == (
        "postgresql://bob@/x?host=%2Frun%2Fpg&port=5433&sslmode=disable"
    )
    assert asyncpg_dsn("host=db,/run/pg dbname=x") == "postgresql:///x?host=db%2C%2Frun%2Fpg"


@pytest.mark.parametrize(
    ("dsn", "meant"),
    [
        ("host=127.0.0.1 database=test user=postgres", "dbname"),  # asyncpg's, SQLAlchemy's
        ("host=127.0.0.1 dbname=test sslmod=require", "sslmode"),
        ("host=127.0.0.1 dbname=test username=bob", "user"),
    ],
)
def test_a_libpq_dsn_keyword_libpq_does_not_know_is_refused(dsn: str, meant: str) -> None:
    """It was passed on in the URL's query, unread: 'database=test' joined the tables of the
    user's database, silently."""
    with pytest.raises(ConfigurationError, match=f"did you mean '{meant}'") as error:
        PostgresConnector(dsn, "t")
    assert error.value.option == "dsn"


def test_an_empty_column_list_is_refused() -> None:
    # SELECT  FROM ...: every batch failed with a syntax error
    with pytest.raises(ConfigurationError, match="'columns'"):
        PostgresConnector("postgresql://u@h/db", "t", columns=[])


def test_http_credentials_are_checked_and_given_one_way() -> None:
    # a text would be joined character by character: "a:l:i:c:e:::s:e:c:r:e:t" sent as basic auth
    for bad in ("alice:secret", ("alice",), ("alice", 5)):
        with pytest.raises(ConfigurationError, match="a \\(user, password\\) pair") as info:
            HttpConnector(HTTP, basic_auth=bad)  # type: ignore[arg-type]
        assert "secret" not in str(info.value)
    with pytest.raises(ConfigurationError, match="'bearer_token'"):
        HttpConnector(HTTP, bearer_token="")
    for kwargs in (
        {"basic_auth": ("a", "b"), "bearer_token": "t"},
        {"url": "http://u:pw@127.0.0.1:9/c/{id}", "basic_auth": ("a", "b")},
        {"url": "http://u:pw@127.0.0.1:9/c/{id}", "bearer_token": "t"},
    ):
        with pytest.raises(ConfigurationError, match="one way to authenticate"):
            HttpConnector(**{"url": HTTP, **kwargs})  # type: ignore[arg-type]
    assert HttpConnector(HTTP, basic_auth=["a", "b"]).basic_auth == ("a", "b")


def test_arguments_of_the_wrong_type_are_configuration_errors() -> None:
    """They raised bare TypeErrors that named neither the option nor what is allowed."""
    for build, option in [
        (lambda: HttpConnector(5), "url"),  # type: ignore[arg-type]
        (lambda: HttpConnector(HTTP, key_columns=5), "key_columns"),  # type: ignore[arg-type]
        (lambda: HttpConnector(HTTP, miss_statuses=404), "miss_statuses"),  # type: ignore[arg-type]
        (lambda: RedisConnector(REDIS, 7), "key_template"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(ConfigurationError) as info:
            build()
        assert info.value.option == option
