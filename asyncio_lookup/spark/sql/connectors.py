"""DDL ``WITH`` options -> a connector: Flink's ``jdbc`` names, ``postgres``, ``http``, ``redis``,
and any connector registered with :func:`~asyncio_lookup.connectors.register_connector`.

A registered factory's options are its keyword parameters, spelled with ``-`` or ``_``; values
are converted to the type of the parameter's default (durations like ``'10s'`` to seconds). A
factory with a ``key_columns`` parameter is built per join key (as PostgreSQL), and one with a
``columns`` parameter receives the DDL's column names. Secret values are never shown.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from asyncio_lookup.connectors import HttpConnector, PostgresConnector, RedisConnector
from asyncio_lookup.connectors.postgres_connection import quote_ident
from asyncio_lookup.connectors.registry import connector_factory, connector_names
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup import LookupOptions
from asyncio_lookup.lookup.flink_options import ignored
from asyncio_lookup.masking import mask_text
from asyncio_lookup.spark.sql.parse import SqlError, is_secret
from asyncio_lookup.validation import did_you_mean, parse_bool, parse_duration, parse_int

Convert = Callable[[str, str], Any]
BUILT_IN = ("jdbc", "postgres", "http", "redis")


def shown(option: str, value: str) -> str:
    """A value as it may appear in a message: a secret option's value hidden, URL passwords
    and secret-looking query parameters masked (:func:`~asyncio_lookup.masking.mask_text`)."""
    return "***" if is_secret(option) else mask_text(value)


def _str(option: str, value: str) -> str:
    return value


def _int(option: str, value: str) -> int:
    return parse_int(
        option, value, minimum=-(2**63), allowed="a whole number", error=SqlError
    )  # the connector checks its own range


def _seconds(option: str, value: str) -> float:
    try:
        return parse_duration(option, value)
    except ConfigurationError as error:
        raise SqlError(option, value, error.allowed, reason=error.reason) from None


def _bool(option: str, value: str) -> bool:
    return parse_bool(option, value, error=SqlError)


def _ints(option: str, value: str) -> tuple[int, ...]:
    return tuple(_int(option, part) for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class ConnectorPlan:
    """How to build a DDL table's connector. ``fixed_key``: the key the connector always looks
    up by (URL / key template placeholders); ``flexible``: built per join key."""

    name: str
    factory: Callable[..., Any]
    kwargs: Mapping[str, Any]
    fixed_key: tuple[str, ...] | None = None
    flexible: bool = False
    key_param: str | None = None
    #: options only other Flink operators read (``scan.*``, ``sink.*``...), accepted and unused
    ignored: tuple[str, ...] = ()

    def build(self, key: tuple[str, ...]) -> Any:
        kwargs = dict(self.kwargs)
        if self.key_param is not None and key:
            kwargs[self.key_param] = key
        return self.factory(**kwargs)

    def __repr__(self) -> str:
        return f"ConnectorPlan(name={self.name!r}, fixed_key={self.fixed_key!r})"


def _valid(connector: str, names: list[str]) -> str:
    try:
        LookupOptions.from_dict({"lookup.?": ""})
        lookup = "lookup.* options"
    except ConfigurationError as error:
        lookup = "lookup.* options (" + error.allowed.removeprefix("one of ") + ")"
    return (
        f"'connector' = '{connector}' takes "
        + ", ".join(repr(n) for n in names)
        + f"; and {lookup}"
    )


def _take(
    connector: str,
    options: Mapping[str, str],
    spec: Mapping[str, tuple[str, Convert]],
    prefixes: tuple[str, ...] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in options.items():
        key = name.lower()
        if key in spec:
            kwarg, convert = spec[key]
            out[kwarg] = convert(name, value)
        elif any(key.startswith(p) for p in prefixes):
            out.setdefault("__prefixed", {})[name] = value
        else:
            allowed = list(spec) + [p + "<name>" for p in prefixes]
            meant = did_you_mean(key.replace("_", "-"), spec) or did_you_mean(key, spec)
            raise SqlError(
                name,
                shown(name, value),
                _valid(connector, allowed),
                reason="unknown option" + (f" (did you mean {meant!r}?)" if meant else ""),
            )
    return out


def _required(connector: str, given: Mapping[str, Any], kwarg: str, option: str) -> None:
    if kwarg not in given:
        raise SqlError(
            option, None, f"'{option}' = '...' for 'connector' = '{connector}'", reason="missing"
        )


def _with_credentials(url: str, user: str | None, password: str | None) -> str:
    if user is None and password is None:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    userinfo = quote(user or parts.username or "", safe="")
    if password is None and parts.password is not None:  # 'username' alone keeps the URL's
        password = unquote(parts.password)
    if password is not None:
        userinfo += ":" + quote(password, safe="")
    return urlunsplit((parts.scheme, f"{userinfo}@{host}", parts.path, parts.query, parts.fragment))


# One table per connector, DDL option -> (constructor parameter, converter). Shared names (url,
# username, password...) repeat on purpose: each table is that connector's whole list, which an
# unknown-option error shows as it is.
_JDBC = {
    "url": ("url", _str),
    "table-name": ("table", _str),
    "username": ("username", _str),
    "password": ("password", _str),
    "driver": ("driver", _str),
    "connection.max-retry-timeout": ("connect_timeout", _seconds),
    "scan.fetch-size": ("scan_batch_size", _int),
}
_POSTGRES = {
    "url": ("url", _str),
    "table-name": ("table", _str),
    "query": ("query", _str),
    "username": ("username", _str),
    "password": ("password", _str),
    "pool-size": ("pool_size", _int),
    "command-timeout": ("command_timeout", _seconds),
    "connect-timeout": ("connect_timeout", _seconds),
    "scan-batch-size": ("scan_batch_size", _int),
    "application-name": ("application_name", _str),
}


def _postgres(
    connector: str, options: Mapping[str, str], columns: tuple[str, ...]
) -> ConnectorPlan:
    kwargs = _take(connector, options, _JDBC if connector == "jdbc" else _POSTGRES)
    _required(connector, kwargs, "url", "url")
    url = str(kwargs.pop("url"))
    user, password = kwargs.pop("username", None), kwargs.pop("password", None)
    if connector == "jdbc":
        driver = kwargs.pop("driver", "org.postgresql.Driver")
        if not url.lower().startswith("jdbc:postgresql://") or driver != "org.postgresql.Driver":
            raise SqlError(
                "url",
                shown("url", url),
                "'jdbc:postgresql://host:port/database' (PostgreSQL serves the jdbc connector; "
                "'driver', if given, 'org.postgresql.Driver')",
            )
        url, application = _pgjdbc_parameters(url[len("jdbc:") :], shown("url", url))
        if application is not None:  # asyncpg's server setting would override the URL's
            kwargs["application_name"] = application
        _required(connector, kwargs, "table", "table-name")
        kwargs.update(_as_flink_names_them(str(kwargs.pop("table")), columns))
    if "://" in url:
        dsn = _with_credentials(url, user, password)
    else:  # libpq key=value: each value quoted, its \ and ' escaped
        extra = [
            f"{key}={_libpq_value(value)}"
            for key, value in (("user", user), ("password", password))
            if value
        ]
        dsn = " ".join([url, *extra])
    kwargs.update(dsn=dsn, columns=columns)
    return ConnectorPlan(
        connector, PostgresConnector, kwargs, flexible=True, key_param="key_columns"
    )


_UNQUOTED = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
_DOTS = re.compile(r'\.(?=(?:[^"]*"[^"]*")*[^"]*\Z)')  # the dots outside double quotes


def _postgres_reads(name: str) -> str:
    """A name as PostgreSQL reads it in Flink's statements: Flink's jdbc dialect sends names
    unquoted, so PostgreSQL folds them to lower case (``Customers`` is ``customers``); a name
    written in double quotes keeps its case. A name no unquoted identifier can spell (Flink's
    statement would fail) is taken exactly."""
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name.lower() if _UNQUOTED.match(name) else name


def _as_flink_names_them(table: str, columns: tuple[str, ...]) -> dict[str, Any]:
    """The ``jdbc`` connector's relation as Flink reaches it (:func:`_postgres_reads`): its
    ``table``, or, when a DDL column's name folds to another (``ID`` is the column ``id``),
    a ``query`` that selects each column under its DDL name."""
    parts = tuple(_postgres_reads(part) for part in _DOTS.split(table))
    renamed = {column: _postgres_reads(column) for column in columns}
    if all(name == column for column, name in renamed.items()):
        return {"table": parts}
    relation = ".".join(quote_ident(part) for part in parts)
    selected = ", ".join(f"{quote_ident(n)} AS {quote_ident(c)}" for c, n in renamed.items())
    return {"query": f"SELECT {selected} FROM {relation}"}


# pgjdbc's URL parameters and their names for asyncpg (an unknown one would reach the server as
# a setting: "unrecognized configuration parameter" in every task)
_PGJDBC = {
    "currentschema": "search_path",
    "applicationname": "application_name",
    **{name: name for name in ("sslmode", "sslcert", "sslkey", "sslrootcert", "sslpassword")},
    "user": "user",
    "password": "password",
}


def _pgjdbc_parameters(url: str, shown_url: str) -> tuple[str, str | None]:
    """A ``postgresql://`` URL whose pgjdbc parameters (``?currentSchema=...``) are renamed as
    asyncpg reads them, and the ``ApplicationName`` (the connector's ``application_name``);
    any other parameter is an error naming it."""
    parts = urlsplit(url)
    if not parts.query:
        return url, None
    pairs = []
    application = None
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        renamed = _PGJDBC.get(name.lower())
        if renamed is None:
            raise SqlError(
                "url",
                shown_url,
                "a jdbc:postgresql:// URL with the pgjdbc parameters currentSchema, "
                "ApplicationName, sslmode, sslcert, sslkey, sslrootcert, sslpassword, user, "
                "password",
                reason=f"its parameter {name!r} has no equivalent here",
            )
        if renamed == "application_name":
            application = value or None  # empty: the connector's default
            continue
        pairs.append((renamed, value))
    return urlunsplit(parts._replace(query=urlencode(pairs))), application


def _libpq_value(value: str) -> str:
    """``value`` as a quoted libpq connection-string value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_HTTP = {
    "url": ("url", _str),
    "rows-field": ("rows_field", _str),
    "batch-rows-field": ("batch_rows_field", _str),
    "scan-rows-field": ("scan_rows_field", _str),
    "miss-statuses": ("miss_statuses", _ints),
    "transient-statuses": ("transient_statuses", _ints),
    "username": ("username", _str),
    "password": ("password", _str),
    "bearer-token": ("bearer_token", _str),
    "timeout": ("timeout", _seconds),
    "batch-url": ("batch_url", _str),
    "batch-mode": ("batch_mode", _str),
    "batch-field": ("batch_field", _str),
    "batch-size": ("batch_size", _int),
    "scan-url": ("scan_url", _str),
    "next-field": ("next_field", _str),
    "cursor-param": ("cursor_param", _str),
    "max-connections": ("max_connections", _int),
}
_REDIS = {
    "url": ("url", _str),
    "key-template": ("key_template", _str),
    "value-format": ("value_format", _str),
    "username": ("username", _str),
    "password": ("password", _str),
    "max-connections": ("max_connections", _int),
    "socket-timeout": ("socket_timeout", _seconds),
    "client-name": ("client_name", _str),
    "scan-count": ("scan_count", _int),
    "pool-timeout": ("pool_timeout", _seconds),
}
_INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")


def _in_ddl_order(
    factory: Callable[..., Any], kwargs: dict[str, Any], columns: tuple[str, ...], name: str
) -> tuple[str, ...]:
    """The template's placeholders in DDL column order (the order lookup keys come in)."""
    placeholders = tuple(factory(**kwargs).key_columns)
    missing = [p for p in placeholders if p not in columns]
    if missing:
        raise SqlError(name, missing, f"placeholders naming columns of the table: {list(columns)}")
    return tuple(c for c in columns if c in placeholders)


def _http(options: Mapping[str, str], columns: tuple[str, ...]) -> ConnectorPlan:
    kwargs = _take("http", options, _HTTP, prefixes=("header.",))
    _required("http", kwargs, "url", "url")
    for needs, options_of in (
        ("batch_url", ("batch_mode", "batch_field", "batch_size", "batch_rows_field")),
        ("scan_url", ("next_field", "cursor_param", "scan_rows_field")),
    ):
        unused = [o for o in options_of if o in kwargs]
        if unused and needs not in kwargs:  # accepted, and then nothing would use them
            raise SqlError(
                needs.replace("_", "-"),
                None,
                "a URL, which "
                + ", ".join(repr(o.replace("_", "-")) for o in unused)
                + " configure",
                reason="they are given without it",
            )
    headers = kwargs.pop("__prefixed", {})
    if headers:
        kwargs["headers"] = {k[len("header.") :]: v for k, v in headers.items()}
    user, password = kwargs.pop("username", None), kwargs.pop("password", None)
    if user is not None or password is not None:
        kwargs["basic_auth"] = (user or "", password or "")
    key = _in_ddl_order(HttpConnector, kwargs, columns, "url")
    kwargs["key_columns"] = key
    return ConnectorPlan("http", HttpConnector, kwargs, fixed_key=key)


def _redis(
    options: Mapping[str, str], columns: tuple[str, ...], types: Mapping[str, str]
) -> ConnectorPlan:
    kwargs = _take("redis", options, _REDIS)
    _required("redis", kwargs, "url", "url")
    _required("redis", kwargs, "key_template", "key-template")
    user, password = kwargs.pop("username", None), kwargs.pop("password", None)
    kwargs["url"] = _with_credentials(kwargs["url"], user, password)
    key = _in_ddl_order(RedisConnector, kwargs, columns, "key-template")
    if kwargs.get("value_format") == "hash":  # every field of a hash is text
        typed = [c for c in columns if c not in key and types[c].split()[0].upper() != "STRING"]
        if typed:
            raise SqlError(
                typed[0],
                types[typed[0]],
                "STRING for a field of a Redis hash ('value-format'='hash': every field is "
                "text; CAST it in the SELECT)",
            )
    converters = {c: f for c in key if (f := _key_converter(types[c])) is not None}
    kwargs.update(key_columns=key, key_types=converters or None)
    return ConnectorPlan("redis", RedisConnector, kwargs, fixed_key=key)


def _key_converter(declared: str) -> Callable[[str], Any] | None:
    """How a FULL cache reads a key column of the declared type back from a scanned key name
    (``None``: as text). The scan keeps a name only if the value converted back writes it
    again (``RedisConnector.parse_key``): ``2024-1-5`` or ``1.5`` for a DECIMAL(10, 2) key
    are not the names a lookup reads."""
    kind = declared.split("(")[0].split()[0].upper()
    if kind in _INTEGRAL:
        return int
    if kind in ("FLOAT", "DOUBLE"):
        return float
    if kind == "DATE":
        return date.fromisoformat
    if kind == "TIMESTAMP_NTZ":
        return datetime.fromisoformat
    if kind == "BOOLEAN":
        return _boolean_key
    if kind in ("DECIMAL", "NUMERIC", "DEC"):
        precision_scale = declared.split("(", 1)[1].split(")")[0] if "(" in declared else ""
        scale = int(precision_scale.split(",")[1]) if "," in precision_scale else 0
        return partial(_decimal_key, scale=scale)
    return None


def _decimal_key(text: str, scale: int) -> Decimal:
    value = Decimal(text)  # a lookup writes the key with the column's scale: 1.50, not 1.5
    if not value.is_finite() or value.as_tuple().exponent != -scale:
        raise ValueError(text)
    return value


def _boolean_key(text: str) -> bool:
    if text not in ("True", "False"):  # str() of a bool, as a lookup writes the key
        raise ValueError(text)
    return text == "True"


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")  # ASCII: str.isdigit takes '²' and '٣'


def _convert_like(default: Any) -> Convert:
    if isinstance(default, bool):
        return _bool
    if isinstance(default, int):
        return _int
    if isinstance(default, float):
        return lambda o, v: float(v) if _DECIMAL.fullmatch(v.strip()) else _seconds(o, v)
    if isinstance(default, (tuple, list)):
        return lambda o, v: tuple(p.strip() for p in v.split(",") if p.strip())
    return _str


def _registered_spec(name: str) -> dict[str, tuple[str, Convert]]:
    factory = connector_factory(name)
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    return {
        p.name.replace("_", "-"): (p.name, _convert_like(p.default))
        for p in parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _registered(name: str, options: Mapping[str, str], columns: tuple[str, ...]) -> ConnectorPlan:
    factory = connector_factory(name)
    spec = _registered_spec(name)
    spelled = {k.replace("_", "-"): v for k, v in options.items()}
    kwargs = _take(name, spelled, spec)
    key_param = "key_columns" if "key-columns" in spec and "key_columns" not in kwargs else None
    if "columns" in spec and "columns" not in kwargs:
        kwargs["columns"] = columns
    fixed = None
    if key_param is None:
        declared = getattr(factory(**kwargs), "key_columns", None)
        fixed = tuple(declared) if isinstance(declared, (list, tuple)) and declared else None
    return ConnectorPlan(
        name, factory, kwargs, fixed_key=fixed, key_param=key_param, flexible=key_param is not None
    )


def known_connectors() -> list[str]:
    """Every name ``'connector'`` takes: the built-in ones and the registered ones."""
    return sorted({*BUILT_IN, *connector_names()})


def connector_allowed() -> str:
    return "one of " + ", ".join(repr(k) for k in known_connectors())


def _spec_names(name: str) -> set[str]:
    tables = {"jdbc": _JDBC, "postgres": _POSTGRES, "http": _HTTP, "redis": _REDIS}
    if name in tables:
        return set(tables[name])
    return {k.replace("_", "-") for k in _registered_spec(name)}


_BUILTIN = {"postgres": PostgresConnector, "http": HttpConnector, "redis": RedisConnector}


def _registered_over_builtin(name: str) -> bool:
    """Whether ``register_connector`` put a factory of the user's under a name this module
    maps onto a built-in connector (``jdbc`` included): the DDL builds theirs, as
    ``create_connector`` does."""
    if name != "jdbc" and name not in _BUILTIN:
        return False
    try:
        factory = connector_factory(name)
    except ConfigurationError:  # "jdbc", not registered
        return False
    return factory is not _BUILTIN.get(name)


def plan_connector(
    connector: str, options: Mapping[str, str], columns: tuple[str, ...], types: Mapping[str, str]
) -> ConnectorPlan:
    """Check the options for ``connector`` and say how to build it (raises naming the option).

    Options the connector does not take but that only other Flink operators read (``scan.*``,
    ``sink.*``, formats: :func:`~asyncio_lookup.lookup.flink_options.ignored`) are left out and
    listed in the plan's ``ignored``."""
    name = connector.strip().lower()
    if name not in known_connectors():
        raise SqlError(
            "connector", connector, connector_allowed(), reason="no connector of this name"
        )
    spec = _spec_names(name)
    skipped = tuple(
        k
        for k in options
        if ignored(k) and k.lower() not in spec and k.replace("_", "-") not in spec
    )
    options = {k: v for k, v in options.items() if k not in skipped}
    if _registered_over_builtin(name):
        plan = _registered(name, options, columns)
    elif name in ("jdbc", "postgres"):
        plan = _postgres(name, options, columns)
    elif name == "http":
        plan = _http(options, columns)
    elif name == "redis":
        plan = _redis(options, columns, types)
    else:
        plan = _registered(name, options, columns)
    return replace(plan, ignored=skipped)
