"""How the PostgreSQL connector reaches its server: DSNs (a libpq keyword/value DSN rewritten as
the URL asyncpg takes), which failures are the connection's (a retry may fix them) and
identifiers quoted so they are never read as SQL."""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

import asyncpg

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.validation import did_you_mean

_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.exceptions.OperatorInterventionError,  # 57: admin shutdown, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InternalClientError,
    ConnectionError,
    OSError,  # TimeoutError included
)
_PERMANENT_SQLSTATES = ("28000", "28P01", "3D000")  # bad user / password / database
#: A statement the server ended for a reason of its own that a new try may not meet: a hot
#: standby's conflict with recovery (40001, "canceling statement due to conflict with
#: recovery"), a deadlock (40P01).
_RETRYABLE_STATEMENT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
)


def is_retryable_statement_error(error: BaseException) -> bool:
    """True for a statement the server ended that a retry may run (the connection is fine)."""
    return isinstance(error, _RETRYABLE_STATEMENT_ERRORS)


def is_connection_error(error: BaseException) -> bool:
    """True for a failure of the connection rather than of the statement: a retry may fix it."""
    if getattr(error, "sqlstate", None) in _PERMANENT_SQLSTATES:
        return False
    if isinstance(error, _CONNECTION_ERRORS):
        return True
    # asyncpg says "connection is closed" / "pool is closing" with a bare InterfaceError
    return isinstance(error, asyncpg.InterfaceError) and "clos" in str(error)


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier in double quotes (``"`` doubled), never interpreted as SQL."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ConfigurationError("identifier", name, "a non-empty name without NUL characters")
    return '"' + name.replace('"', '""') + '"'


_LIBPQ_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)")


def parse_libpq_dsn(dsn: str) -> dict[str, str]:
    """The ``key=value`` pairs of a libpq keyword/value DSN (values quoted with ``'``, with
    ``\\`` escapes, or bare)."""
    params: dict[str, str] = {}
    position = 0
    dsn = dsn.strip()
    while position < len(dsn):
        match = _LIBPQ_PAIR.match(dsn, position)
        if match is None or match.end() == position:
            raise ConfigurationError("dsn", "<not shown>", "a libpq key=value DSN or a URL")
        key, value = match.group(1), match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[key] = value
        position = match.end()
        while position < len(dsn) and dsn[position].isspace():
            position += 1
    return params


#: libpq's connection keywords (PostgreSQL 17's "Parameter Key Words").
LIBPQ_KEYWORDS = frozenset(
    [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslnegotiation",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ]
)

#: Other libraries' names for libpq's keywords.
_OTHER_SPELLINGS = {
    "database": "dbname",
    "db": "dbname",
    "username": "user",
    "pass": "password",
    "passwd": "password",
    "hostname": "host",
    "server": "host",
    "ssl": "sslmode",
}

#: A URL's scheme (``jdbc:postgresql`` too), at the start of the DSN: a libpq keyword DSN may
#: hold ``://`` in a value, and what comes before it there may be a password.
_URL_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.:-]*)://")


def asyncpg_dsn(dsn: str) -> str:
    """asyncpg takes URLs only: a libpq keyword/value DSN is rewritten as a URL; a URL of
    another scheme than ``postgresql://`` / ``postgres://`` (a JDBC one) is refused."""
    url = _URL_SCHEME.match(dsn)
    if url is not None:
        scheme = url.group(1)
        if scheme.lower() not in ("postgresql", "postgres"):
            raise ConfigurationError(
                "dsn",
                f"{scheme}://...",
                "a libpq key=value DSN or a postgresql:// (postgres://) URL",
                "not a JDBC URL: drop the 'jdbc:' prefix"
                if scheme.lower().startswith("jdbc:")
                else None,
            )
        return dsn
    params = parse_libpq_dsn(dsn)
    for key in params:
        if key not in LIBPQ_KEYWORDS:  # libpq refuses it; asyncpg would pass it on unread
            meant = _OTHER_SPELLINGS.get(key.lower()) or did_you_mean(key, LIBPQ_KEYWORDS)
            raise ConfigurationError(
                "dsn",
                f"{key}=...",
                "libpq's connection keywords (dbname, user, password, host, port, sslmode...)",
                f"{key!r} is no libpq keyword"
                + (f" (did you mean {meant!r}?)" if meant else "")
                + ": it would be passed on unread ('database=test' connected to the user's "
                "database)",
            )
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    userinfo = user + (":" + quote(password, safe="") if password is not None else "")
    host = params.pop("host", "")
    port = params.pop("port", None)
    database = quote(params.pop("dbname", ""), safe="")
    netloc = userinfo + "@" if userinfo else ""
    if any(h.strip().startswith("/") for h in host.split(",")):  # a Unix socket's directory:
        # in the URL's authority it would end the host and start the database's name
        params = {"host": host, **({"port": port} if port else {}), **params}
    else:
        netloc += f"[{host}]" if ":" in host else host
        netloc += f":{port}" if port else ""
    query = urlencode(params)
    return f"postgresql://{netloc}/{database}" + (f"?{query}" if query else "")
